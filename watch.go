package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// lostSignal closes done, and cancels ctx, when the lock is lost.
type lostSignal struct {
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // fires at the lock's deadline; nil if made lost
}

// endedSignal returns a signal that fired with err.
func endedSignal(err error) *lostSignal {
	s := &lostSignal{done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	close(s.done)
	s.cancel(err)
	return s
}

// The signals of every nil and zero Lock.
var (
	nilLockSignal  = endedSignal(errNilLock)
	zeroLockSignal = endedSignal(errZeroLock)
)

// signal returns the lock's lost-lock signal, made on first use so that
// locks nobody watches cost nothing. A lock with a signal is tracked by
// its client until it is lost, so that Client.Close can end it. The
// signal is closed when it returns if the lock's validity has run out:
// Done, Err and Context agree with Until at every instant, and only those
// who wait need the timer. An event this queues (EventLost) is reported
// on the caller's goroutine.
func (l *Lock) signal() *lostSignal {
	s := l.watch()
	if l.check() == nil {
		l.report()
	}
	return s
}

// watch is signal, but leaves the event it may queue to the caller to
// report.
func (l *Lock) watch() *lostSignal {
	switch {
	case l == nil:
		return nilLockSignal
	case l.client == nil:
		return zeroLockSignal
	}
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if l.sig == nil {
		s := &lostSignal{done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		l.sig = s
		switch {
		case l.life.cause != nil:
			close(s.done)
			s.cancel(l.life.cause)
		case l.expireLocked():
		case l.client.track(l):
			s.timer = time.AfterFunc(time.Until(l.Until()), l.expire)
		default: // the client is closed
			l.loseLocked(ErrClosed)
		}
	} else {
		l.expireLocked()
	}
	return l.sig
}

// expireLocked loses the lock if its validity has run out, and reports
// whether it is lost. l.sigMu must be held.
func (l *Lock) expireLocked() bool {
	if l.life.cause == nil && !time.Now().Before(l.Until()) {
		l.loseLocked(l.expiredErr())
	}
	return l.life.cause != nil
}

// expire runs at the lock's deadline; an Extend may have moved it since.
// Deciding under sigMu keeps it atomic with setUntil. It runs on a timer's
// goroutine: an Observer's panic there is dropped.
func (l *Lock) expire() {
	l.sigMu.Lock()
	if until := l.Until(); time.Now().Before(until) {
		if l.life.cause == nil {
			l.sig.timer.Reset(time.Until(until))
		}
	} else {
		l.loseLocked(l.expiredErr())
	}
	l.sigMu.Unlock()
	l.report()
}

func (l *Lock) expiredErr() error {
	return fmt.Errorf("%w: %s: validity ran out at %v", ErrNotHeld, quote(l.key), l.Until().Round(0))
}

// lose records why the lock is lost, once, and fires the signal. The
// caller reports the EventLost it queues (see report).
func (l *Lock) lose(err error) {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	l.loseLocked(err)
}

func (l *Lock) loseLocked(err error) {
	if l.life.cause != nil {
		return
	}
	l.life.cause = err
	// A released lock stays released: endHolds stored it first.
	l.life.stage.CompareAndSwap(stageHeld, stageLost)
	if err != ErrReleased { // the sentinel itself: Release reports its own event
		l.queueLocked(context.Background(), EventLost, err)
	}
	if s := l.sig; s != nil {
		if s.timer != nil {
			s.timer.Stop()
		}
		close(s.done)
		s.cancel(err)
		l.client.untrack(l)
	}
}

// endHolds moves the lock to released as its last hold goes, before the
// last release's round, so that late agreements and repairs see it (see
// lateAgreement and repaired). It clears the deadline and closes Done with
// ErrReleased, unless the lock was lost before: then the cause stays. With
// expire (a Release's), a validity run out is a loss first, and wasLost
// tells the Observer of either. It reports false, and changes nothing,
// if the lock was released already.
func (l *Lock) endHolds(expire bool) bool {
	l.sigMu.Lock() // one step, so that no loss comes between
	defer l.sigMu.Unlock()
	if l.life.stage.Swap(stageReleased) == stageReleased {
		return false
	}
	if expire {
		l.life.wasLost = l.expireLocked()
	}
	l.life.until.Store(0)
	l.loseLocked(ErrReleased)
	return true
}

// lostCause returns why the lock was lost, or nil.
func (l *Lock) lostCause() error {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	return l.life.cause
}

// Done returns a channel that is closed when the lock is no longer held:
// its validity ran out without renewal, auto-renewal could not reach a
// quorum in time, a round of the Lock (renewal, Extend, Reenter or a
// Release that leaves holds) found it lost on so many masters that the
// others cannot make a quorum, the last Release, or Client.Close. Err
// then tells why.
// Work done under the lock can select on it. Once Until has passed, Done,
// Err and Context say so when they return, watched before or not. Done of
// a zero or nil Lock is closed.
func (l *Lock) Done() <-chan struct{} { return l.signal().done }

// Err returns nil while Done is open; afterwards ErrReleased after the last
// Release, ErrClosed after Client.Close, or an error wrapping ErrNotHeld
// that says how the lock was lost. For a zero or nil Lock it returns an
// error wrapping ErrInvalidArgument.
func (l *Lock) Err() error {
	if err := l.check(); err != nil {
		return err
	}
	select {
	case <-l.signal().done:
		return l.lostCause()
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
	lost   <-chan struct{} // the lock's Done
	replan chan struct{}   // cap 1: an Extend changed the lock's TTL
}

// replanned tells the renewal that an Extend changed the lock's TTL and
// validity, which may now call for a renewal sooner. It does not block.
func (r *renewal) replanned() {
	select {
	case r.replan <- struct{}{}:
	default:
	}
}

func (r *renewal) stop() {
	r.cancel()
	<-r.done
}

// AutoRenew keeps the lock held until its last Release: it extends the lock
// by its current TTL (the last Extend's, if any) over the quorum once about
// a third of it has passed, and retries sooner after a failure. A failure on a minority of masters does
// not matter (the quorum still extends). If renewal cannot reach a quorum
// before the validity would run out, the lock is lost: Done closes, with
// the last renewal error in Err; at once where the masters that answered
// that they do not hold it leave too few for a quorum. The last Release, and Client.Close, stop
// renewal before they return; no renewal runs after. Calling AutoRenew
// again, on a closed Client, or while the last Release is under way, is a
// no-op (a Reenter that comes first keeps renewal running).
func (l *Lock) AutoRenew() {
	if l.check() != nil {
		return
	}
	l.mu.Lock()
	if l.renew == nil && l.holds > 0 && !l.stopping {
		l.startRenewal()
	}
	l.mu.Unlock()
	l.report() // the loss startRenewal may have found
}

// startRenewal starts the renewal goroutine unless the client is closed;
// l.mu must be held. The caller reports what it queues.
func (l *Lock) startRenewal() {
	lost := l.watch().done // tracks the lock, so that Client.Close stops the renewal
	if !l.client.addRenewal() {
		return
	}
	ctx, cancel := context.WithCancel(inBackground(context.Background()))
	r := &renewal{cancel: cancel, done: make(chan struct{}), lost: lost, replan: make(chan struct{}, 1)}
	l.renew = r
	go l.renewLoop(ctx, r)
}

func (l *Lock) renewLoop(ctx context.Context, r *renewal) {
	defer l.client.gate.renewals.Done()
	defer close(r.done)
	ttl := l.currentTTL()
	wait := time.Until(l.Until()) - 2*ttl/3
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.lost:
			return
		case <-r.replan:
			timer.Reset(max(time.Until(l.Until())-2*l.currentTTL()/3, 0))
			continue
		case <-timer.C:
		}
		err := l.extend(ctx, l.currentTTL(), "renew")
		l.report()           // a loss the round found: EventLost
		ttl = l.currentTTL() // what extend used: an Extend may have changed it
		retry := max(ttl/10, l.client.masterTimeout)
		switch {
		case err == nil:
			if !l.observeHeld(ctx, EventRenewed, nil) {
				return
			}
			wait = time.Until(l.Until()) - 2*ttl/3
		case ctx.Err() != nil, errors.Is(err, ErrClosed): // Close loses the lock
			return
		case time.Until(l.Until()) < retry+l.client.masterTimeout:
			// The next attempt could not finish in time.
			if qe, ok := err.(*QuorumError); ok && qe.sentinel == ErrNoQuorum {
				err = qe.lost("too little validity left to try again") // said once, not wrapped again
			} else if !errors.Is(err, ErrNotHeld) {
				err = fmt.Errorf("%w: renew %s: %w", ErrNotHeld, quote(l.key), err)
			}
			l.lose(err)
			l.report()
			return
		default:
			if !l.observeHeld(ctx, EventRenewalFailed, err) {
				return
			}
			wait = retry
		}
		timer.Reset(max(wait, 0))
	}
}

// observeHeld reports a renewal's event unless the lock was lost
// meanwhile (Client.Close, or its validity ran out while the renewal was
// under way), and reports whether it was. Queued under sigMu, as EventLost
// is, so that no event of the renewal follows the loss. It runs on the
// renewal's goroutine: an Observer's panic is dropped.
func (l *Lock) observeHeld(ctx context.Context, kind EventKind, err error) bool {
	l.sigMu.Lock()
	held := !l.expireLocked()
	if held {
		l.queueLocked(ctx, kind, err)
	}
	l.sigMu.Unlock()
	l.report()
	return held
}

// currentTTL returns the TTL of the lock's last acquire or extend.
func (l *Lock) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}
