package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/mutex"
)

// Leadership is a candidate's lead of an election, from its Campaign
// until it resigns or loses the lead. Its lock is renewed automatically.
// It is safe for concurrent use; Proclaim and Resign run one at a time.
type Leadership struct {
	e    *Election
	m    *mutex.Mutex // holds lock; one per Leadership
	lock *redlock.Lock
	// ctx is the leadership's life: its cause is nil while it leads,
	// ErrResigned after Resign, else why it was lost.
	ctx   context.Context
	end   context.CancelCauseFunc
	timer *time.Timer // ends the lead before the lock's validity; set before any use
	ended atomic.Bool // finish ran

	mu    sync.Mutex // serializes Proclaim and Resign; guards seq
	seq   uint64     // the last Proclaim's sequence number
	value atomic.Pointer[string]
}

// Campaign blocks until this candidate leads the election, then returns
// its Leadership with value published. Meanwhile it waits for the
// leader's lock, woken by its release as mutex.Mutex.Lock is (a fallback
// timer serves a lock that expires). Once the lock is won, one more
// quorum round records the win and the value in the election's history.
// If that round fails, Campaign resigns and waits again. Cancelling ctx
// ends the wait; nothing is left held on the masters, and the error
// matches ctx.Err(). A nil ctx, or a zero Election, gets an error
// wrapping redlock.ErrInvalidArgument.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.check(ctx, "Campaign"); err != nil {
		return nil, err
	}
	fail := func(err error) (*Leadership, error) {
		return nil, fmt.Errorf("election %s: campaign: %w", clip.Quote(e.name), err)
	}
	delay := e.opts.MinRetryDelay
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		m, err := mutex.New(e.client, e.name, &mutex.Options{TTL: e.opts.TTL, MinRetryDelay: e.opts.MinRetryDelay, MaxRetryDelay: e.opts.MaxRetryDelay, AutoRenew: true})
		if err != nil {
			return fail(err)
		}
		if err := m.Lock(ctx); err != nil {
			return fail(err)
		}
		l := e.lead(m, value)
		if err := ctx.Err(); err != nil {
			_ = l.Resign(context.WithoutCancel(ctx))
			return fail(err)
		}
		err = elections.Append(ctx, l.lock, link.Entry{Epoch: l.Epoch(), Value: value}, e.keep(), historyLen)
		if err == nil && l.ctx.Err() == nil {
			return l, nil
		}
		// Observers may have seen the win where it landed: the
		// resignation tells them it ended.
		_ = l.Resign(context.WithoutCancel(ctx))
		if errors.Is(err, redlock.ErrClosed) || errors.Is(err, redlock.ErrInvalidArgument) {
			return fail(err)
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-t.C:
			delay = min(2*delay, e.opts.MaxRetryDelay)
		case <-ctx.Done():
			t.Stop()
			return fail(fmt.Errorf("%w; gave up after: %w", ctx.Err(), err))
		}
	}
}

// keep is how long the history lives after its last entry.
func (e *Election) keep() time.Duration { return historyTTLs * e.opts.TTL }

// lead returns the Leadership of m's lock, with value published. It ends
// when the lock is lost, or guard before its validity runs out.
func (e *Election) lead(m *mutex.Mutex, value string) *Leadership {
	l := &Leadership{e: e, m: m, lock: m.Current()}
	l.value.Store(&value)
	l.ctx, l.end = context.WithCancelCause(context.Background())
	l.timer = time.AfterFunc(time.Hour, l.checkValidity)
	l.checkValidity() // arms the timer, or ends the lead at once
	context.AfterFunc(l.lock.Context(), func() {
		l.finish(fmt.Errorf("%w: election %s: %w", ErrLost, clip.Quote(e.name), context.Cause(l.lock.Context())))
	})
	return l
}

// checkValidity ends the lead if the lock's validity runs out within
// guard; else it arms the timer for then. A renewal moves the validity
// on, and the timer with it.
func (l *Leadership) checkValidity() {
	if l.ctx.Err() != nil {
		return
	}
	until := l.lock.Until()
	if left := time.Until(until) - l.e.guard; left > 0 {
		l.timer.Reset(left)
		return
	}
	if !l.finish(fmt.Errorf("%w: election %s: %w: the lock's validity runs out at %v, and no renewal moved it",
		ErrLost, clip.Quote(l.e.name), redlock.ErrNotHeld, until.Round(0))) {
		return // ended meanwhile, by another call
	}
	// A renewal may still land and keep the lock for good, shutting
	// every other candidate out. So let it go once that validity ends:
	// until then the lock fences out the next leader, as Done promised.
	time.AfterFunc(time.Until(until), l.letGo)
}

