package retry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
)

// Holders keeps, per owner, the lock that owner holds through one handle.
// A hold ends with its lock (see redlock.Lock.Done: lost, expired, its
// Client closed, or released on the Lock itself): the owner holds nothing
// then, and one later call of the owner reports the loss. Losses wait for
// their reports, oldest first, even past a new hold: a release reports a
// loss before it touches a newer lock, which it might not belong to.
// Changes for one owner run one at a time (a blocked Lock holds up only
// its own owner, and a call that waits for it still ends with its
// context); reads never wait. The zero value is ready; it is safe for
// concurrent use.
type Holders struct {
	// Ended, if set, runs once for each hold that ends with its lock, as
	// soon as the lock ends: under the Holders' lock, so it must neither
	// block nor use them. Set it before the Holders are used.
	Ended func(owner string)
	// Anew makes a Take after the owner's lock ended take the lock anew,
	// for a lock that is not reentrant. Otherwise that Take is a failed
	// re-entry: it reports the loss, and the next Take takes the lock.
	Anew bool

	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	busy chan struct{} // holds a token while a change runs
	// lock is the lock held. It is stored under busy and Holders.mu, and
	// cleared under Holders.mu: the end of a lock needs no busy.
	lock  atomic.Pointer[redlock.Lock]
	turn  *Turn // the turn lock was taken with (see Wait); guarded by busy
	users int   // calls using this holder; guarded by Holders.mu
	// lost are the locks that ended while held, oldest first, until calls
	// report them; guarded by Holders.mu.
	lost []*redlock.Lock
	// unwatch stops the watch of lock's end (see Ended); guarded by
	// Holders.mu.
	unwatch func() bool
}

// errOwnerBusy is with's error when ctx ended while another change for the
// owner ran: nothing was done.
var errOwnerBusy = errors.New("gave up waiting for another call of this owner")

// with runs f with the owner's holder while no other change for the same
// owner runs. f reads and stores the holder's lock and turn; a holder left
// without a lock or a loss to report is forgotten. If another change runs,
// with returns refuse(o)'s error at once where it is not nil (refuse may
// be nil), and otherwise waits for that change or for ctx to end. A panic
// in f leaves the holder usable.
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
		if o.users--; o.users == 0 && o.lock.Load() == nil && len(o.lost) == 0 {
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

// hold stores l, taken with turn t, as the owner's lock; busy must be
// held. With Ended set, the hold ends as soon as l ends.
func (h *Holders) hold(owner string, o *holder, l *redlock.Lock, t *Turn) {
	o.turn = t
	ended := l.Context() // not under h.mu: it may report events
	h.mu.Lock()
	defer h.mu.Unlock()
	o.lock.Store(l) // earlier losses stay to be reported
	if h.Ended != nil {
		o.unwatch = context.AfterFunc(ended, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if o.lock.Load() == l { // else released, or ended already
				h.endLocked(owner, o, l)
			}
		})
	}
}

// endLocked ends the hold of l, which ended; h.mu must be held, and o's
// lock must be l.
func (h *Holders) endLocked(owner string, o *holder, l *redlock.Lock) {
	h.forgetLocked(o)
	o.lost = append(o.lost, l)
	if h.Ended != nil {
		h.Ended(owner)
	}
}

// forgetLocked drops o's lock; h.mu must be held. The turn stays, guarded
// by busy: the next hold sets it. Losses to report stay too.
func (h *Holders) forgetLocked(o *holder) {
	o.lock.Store(nil)
	if o.unwatch != nil {
		o.unwatch()
		o.unwatch = nil
	}
}

// liveLocked returns o's lock, or nil; a lock that ended is no longer
// held, and its hold ends here if it has not yet. h.mu must be held.
func (h *Holders) liveLocked(owner string, o *holder) *redlock.Lock {
	l := o.lock.Load()
	if l == nil {
		return nil
	}
	if !l.Held() { // not Done, which reports events: no Observer under h.mu
		h.endLocked(owner, o, l)
		return nil
	}
	return l
}

// reportLocked returns, and forgets, the oldest lock of o that ended and
// was not reported yet, or nil; h.mu must be held.
func (h *Holders) reportLocked(o *holder) *redlock.Lock {
	if len(o.lost) == 0 {
		return nil
	}
	l := o.lost[0]
	o.lost[0] = nil
	o.lost = o.lost[1:]
	return l
}

// settle forgets l, the owner's lock, if it ended during a round of it
// that failed with err: err reports the loss. busy must be held.
func (h *Holders) settle(owner string, o *holder, l *redlock.Lock, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.liveLocked(owner, o) == nil {
		o.lost = slices.DeleteFunc(o.lost, func(x *redlock.Lock) bool { return x == l })
	}
}

// Lost returns the error of a call, op on key, that found the lock of who
// (such as "this Mutex") ended while held: it wraps redlock.ErrNotHeld and
// l.Err, the cause.
func Lost(op, key, who string, l *redlock.Lock) error {
	cause := l.Err()
	if errors.Is(cause, redlock.ErrNotHeld) {
		return fmt.Errorf("%s %s: %s lost the lock: %w", op, clip.Quote(key), who, cause)
	}
	return fmt.Errorf("%w: %s %s: %s lost the lock: %w", redlock.ErrNotHeld, op, clip.Quote(key), who, cause)
}

