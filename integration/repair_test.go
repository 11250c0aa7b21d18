package integration_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/link"
)

// lose deletes the lock named key on master i, as a restart without
// persistence would.
func lose(t *testing.T, cl *integration.Cluster, i int, key string) {
	t.Helper()
	require.NoError(t, cl.Admin(i).Del(context.Background(), "{"+key+"}").Err())
}

// TestExtendRepairsMastersThatLostTheLock: an extend decided by the
// masters that still hold the lock sets it again, with its token and the
// validity left, where a master lost it, but never over another's lock;
// the release deletes the repaired copies too.
func TestExtendRepairsMastersThatLostTheLock(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	const ttl = 10 * time.Second
	l, err := c.AcquireAs(ctx, "job", "me", ttl)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	lose(t, cl, 0, "job")
	lose(t, cl, 1, "job")
	holdAs(t, cl, 1, "job", "other") // another client took it there meanwhile

	require.NoError(t, l.Extend(ctx, ttl))
	// A master's refusal may come after the decision: its repair too.
	want := []string{"me", "other", "me", "me", "me"}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, values(t, cl, "job")) },
		5*time.Second, time.Millisecond, "repaired where the lock was lost, not over another's")
	h := stored(t, cl, 0, "job")
	assert.Equal(t, link.Holder{Owner: "me", Nonce: stored(t, cl, 2, "job").Nonce, Holds: 1, Token: strconv.FormatUint(l.Token(), 10)}, h)
	pttl, err := cl.Admin(0).PTTL(ctx, "{job}").Result()
	require.NoError(t, err)
	assert.True(t, pttl > 0 && pttl <= ttl, "repaired with the validity left: %v", pttl)

	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	assert.Equal(t, []string{"", "other", "", "", ""}, values(t, cl, "job"))
	// After a repair the release leaves a marker wherever it deletes, so
	// that a timed-out acquire or a second repair landing later is refused.
	for i := range cl.Masters {
		n, err := cl.Admin(i).Exists(ctx, "{job}:gone:"+h.Nonce).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "marker on master %d", i)
	}
	lose(t, cl, 1, "job")
	assertEmpty(t, cl)
}

// TestNoRepair: with Options.NoRepair a master that lost the lock stays
// without it.
func TestNoRepair(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: 200 * time.Millisecond, NoRepair: true})
	ctx := context.Background()
	l, err := c.AcquireAs(ctx, "job", "me", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	lose(t, cl, 0, "job")
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, c.Close()) // waits for every call
	assert.Equal(t, []string{"", "me", "me", "me", "me"}, values(t, cl, "job"))
}

// TestRepairNeedsAQuorumWithoutTheRepaired: when only a minority still
// holds the lock, the extend fails and nothing is set again: repaired
// masters never count toward the extend that would repair them, and a lost
// lock is never brought back.
func TestRepairNeedsAQuorumWithoutTheRepaired(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	l, err := c.AcquireAs(ctx, "job", "me", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	for i := range 3 {
		lose(t, cl, i, "job")
	}
	require.ErrorIs(t, l.Extend(ctx, 10*time.Second), redlock.ErrNotHeld)
	require.NoError(t, c.Close()) // waits for every call
	assert.Equal(t, []string{"", "", "", "me", "me"}, values(t, cl, "job"))
}
