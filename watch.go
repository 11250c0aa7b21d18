package redlock

import (
	"context"
	"fmt"
	"time"
)

// lostSignal closes done, and cancels ctx, when the lock is lost.
type lostSignal struct {
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // fires at the lock's deadline
}

// signal returns the lock's lost-lock signal, made on first use so that
// locks nobody watches cost nothing.
func (l *Lock) signal() *lostSignal {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if l.sig == nil {
		s := &lostSignal{done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		s.timer = time.AfterFunc(time.Until(l.Until()), l.expire)
		l.sig = s
		if l.lostErr != nil {
			s.timer.Stop()
			close(s.done)
			s.cancel(l.lostErr)
		}
	}
	return l.sig
}

// expire runs at the lock's deadline; an Extend may have moved it since.
// Deciding under sigMu keeps it atomic with setUntil.
func (l *Lock) expire() {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if until := l.Until(); time.Now().Before(until) {
		if l.lostErr == nil {
			l.sig.timer.Reset(time.Until(until))
		}
		return
	}
	l.loseLocked(fmt.Errorf("%w: %q: validity ran out at %v", ErrNotHeld, l.key, l.Until().Round(0)))
}

// lose records why the lock is lost, once, and fires the signal.
func (l *Lock) lose(err error) {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	l.loseLocked(err)
}

func (l *Lock) loseLocked(err error) {
	if l.lostErr != nil {
		return
	}
	l.lostErr = err
	if s := l.sig; s != nil {
		s.timer.Stop()
		close(s.done)
		s.cancel(err)
	}
}

// Done returns a channel that is closed when the lock is no longer held:
// its validity ran out without renewal, auto-renewal could not reach a
// quorum in time, or the last Release. Err then tells why. Work done under
// the lock can select on it.
func (l *Lock) Done() <-chan struct{} { return l.signal().done }

// Err returns nil while Done is open; afterwards ErrReleased after the last
// Release, or an error wrapping ErrNotHeld that says how the lock was lost.
func (l *Lock) Err() error {
	select {
	case <-l.signal().done:
		l.sigMu.Lock()
		defer l.sigMu.Unlock()
		return l.lostErr
	default:
		return nil
	}
}

// Context returns a context that is cancelled when Done is closed, with
// Err as its cause (context.Cause).
func (l *Lock) Context() context.Context { return l.signal().ctx }

// renewal is a running auto-renewal.
type renewal struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *renewal) stop() {
	r.cancel()
	<-r.done
}

// AutoRenew keeps the lock held until its last Release: it extends the lock
// by its current TTL over the quorum after about a third of the TTL, and
// retries sooner after a failure. A failure on a minority of masters does
// not matter (the quorum still extends). If renewal cannot reach a quorum
// before the validity would run out, the lock is lost: Done closes, with
// the last renewal error in Err. The last Release stops renewal before it
// returns; no renewal runs after. Calling AutoRenew again is a no-op.
func (l *Lock) AutoRenew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renew == nil && l.holds > 0 {
		l.startRenewal()
	}
}

// startRenewal starts the renewal goroutine; l.mu must be held.
func (l *Lock) startRenewal() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &renewal{cancel: cancel, done: make(chan struct{})}
	l.renew = r
	go l.renewLoop(ctx, r)
}

func (l *Lock) renewLoop(ctx context.Context, r *renewal) {
	defer close(r.done)
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	retry := max(ttl/10, l.client.nodeTimeout)
	wait := time.Until(l.Until()) - 2*ttl/3
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
			return
		case <-timer.C:
		}
		err := l.Extend(ctx, ttl)
		switch {
		case err == nil:
			wait = time.Until(l.Until()) - 2*ttl/3
		case ctx.Err() != nil:
			return
		case time.Until(l.Until()) < retry+l.client.nodeTimeout:
			// The next attempt could not finish in time.
			l.lose(fmt.Errorf("%w: %q: renewal failed: %w", ErrNotHeld, l.key, err))
			return
		default:
			wait = retry
		}
		timer.Reset(max(wait, 0))
	}
}
