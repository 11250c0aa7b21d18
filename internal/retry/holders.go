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
// A hold ends with its lock: lost, expired, its Client closed, or
// released on the Lock itself. The owner then holds nothing, and one
// later call of the owner reports the loss. Losses wait for their
// reports, oldest first, even past a new hold. A release reports a loss
// before it touches a newer lock, which it might not belong to. Changes
// for one owner run one at a time, each with its Turn. A blocked Lock
// holds up only its own owner. A call that waits for it still ends with
// its context. Reads never wait. The zero value is ready. It is safe for
// concurrent use.
//
// Lock order: Holders.mu, then Turn.mu, then queuesMu. Holders.mu is never
// held across a round, nor while a Lock may report events: Done, Err and
// Context may call the Observer.
type Holders struct {
	// Mutex makes these the holds of a Mutex. They are not reentrant, so a
	// Take after the owner's lock ended takes the lock anew. A hold keeps
	// the owner's turn until it ends, so the next Take waits for it. Set
	// it before the Holders are used.
	Mutex bool

	// mu guards m, and each holder's turn, users, lost and unwatch.
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	busy chan struct{} // holds a token while a Turn has the owner's place
	// lock is the lock held. It is stored under the owner's place and
	// Holders.mu. It is cleared under Holders.mu alone: the end of a lock
	// needs no place. Atomic, as Get's callers read it without a place.
	lock  atomic.Pointer[redlock.Lock]
	turn  *Turn // the turn lock's hold keeps, or nil; guarded by Holders.mu
	users int   // calls using this holder; guarded by Holders.mu
	// lost are the locks that ended while held, oldest first, until calls
	// report them. Guarded by Holders.mu.
	lost []*redlock.Lock
	// unwatch stops the watch of lock's end. Guarded by Holders.mu.
	unwatch func() bool
}

// errOwnerBusy is take's error when ctx ended while another change for
// the owner ran. Nothing was done.
var errOwnerBusy = errors.New("gave up waiting for another call of this owner")

// take returns the owner's holder and a Turn holding the owner's place,
// once no other Turn holds it. If one does, take asks refuse(o), unless
// refuse is nil. It returns a non-nil error of refuse at once. Otherwise
// it waits for that Turn or for ctx to end. The caller calls done with
// both.
func (h *Holders) take(ctx context.Context, owner string, refuse func(o *holder) error) (*holder, *Turn, error) {
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
	select {
	case o.busy <- struct{}{}:
	default:
		var err error
		if refuse != nil {
			err = refuse(o)
		}
		if err == nil {
			select {
			case o.busy <- struct{}{}:
			case <-ctx.Done():
				err = fmt.Errorf("%w: %w", errOwnerBusy, ctx.Err())
			}
		}
		if err != nil {
			h.done(owner, o, nil)
			return nil, nil, err
		}
	}
	return o, &Turn{busy: o.busy}, nil
}

// done ends a call that took t, or nil if it got no turn. It gives up
// what the owner's hold does not keep of t. A holder left without a lock
// or a loss to report is forgotten. A Mutex's holder stays.
func (h *Holders) done(owner string, o *holder, t *Turn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t != nil && o.turn != t {
		t.give()
	} else if t != nil && !h.Mutex {
		t.leaveOwner()
	}
	// Another call for the owner may have stored a lock since: look again.
	if o.users--; o.users == 0 && !h.Mutex && o.lock.Load() == nil && len(o.lost) == 0 {
		delete(h.m, owner)
	}
}

// with runs f with the owner's holder and a Turn holding the owner's
// place. A panic in f leaves the holder usable.
func (h *Holders) with(ctx context.Context, owner string, refuse func(o *holder) error, f func(o *holder, t *Turn) error) error {
	o, t, err := h.take(ctx, owner, refuse)
	if err != nil {
		return err
	}
	defer h.done(owner, o, t)
	return f(o, t)
}

// hold stores l as the owner's lock. t must hold the owner's place. The
// hold keeps t if t holds the process's place, or if h.Mutex. It then
// gives t up as soon as l ends.
func (h *Holders) hold(o *holder, l *redlock.Lock, t *Turn) {
	keep := h.Mutex || t.lined()
	var ended context.Context
	if keep {
		ended = l.Context() // not under h.mu: it may report events
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	o.lock.Store(l) // earlier losses stay to be reported
	if !keep {
		return
	}
	o.turn = t
	o.unwatch = context.AfterFunc(ended, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if o.lock.Load() == l { // else released, or ended already
			h.endLocked(o, l)
		}
	})
}

