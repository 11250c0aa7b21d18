package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// TestExclusiveLocksWaitForReadersOfTheSameName: an exclusive or reentrant
// lock and a read-write lock of one name share its main key, and exclude
// each other both ways: readers keep the exclusive lock out as they keep a
// writer out (readers mark the name with {k}:rh, which the exclusive
// acquire reads with the main key), until they release or expire.
func TestExclusiveLocksWaitForReadersOfTheSameName(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c := newClient(t, cl, nil)
	ctx := context.Background()

	r, err := c.AcquireRead(ctx, "k", "reader", 10*time.Second)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "Acquire while a reader holds")
	_, err = c.AcquireAs(ctx, "k", "me", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "AcquireAs while a reader holds")
	assert.NotErrorIs(t, err, redlock.ErrUpgrade, "AcquireAs while another owner reads")
	// The reader itself asking for the exclusive lock would wait for itself:
	// refused at once, as a writer's upgrade is.
	_, err = c.AcquireAs(ctx, "k", "reader", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrUpgrade, "AcquireAs by the reader")
	require.NoError(t, r.Release(ctx))
	waitEmpty(t, cl) // the last reader's release leaves no mark
	x, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err, "Acquire once the reader released")
	_, err = c.AcquireRead(ctx, "k", "reader", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "AcquireRead while the exclusive lock is held")
	require.NoError(t, x.Release(ctx))

	// A reader that expired unreleased stops counting, though the readers'
	// key lives on for a longer reader that released.
	const short = 300 * time.Millisecond
	_, err = c.AcquireRead(ctx, "k", "short", short)
	require.NoError(t, err)
	long, err := c.AcquireRead(ctx, "k", "long", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, long.Release(ctx))
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "Acquire while the short reader holds")
	time.Sleep(short + 100*time.Millisecond)
	for i := range cl.Masters {
		n, err := cl.Admin(i).Exists(ctx, "{k}:r").Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the readers' key on master %d", i)
	}
	x, err = c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err, "Acquire once the short reader expired")
	// Acquire returns at a quorum: the last master's call may still be
	// on its way. Each acquire drops the mark where it lands.
	for i := range cl.Masters {
		assert.Eventually(t, func() bool {
			n, err := cl.Admin(i).Exists(ctx, "{k}:rh").Result()
			return err == nil && n == 0
		}, 5*time.Second, 10*time.Millisecond, "master %d: the readers' mark is dropped with the last reader", i)
	}
	require.NoError(t, x.Release(ctx))
}

// TestRepairLeavesReadersOfTheSameNameAlone: an extend never sets an
// exclusive lock again on a master that lost it where readers of the
// read-write lock of the same name hold it there.
func TestRepairLeavesReadersOfTheSameNameAlone(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	l, err := c.AcquireAs(ctx, "job", "me", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	lose(t, cl, 0, "job")
	readers := newClientOn(t, []*redis.Client{cl.Clients()[0]}) // master 0 alone
	_, err = readers.AcquireRead(ctx, "job", "reader", 10*time.Second)
	require.NoError(t, err)

	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, c.Close()) // waits for every call, repairs included
	assert.Equal(t, []string{"", "me", "me"}, values(t, cl, "job"), "not repaired where a reader holds")
}