// letGo resigns after the lead ended without Resign. The caller's
// context is gone by then: the rounds get one of their own.
func (l *Leadership) letGo() {
	ctx, cancel := context.WithTimeout(context.Background(), l.e.opts.TTL)
	defer cancel()
	_ = l.Resign(ctx)
}

// finish ends the lead with cause, once. It reports whether this call
// ended it.
func (l *Leadership) finish(cause error) bool {
	if !l.ended.CompareAndSwap(false, true) {
		return false
	}
	l.end(cause)
	l.timer.Stop()
	return true
}

// Epoch returns the leadership's epoch: its lock's fencing token. It is
// larger than every earlier leader's epoch of the election. Hand it to
// the resources the leader writes to, as a fencing token.
func (l *Leadership) Epoch() uint64 { return l.lock.Token() }

// Value returns the value last published: Campaign's, or the last
// successful Proclaim's.
func (l *Leadership) Value() string { return *l.value.Load() }

// Done is closed when the leadership ends: Resign, the loss of its lock,
// or its lock's validity about to run out (a tenth of the TTL before)
// with no renewal in sight. It closes before the validity runs out,
// never after: work that stops on it stops while the lock still fences
// others out. After the guard, the lock is let go once that validity
// ends, even where a late renewal kept it and Resign is never called.
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while Done is open. Afterwards it returns ErrResigned
// after Resign, else an error wrapping ErrLost that says why.
func (l *Leadership) Err() error {
	l.checkValidity() // the timer may be late: a paused process
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Context returns a context that is cancelled when Done is closed, with
// Err as its cause (context.Cause).
func (l *Leadership) Context() context.Context { return l.ctx }

// Until returns when the leadership ends unless a renewal moves it: a
// tenth of the TTL before the lock's validity runs out.
func (l *Leadership) Until() time.Time { return l.lock.Until().Add(-l.e.guard) }

// Proclaim publishes value as the leader's without giving up the lead:
// a quorum round that writes it where this leader holds the lock, and
// appends it to the history for observers. It fails with an error
// wrapping ErrLost or ErrResigned once the leadership ended. A failed
// round may still have reached some masters, so Leader and Observe may
// report its value: proclaim again. Where the round proves the lock lost,
// the leadership ends. It blocks for one quorum round.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Proclaim %s: nil context", redlock.ErrInvalidArgument, clip.Quote(l.e.name))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err() != nil {
		return fmt.Errorf("election %s: proclaim: %w", clip.Quote(l.e.name), l.Err())
	}
	l.seq++ // even where the round fails: its entry may have landed
	err := elections.Append(ctx, l.lock, link.Entry{Epoch: l.Epoch(), Seq: l.seq, Value: value}, l.e.keep(), historyLen)
	if err != nil {
		return fmt.Errorf("election %s: proclaim: %w", clip.Quote(l.e.name), err)
	}
	l.value.Store(&value)
	return nil
}

// Resign gives the lead up: Done closes with ErrResigned at once, a
// resignation is recorded for observers, and the lock is released. The
// release wakes the candidates that wait, so the next one leads within
// about one round trip. The lock is released even if ctx has ended (the
// rounds are bounded by the client's MasterTimeout). It returns the
// release's error; nil where the leadership was lost before, as nothing
// was left to release. Calling it again does nothing.
func (l *Leadership) Resign(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Resign %s: nil context", redlock.ErrInvalidArgument, clip.Quote(l.e.name))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finish(ErrResigned)
	if l.m.Current() == nil { // released already
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	held := l.lock.Held()
	if held {
		// The resignation's seq follows the last Proclaim's. Where it
		// fails, observers see the release when they next read.
		_ = elections.Append(ctx, l.lock, link.Entry{Epoch: l.Epoch(), Seq: l.seq + 1, Resigned: true}, l.e.keep(), historyLen)
	}
	err := l.m.Unlock(ctx)
	if !held {
		return nil // the loss is Err's: nothing was sent
	}
	if err != nil {
		return fmt.Errorf("election %s: resign: %w", clip.Quote(l.e.name), err)
	}
	return nil
}
