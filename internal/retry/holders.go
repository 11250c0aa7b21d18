package retry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-redlock/redlock"
)

// Holders keeps, per owner, the lock that owner holds through one handle.
// Changes for one owner run one at a time (a blocked Lock holds up only
// its own owner); reads never wait. The zero value is ready; it is safe
// for concurrent use.
type Holders struct {
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	mu    sync.Mutex // serializes changes
	lock  atomic.Pointer[redlock.Lock]
	turn  *Turn // the turn lock was taken with (see Wait); guarded by mu
	users int   // calls using this holder; guarded by Holders.mu
}

// forget drops the holder's lock and turn; o.mu must be held.
func (o *holder) forget() {
	o.lock.Store(nil)
	o.turn = nil
}

// with runs f with the owner's holder while no other change for the same
// owner runs. f reads and stores the holder's lock and turn; a holder left
// without a lock is forgotten.
func (h *Holders) with(owner string, f func(o *holder) error) error {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*holder{}
	}
	o := h.m[owner]
	if o == nil {
		o = &holder{}
		h.m[owner] = o
	}
	o.users++
	h.mu.Unlock()

	o.mu.Lock()
	err := f(o)
	o.mu.Unlock()

	h.mu.Lock()
	// Another call for the owner may have stored a lock since: look again.
	if o.users--; o.users == 0 && o.lock.Load() == nil {
		delete(h.m, owner)
	}
	h.mu.Unlock()
	return err
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
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	return h.with(owner, func(o *holder) error {
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
}

// Release removes one of owner's holds; it forgets the lock after the last.
// It returns an error wrapping redlock.ErrNotHeld if owner holds nothing
// here; op and key name the call in that error.
func (h *Holders) Release(ctx context.Context, owner, op, key string) error {
	return h.with(owner, func(o *holder) error {
		l := o.lock.Load()
		if l == nil {
			return fmt.Errorf("%w: %s %q: owner %q holds nothing here", redlock.ErrNotHeld, op, key, owner)
		}
		err := Release(ctx, l, o.turn)
		if l.Holds() == 0 {
			o.forget()
		}
		return err
	})
}

// Drop forgets the lock owner holds here and returns it and the turn it
// was taken with (see Release), or nil and nil.
func (h *Holders) Drop(owner string) (*redlock.Lock, *Turn) {
	var l *redlock.Lock
	var t *Turn
	_ = h.with(owner, func(o *holder) error {
		l, t = o.lock.Load(), o.turn
		o.forget()
		return nil
	})
	return l, t
}
