package rwmutex

import (
	"context"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/retry"
)

// Do runs fn while owner holds the write lock, renewed automatically. It
// blocks like Lock until the lock is held or ctx ends; fn is not called
// then. fn's context ends with ctx, as soon as the lock is lost (its
// cause, context.Cause, is the lock's Err), or a tenth of the TTL before
// the validity runs out (its cause wraps redlock.ErrNotHeld). Once fn
// returns, or panics, Do unlocks with a fresh context bounded by the TTL,
// not ctx. It returns fn's error joined with the unlock's, which reports
// a loss. A panic goes on after the unlock. If owner writes already, Do
// adds a hold, and its unlock removes that one. A nil fn or ctx is
// refused with an error wrapping redlock.ErrInvalidArgument, before
// anything is taken. No goroutine of Do's runs after it returns.
func (m *RWMutex) Do(ctx context.Context, owner string, fn func(ctx context.Context, l *redlock.Lock) error) error {
	return m.do(ctx, "Do", owner, false, fn)
}

// RDo is Do on the read side: fn runs while owner holds a read lock,
// taken like RLock and released like RUnlock.
func (m *RWMutex) RDo(ctx context.Context, owner string, fn func(ctx context.Context, l *redlock.Lock) error) error {
	return m.do(ctx, "RDo", owner, true, fn)
}

func (m *RWMutex) do(ctx context.Context, op, owner string, read bool, fn func(context.Context, *redlock.Lock) error) error {
	if err := m.check(ctx, op); err != nil {
		return err
	}
	if fn == nil {
		return retry.NilFunc("RWMutex."+op, m.key)
	}
	lock, current, unlock := m.Lock, m.Writer, m.Unlock
	if read {
		lock, current, unlock = m.RLock, m.Reader, m.RUnlock
	}
	if err := lock(ctx, owner); err != nil {
		return err
	}
	l := current(owner)
	l.AutoRenew()
	return retry.Run(ctx, l, m.opts.TTL/retry.MarginDivisor, m.opts.TTL, fn, func(ctx context.Context) error {
		return unlock(ctx, owner)
	})
}
