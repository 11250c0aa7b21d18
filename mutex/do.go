package mutex

import (
	"context"
	"fmt"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/retry"
)

// Do runs fn while this Mutex holds the lock, renewed automatically. It
// blocks like Lock until the lock is held or ctx ends; fn is not called
// then. fn's context ends with ctx, as soon as the lock is lost (its
// cause, context.Cause, is the lock's Err), or a tenth of the TTL before
// the validity runs out (its cause wraps redlock.ErrNotHeld). Work that
// ignores its context may overlap another holder's. Once fn returns, or
// panics, Do unlocks with a fresh context bounded by the TTL, not ctx. It
// returns fn's error joined with the unlock's, which reports a loss. A
// panic goes on after the unlock. A nil fn or ctx is refused with an
// error wrapping redlock.ErrInvalidArgument, before anything is taken. Do
// is Lock, fn and an unlock of the lock it took, and only that one: an
// earlier loss is left for Unlock to report, and a lock taken after fn
// unlocked the Mutex is left to its holder. No goroutine of Do's runs
// after it returns.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context, l *redlock.Lock) error) error {
	if err := m.check(ctx, "Do"); err != nil {
		return err
	}
	if fn == nil {
		return retry.NilFunc("Mutex.Do", m.key)
	}
	// Not Current, which returns an earlier lock lost and not reported.
	l, err := m.acquire(ctx, true)
	if err != nil {
		return err
	}
	l.AutoRenew()
	return retry.Run(ctx, l, m.opts.TTL/retry.MarginDivisor, m.opts.TTL, fn, func(ctx context.Context) error {
		return m.unlockHeld(ctx, l)
	})
}

// unlockHeld releases l, which Do took, where this Mutex still holds it.
// fn may have unlocked it, and another goroutine locked the Mutex since:
// that one's lock is not Do's to release. A loss of l is reported.
func (m *Mutex) unlockHeld(ctx context.Context, l *redlock.Lock) error {
	t, held, lost := m.holds.DropHeld(l)
	switch {
	case lost:
		return retry.Lost("release", m.key, "this Mutex", l)
	case !held:
		return fmt.Errorf("%w: release %s: Do's lock was unlocked before Do returned", redlock.ErrNotHeld, clip.Quote(m.key))
	}
	return retry.Release(ctx, l, t)
}

// Do runs fn while owner holds the lock, as Mutex.Do does. If owner
// holds it already, Do adds a hold, and its unlock removes that one.
// Renewal then goes on for the owner's other holds.
func (r *Reentrant) Do(ctx context.Context, owner string, fn func(ctx context.Context, l *redlock.Lock) error) error {
	if err := r.check(ctx, "Do"); err != nil {
		return err
	}
	if fn == nil {
		return retry.NilFunc("Reentrant.Do", r.key)
	}
	if err := r.Lock(ctx, owner); err != nil {
		return err
	}
	l := r.Current(owner)
	l.AutoRenew()
	return retry.Run(ctx, l, r.opts.TTL/retry.MarginDivisor, r.opts.TTL, fn, func(ctx context.Context) error {
		return r.Unlock(ctx, owner)
	})
}
