package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// TestNilContextIsRefused: every call of a Mutex and a Reentrant that
// takes a context refuses a nil one with ErrInvalidArgument, before it
// touches anything: no panic, the hold and the turn are unchanged, and an
// Unlock with a context then releases the lock on the masters. (Before,
// Unlock forgot the hold and then panicked, leaving the lock held on the
// masters for its TTL.)
func TestNilContextIsRefused(t *testing.T) {
	cl, c := lossClient(t)
	ctx := bounded(t)
	var nilCtx context.Context

	t.Run("Mutex", func(t *testing.T) {
		m := newMutex(t, c, "k")
		require.NoError(t, m.Lock(ctx))
		held := m.Current()
		for _, tc := range []struct {
			op   string
			call func() error
		}{
			{"Lock", func() error { return m.Lock(nilCtx) }},
			{"TryLock", func() error { return m.TryLock(nilCtx) }},
			{"Unlock", func() error { return m.Unlock(nilCtx) }},
			{"Extend", func() error { return m.Extend(nilCtx) }},
		} {
			err := harness.Within(t, tc.op, tc.call)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.op)
			assert.EqualError(t, err, `redlock: invalid argument: Mutex.`+tc.op+` "k": nil context`)
			require.Same(t, held, m.Current(), tc.op)
			require.Equal(t, 1, held.Holds(), tc.op)
			require.True(t, held.Held(), tc.op)
		}
		err := m.TryLock(ctx)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		assert.ErrorContains(t, err, "this Mutex holds it", "the turn is still the holder's")
		require.NoError(t, m.Unlock(ctx))
		freeOnMasters(t, cl, "k")
		require.NoError(t, m.TryLock(ctx), "the turn was given up once")
		require.NoError(t, m.Unlock(ctx))
	})

	t.Run("Reentrant", func(t *testing.T) {
		r, err := mutex.NewReentrant(c, "r", &mutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
		require.NoError(t, err)
		owner := redlock.NewOwner()
		require.NoError(t, r.Lock(ctx, owner))
		held := r.Current(owner)
		for _, tc := range []struct {
			op   string
			call func() error
		}{
			{"Lock", func() error { return r.Lock(nilCtx, owner) }},
			{"TryLock", func() error { return r.TryLock(nilCtx, owner) }},
			{"Unlock", func() error { return r.Unlock(nilCtx, owner) }},
		} {
			err := harness.Within(t, tc.op, tc.call)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.op)
			assert.EqualError(t, err, `redlock: invalid argument: Reentrant.`+tc.op+` "r": nil context`)
			require.Same(t, held, r.Current(owner), tc.op)
			require.Equal(t, 1, held.Holds(), tc.op)
			require.True(t, held.Held(), tc.op)
		}
		require.NoError(t, r.Unlock(ctx, owner))
		assert.Nil(t, r.Current(owner))
		freeOnMasters(t, cl, "r")
	})
}
