package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-redlock/redlock"
)

// Holders keeps, per owner, the lock that owner holds through one handle.
// Changes for one owner run one at a time (a blocked Lock holds up only
// its own owner, and a call that waits for it still ends with its
// context); reads never wait. The zero value is ready; it is safe for
// concurrent use.
type Holders struct {
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	busy  chan struct{} // holds a token while a change runs
	lock  atomic.Pointer[redlock.Lock]
	turn  *Turn // the turn lock was taken with (see Wait); guarded by busy
	users int   // calls using this holder; guarded by Holders.mu
}

// forget drops the holder's lock and turn; busy must be held.
func (o *holder) forget() {
	o.lock.Store(nil)
	o.turn = nil
}

// errOwnerBusy is with's error when ctx ended while another change for the
// owner ran: nothing was done.
var errOwnerBusy = errors.New("gave up waiting for another call of this owner")

// with runs f with the owner's holder while no other change for the same
// owner runs. f reads and stores the holder's lock and turn; a holder left
// without a lock is forgotten. If another change runs, with returns
// refuse(o)'s error at once where it is not nil (refuse may be nil), and
// otherwise waits for that change or for ctx to end. A panic in f leaves
// the holder usable.
func (h *Holders) with(ctx context.Context, owner string, refuse, f func(o *holder) error) error {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*holder{}
	}
	o := h.m[owner]
	if o == nil {
		o = &holder{busy: make(chan struct{}, 1)}
		h.m[owner] = o
	}
	o.users++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		// Another call for the owner may have stored a lock since: look again.
		if o.users--; o.users == 0 && o.lock.Load() == nil {
			delete(h.m, owner)
		}
		h.mu.Unlock()
	}()

	select {
	case o.busy <- struct{}{}:
	default:
		if refuse != nil {
			if err := refuse(o); err != nil {
				return err
			}
		}
		select {
		case o.busy <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errOwnerBusy, ctx.Err())
		}
	}
	defer func() { <-o.busy }()
	return f(o)
}

// Get returns the lock the owner holds here, or nil. It does not wait.
func (h *Holders) Get(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		return o.lock.Load()
	}
	return nil
}

// Take adds a hold for owner: it re-enters the lock the owner holds here,
// else calls try once, or through Wait when block. A new lock is renewed
// automatically with opts.AutoRenew.
//
// Another call for owner under way makes it wait (block) or fail at once
// with an error wrapping redlock.ErrNotObtained.
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	var refuse func(*holder) error
	if !block {
		refuse = func(*holder) error {
			return fmt.Errorf("%w: acquire %q: another call of owner %q is under way", redlock.ErrNotObtained, key, owner)
		}
	}
	err := h.with(ctx, owner, refuse, func(o *holder) error {
		if l := o.lock.Load(); l != nil {
			return l.Reenter(ctx)
		}
		var l *redlock.Lock
		var err error
		if block {
			l, o.turn, err = Wait(ctx, c, key, wakeAll, opts, try)
		} else if l, err = try(ctx); err == nil && opts.AutoRenew {
			l.AutoRenew()
		}
		o.lock.Store(l)
		return err
	})
	if errors.Is(err, errOwnerBusy) {
		return fmt.Errorf("%w: acquire %q: %w", redlock.ErrNotObtained, key, err)
	}
	return err
}

// Release removes one of owner's holds; it forgets the lock after the
// last, or once its client is closed.
// It returns an error wrapping redlock.ErrNotHeld if owner holds nothing
// here, at once even while a Lock of owner waits; op and key name the call
// in its errors. It waits for another change of owner's holds under way;
// if ctx ends first, it returns an error matching ctx.Err() and the hold
// is kept.
func (h *Holders) Release(ctx context.Context, owner, op, key string) error {
	notHeld := func(o *holder) error {
		if o.lock.Load() == nil {
			return fmt.Errorf("%w: %s %q: owner %q holds nothing here", redlock.ErrNotHeld, op, key, owner)
		}
		return nil
	}
	err := h.with(ctx, owner, notHeld, func(o *holder) error {
		if err := notHeld(o); err != nil {
			return err
		}
		l := o.lock.Load()
		var released error
		defer func() {
			// A closed client's locks are left to expire, holds and all.
			if l.Holds() == 0 || errors.Is(released, redlock.ErrClosed) {
				o.forget()
			}
		}()
		released = Release(ctx, l, o.turn, nil)
		return released
	})
	if errors.Is(err, errOwnerBusy) {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	return err
}

// Drop forgets the lock owner holds here and returns it and the turn it
// was taken with (see Release), or nil and nil: at once, without waiting,
// while a Lock of owner is under way.
func (h *Holders) Drop(owner string) (*redlock.Lock, *Turn) {
	var l *redlock.Lock
	var t *Turn
	_ = h.with(context.Background(), owner, func(*holder) error { return errOwnerBusy }, func(o *holder) error {
		l, t = o.lock.Load(), o.turn
		o.forget()
		return nil
	})
	return l, t
}
