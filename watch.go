package redlock

import (
	"context"
	"fmt"
	"time"
)

// lostSignal closes done, and cancels ctx, when the lock is lost. Its
// fields are set when it is made, under Lock.sigMu. sigMu guards its
// firing and the timer's resets.
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

// signal returns the lock's lost-lock signal. It is made on first use,
// so that locks nobody watches cost nothing. A lock with a signal is
// tracked by its client until it is lost, so that Client.Close can end
// it. If the lock's validity has run out, the signal is closed when
// signal returns. So Done, Err and Context agree with Until at every
// instant, and only those who wait need the timer. An event this queues
// (EventLost) is reported on the caller's goroutine.
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

// expire runs at the lock's deadline. An Extend may have moved it since.
// Deciding under sigMu keeps it atomic with setUntil. It runs on a timer's
// goroutine, where an Observer's panic is dropped.
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
// caller reports the EventLost it queues.
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
		l.queueLocked(l.eventContext(), EventLost, err)
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

// endHolds moves the lock to released as its last hold goes. It runs
// before the last release's round, so that late agreements and repairs
// see it. It clears the deadline and closes Done with ErrReleased. If the
// lock was lost before, the cause stays. With expire (a Release's), a
// validity run out is a loss first. wasLost tells the Observer of either.
// If the lock was released already, endHolds changes nothing and reports
// false.
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

// Done returns a channel closed when the lock is no longer held: it ran
// out or was lost, released, or closed by Client.Close. Err tells why.
func (l *Lock) Done() <-chan struct{} { return l.signal().done }

// Err returns nil while Done is open, then ErrReleased, ErrClosed after
// Client.Close, or an ErrNotHeld that says how the lock was lost.
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

// Context returns a context cancelled when Done closes, Err its cause.
func (l *Lock) Context() context.Context { return l.signal().ctx }
