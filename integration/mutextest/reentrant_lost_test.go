package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/mutex"
)

// TestReentrantLossEndsTheHolds: once an owner's lock is lost, its holds
// end. Its next call reports the loss once, with ErrNotHeld: a Lock as a
// failed re-entry, an Unlock without sending anything. The call after
// that starts afresh: a Lock takes the lock anew. (Before, every Lock of
// the owner failed until it had unlocked each hold.)
func TestReentrantLossEndsTheHolds(t *testing.T) {
	cl, c := lossClient(t)
	ctx := bounded(t)
	r, err := mutex.NewReentrant(c, "k", &mutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)

	t.Run("Lock reports", func(t *testing.T) {
		owner := redlock.NewOwner()
		require.NoError(t, r.Lock(ctx, owner))
		require.NoError(t, r.Lock(ctx, owner))
		lost := r.Current(owner)
		loseByRefusal(t, cl, lost)
		assert.Same(t, lost, r.Current(owner), "the lost lock, until reported")
		err := r.Lock(ctx, owner)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, `reenter "k": owner "`+owner+`" lost the lock: `)
		assert.Nil(t, r.Current(owner), "reported")

		require.NoError(t, r.Lock(ctx, owner), "afresh")
		got := r.Current(owner)
		require.NotSame(t, lost, got)
		assert.Equal(t, 1, got.Holds())
		require.NoError(t, r.Unlock(ctx, owner))
		freeOnMasters(t, cl, "k")
		err = r.Unlock(ctx, owner)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, "holds nothing here")
	})

	t.Run("Unlock reports", func(t *testing.T) {
		owner := redlock.NewOwner()
		require.NoError(t, r.Lock(ctx, owner))
		require.NoError(t, r.Lock(ctx, owner))
		loseByRefusal(t, cl, r.Current(owner))
		err := r.Unlock(ctx, owner)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, `release "k": owner "`+owner+`" lost the lock: `)
		err = r.Unlock(ctx, owner)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, "holds nothing here", "reported once")

		require.NoError(t, r.TryLock(ctx, owner), "afresh")
		require.NoError(t, r.Unlock(ctx, owner))
		freeOnMasters(t, cl, "k")
	})

	t.Run("another owner takes it", func(t *testing.T) {
		owner, other := redlock.NewOwner(), redlock.NewOwner()
		require.NoError(t, r.Lock(ctx, owner))
		loseByRefusal(t, cl, r.Current(owner))
		require.NoError(t, r.TryLock(context.Background(), other), "the lost lock holds nothing up")
		require.NoError(t, r.Unlock(ctx, other))
		require.ErrorIs(t, r.Unlock(ctx, owner), redlock.ErrNotHeld)
	})
}