// endLocked ends the hold of l, which ended, and gives its turn up. h.mu
// must be held, and o's lock must be l.
func (h *Holders) endLocked(o *holder, l *redlock.Lock) {
	h.forgetLocked(o).give()
	o.lost = append(o.lost, l)
}

// forgetLocked drops o's lock and returns the turn its hold kept, or
// nil. h.mu must be held. Losses to report stay.
func (h *Holders) forgetLocked(o *holder) *Turn {
	o.lock.Store(nil)
	if o.unwatch != nil {
		o.unwatch()
		o.unwatch = nil
	}
	t := o.turn
	o.turn = nil
	return t
}

// liveLocked returns o's lock, or nil. A lock that ended is no longer
// held; its hold ends here if it has not yet. h.mu must be held.
func (h *Holders) liveLocked(o *holder) *redlock.Lock {
	l := o.lock.Load()
	if l == nil {
		return nil
	}
	if !l.Held() { // not Done, which reports events: no Observer under h.mu
		h.endLocked(o, l)
		return nil
	}
	return l
}

// reportLocked returns, and forgets, the oldest lock of o that ended and
// was not reported yet, or nil. h.mu must be held.
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
// that failed with err. err then reports the loss. The caller holds the
// owner's place.
func (h *Holders) settle(o *holder, l *redlock.Lock, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.liveLocked(o) == nil {
		o.lost = slices.DeleteFunc(o.lost, func(x *redlock.Lock) bool { return x == l })
	}
}

// Lost returns the error of a call, op on key, that found the lock of who
// (such as "this Mutex") ended while held. It wraps redlock.ErrNotHeld
// and l.Err, the cause.
func Lost(op, key, who string, l *redlock.Lock) error {
	cause := l.Err()
	if errors.Is(cause, redlock.ErrNotHeld) {
		return fmt.Errorf("%s %s: %s lost the lock: %w", op, clip.Quote(key), who, cause)
	}
	return fmt.Errorf("%w: %s %s: %s lost the lock: %w", redlock.ErrNotHeld, op, clip.Quote(key), who, cause)
}

// Get returns the oldest lock the owner held here that ended, until a
// call of the owner reports the loss. Else it returns the lock the owner
// holds, or nil. A loss comes first: the caller may be the one that held
// it. Get does not wait.
func (h *Holders) Get(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		l := h.liveLocked(o)
		if len(o.lost) > 0 {
			return o.lost[0]
		}
		return l
	}
	return nil
}

// Holding returns the lock the owner holds here, or nil. A lock that
// ended is not held. It does not wait.
func (h *Holders) Holding(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		return h.liveLocked(o)
	}
	return nil
}

// Take adds a hold for owner. It re-enters the lock the owner holds
// here. Else it calls try once, or through Wait when block. A new lock is
// renewed automatically with opts.AutoRenew. Unless h.Mutex, a Take after
// the owner's lock ended reports the loss as a failed re-entry.
//
// Another call for owner under way makes it wait (block). Else it fails
// at once with an error wrapping redlock.ErrNotObtained. For a Mutex,
// that call is its hold too.
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	var refuse func(*holder) error
	if !block {
		refuse = func(*holder) error {
			if h.Mutex {
				return fmt.Errorf("%w: acquire %s: this Mutex holds it", redlock.ErrNotObtained, clip.Quote(key))
			}
			return fmt.Errorf("%w: acquire %s: another call of owner %q is under way", redlock.ErrNotObtained, clip.Quote(key), owner)
		}
	}
	err := h.with(ctx, owner, refuse, func(o *holder, t *Turn) error {
		h.mu.Lock()
		l, ended := h.liveLocked(o), (*redlock.Lock)(nil)
		if l == nil && !h.Mutex {
			ended = h.reportLocked(o)
		}
		h.mu.Unlock()
		switch {
		case l != nil:
			err := l.Reenter(ctx)
			h.settle(o, l, err)
			return err
		case ended != nil:
			return Lost("reenter", key, fmt.Sprintf("owner %q", owner), ended)
		}
		var err error
		if block {
			l, err = Wait(ctx, c, key, wakeAll, opts, t, try)
		} else if l, err = try(ctx); err == nil && opts.AutoRenew {
			l.AutoRenew()
		}
		if err != nil {
			return err
		}
		h.hold(o, l, t)
		return nil
	})
	if errors.Is(err, errOwnerBusy) {
		if h.Mutex {
			return fmt.Errorf("%w: acquire %s: gave up waiting for this Mutex's own holder: %w", redlock.ErrNotObtained, clip.Quote(key), ctx.Err())
		}
		return fmt.Errorf("%w: acquire %s: %w", redlock.ErrNotObtained, clip.Quote(key), err)
	}
	return err
}