// Get returns the oldest lock the owner held here that ended, until a
// call of the owner reports the loss; else the lock it holds; else nil.
// A loss comes first: the caller may be the one that held it. It does not
// wait.
func (h *Holders) Get(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		l := h.liveLocked(owner, o)
		if len(o.lost) > 0 {
			return o.lost[0]
		}
		return l
	}
	return nil
}

// Holding returns the lock the owner holds here, or nil: a lock that
// ended is not held. It does not wait.
func (h *Holders) Holding(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		return h.liveLocked(owner, o)
	}
	return nil
}

// Take adds a hold for owner: it re-enters the lock the owner holds here,
// else calls try once, or through Wait when block. A new lock is renewed
// automatically with opts.AutoRenew. Unless h.Anew, a Take after the
// owner's lock ended reports the loss (see Lost) as a failed re-entry.
//
// Another call for owner under way makes it wait (block) or fail at once
// with an error wrapping redlock.ErrNotObtained.
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	var refuse func(*holder) error
	if !block {
		refuse = func(*holder) error {
			return fmt.Errorf("%w: acquire %s: another call of owner %q is under way", redlock.ErrNotObtained, clip.Quote(key), owner)
		}
	}
	err := h.with(ctx, owner, refuse, func(o *holder) error {
		h.mu.Lock()
		l, ended := h.liveLocked(owner, o), (*redlock.Lock)(nil)
		if l == nil && !h.Anew {
			ended = h.reportLocked(o)
		}
		h.mu.Unlock()
		switch {
		case l != nil:
			err := l.Reenter(ctx)
			h.settle(owner, o, l, err)
			return err
		case ended != nil:
			return Lost("reenter", key, fmt.Sprintf("owner %q", owner), ended)
		}
		var t *Turn
		var err error
		if block {
			l, t, err = Wait(ctx, c, key, wakeAll, opts, try)
		} else if l, err = try(ctx); err == nil && opts.AutoRenew {
			l.AutoRenew()
		}
		if err != nil {
			return err
		}
		h.hold(owner, o, l, t)
		return nil
	})
	if errors.Is(err, errOwnerBusy) {
		return fmt.Errorf("%w: acquire %s: %w", redlock.ErrNotObtained, clip.Quote(key), err)
	}
	return err
}

// Release removes one of owner's holds; it forgets the lock after the
// last, or once its client is closed.
// It returns an error wrapping redlock.ErrNotHeld if owner holds nothing
// here, at once even while a Lock of owner waits; op and key name the call
// in its errors, which report a lock that ended while held (see Lost). It
// waits for another change of owner's holds under way; if ctx ends first,
// it returns an error matching ctx.Err() and the hold is kept.
func (h *Holders) Release(ctx context.Context, owner, op, key string) error {
	// notHeld is the error of a call that found no lock to release; lost
	// is the loss it reports, if any, taken under h.mu. Built outside it:
	// Lost asks the lock's Err, which may report events.
	notHeld := func(lost *redlock.Lock) error {
		if lost != nil {
			return Lost(op, key, fmt.Sprintf("owner %q", owner), lost)
		}
		return fmt.Errorf("%w: %s %s: owner %q holds nothing here", redlock.ErrNotHeld, op, clip.Quote(key), owner)
	}
	// releasable returns o's live lock where no loss waits to be reported
	// first; else nil, and the loss it reports, if any.
	releasable := func(o *holder) (l, lost *redlock.Lock) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if l = h.liveLocked(owner, o); l == nil || len(o.lost) > 0 {
			return nil, h.reportLocked(o)
		}
		return l, nil
	}
	refuse := func(o *holder) error {
		if l, lost := releasable(o); l == nil {
			return notHeld(lost)
		}
		return nil
	}
	err := h.with(ctx, owner, refuse, func(o *holder) error {
		l, lost := releasable(o)
		if l == nil {
			return notHeld(lost)
		}
		t := o.turn
		last := l.Holds() <= 1 // not under h.mu: it waits for a round of l
		if last {
			// Forgotten before the release, whose end of l is no loss.
			h.mu.Lock()
			if h.liveLocked(owner, o) != l { // it ended meanwhile
				lost := h.reportLocked(o)
				h.mu.Unlock()
				return notHeld(lost)
			}
			h.forgetLocked(o)
			h.mu.Unlock()
		}
		released := Release(ctx, l, t, nil)
		if !last {
			h.settle(owner, o, l, released)
			// A closed client's locks are left to expire, holds and all.
			if errors.Is(released, redlock.ErrClosed) {
				h.mu.Lock()
				h.forgetLocked(o)
				h.mu.Unlock()
			}
		}
		return released
	})
	if errors.Is(err, errOwnerBusy) {
		return fmt.Errorf("%s %s: %w", op, clip.Quote(key), err)
	}
	return err
}

// Drop forgets the lock owner holds here and returns it and the turn it
// was taken with (see Release). Where a lock that ended while held was not
// reported yet, it returns instead the oldest such (see Lost), and keeps
// the hold. Else nothing: at once, without waiting, while a Lock of owner
// is under way.
func (h *Holders) Drop(owner string) (l *redlock.Lock, t *Turn, ended *redlock.Lock) {
	_ = h.with(context.Background(), owner, func(o *holder) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		ended = h.reportLocked(o)
		return errOwnerBusy
	}, func(o *holder) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if l = h.liveLocked(owner, o); l == nil || len(o.lost) > 0 {
			l, ended = nil, h.reportLocked(o)
			return nil
		}
		t = o.turn
		h.forgetLocked(o)
		return nil
	})
	return l, t, ended
}