// Release removes one of owner's holds. It forgets the lock after the
// last, or once its client is closed. It returns an error wrapping
// redlock.ErrNotHeld if owner holds nothing here. It does so at once,
// even while a Lock of owner waits. op and key name the call in its
// errors, which report a lock that ended while held. It waits for another
// change of owner's holds under way. If ctx ends first, it returns an
// error matching ctx.Err(), and the hold is kept.
func (h *Holders) Release(ctx context.Context, owner, op, key string) error {
	// notHeld is the error of a call that found no lock to release. lost
	// is the loss it reports, if any, taken under h.mu. The error is built
	// outside h.mu: Lost asks the lock's Err, which may report events.
	notHeld := func(lost *redlock.Lock) error {
		if lost != nil {
			return Lost(op, key, fmt.Sprintf("owner %q", owner), lost)
		}
		return fmt.Errorf("%w: %s %s: owner %q holds nothing here", redlock.ErrNotHeld, op, clip.Quote(key), owner)
	}
	// releasable returns o's live lock where no loss waits to be reported
	// first. Else it returns nil, and the loss it reports, if any.
	releasable := func(o *holder) (l, lost *redlock.Lock) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if l = h.liveLocked(o); l == nil || len(o.lost) > 0 {
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
	err := h.with(ctx, owner, refuse, func(o *holder, _ *Turn) error {
		l, lost := releasable(o)
		if l == nil {
			return notHeld(lost)
		}
		if l.Holds() > 1 { // not under h.mu: it waits for a round of l
			released := l.Release(ctx)
			h.settle(o, l, released)
			// A closed client's locks are left to expire, holds and all.
			if errors.Is(released, redlock.ErrClosed) {
				h.mu.Lock()
				h.forgetLocked(o).give()
				h.mu.Unlock()
			}
			return released
		}
		// Forgotten before the release, whose end of l is no loss.
		h.mu.Lock()
		if h.liveLocked(o) != l { // it ended meanwhile
			lost := h.reportLocked(o)
			h.mu.Unlock()
			return notHeld(lost)
		}
		t := h.forgetLocked(o)
		h.mu.Unlock()
		return Release(ctx, l, t)
	})
	if errors.Is(err, errOwnerBusy) {
		return fmt.Errorf("%s %s: %w", op, clip.Quote(key), err)
	}
	return err
}

// Drop forgets the lock of a Mutex. It returns it and the turn its hold
// kept, which the caller gives up with Release. A lock may have ended
// while held and not been reported yet. Drop then returns the oldest such
// instead, and keeps the hold. While a Lock of the Mutex is under way, it
// returns nothing, at once.
func (h *Holders) Drop() (l *redlock.Lock, t *Turn, ended *redlock.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.m[""]
	if o == nil {
		return nil, nil, nil
	}
	if l = h.liveLocked(o); l == nil || len(o.lost) > 0 {
		return nil, nil, h.reportLocked(o)
	}
	return l, h.forgetLocked(o), nil
}

// DropHeld forgets l, the lock of a Mutex, where its hold is still the
// Mutex's. It returns the turn that hold kept, which the caller gives up
// with Release. Where l ended while held and its loss was not reported,
// DropHeld forgets that loss and returns lost true. Else held is false:
// l was released, or its loss reported, by another call. Earlier losses
// of other locks stay to be reported. It does not wait.
func (h *Holders) DropHeld(l *redlock.Lock) (t *Turn, held, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.m[""]
	if o == nil {
		return nil, false, false
	}
	if h.liveLocked(o) == l {
		return h.forgetLocked(o), true, false
	}
	if i := slices.Index(o.lost, l); i >= 0 {
		o.lost = slices.Delete(o.lost, i, i+1)
		return nil, false, true
	}
	return nil, false, false
}
