package integration_test

// Redlock over Sentinel-managed masters: each master is a group of a
// primary, a replica and three sentinels. Replication is asynchronous, and
// a failover may lose a write. An agreement counts only once WAIT saw
// every replica acknowledge it, so a failover keeps the lock.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration/nemesis"
)

// sentinelGroups starts n Sentinel groups, stopped when the test ends.
func sentinelGroups(t *testing.T, n int) []*nemesis.SentinelGroup {
	t.Helper()
	gs, err := nemesis.StartSentinelGroups(t.Context(), n)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, g := range gs {
			assert.NoError(t, g.Close())
		}
	})
	return gs
}

// sentinelClient returns a redlock Client of the groups, each reached
// through redis.NewFailoverClient; closed when the test ends.
func sentinelClient(t *testing.T, gs []*nemesis.SentinelGroup, opts *redlock.Options) *redlock.Client {
	t.Helper()
	rcs := make([]*redis.Client, len(gs))
	for i, g := range gs {
		rcs[i] = g.NewClient()
	}
	c, err := redlock.New(rcs, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Close())
		for _, rc := range rcs {
			_ = rc.Close()
		}
	})
	return c
}

// busy makes groups gs hold the lock named key for another owner, on
// their primaries and replicas; free lets it go.
func busy(t *testing.T, gs []*nemesis.SentinelGroup, key string, ttl time.Duration) {
	t.Helper()
	for _, g := range gs {
		p, err := g.Primary(t.Context())
		require.NoError(t, err)
		require.NoError(t, p.Set(t.Context(), key, "other", ttl).Err())
		require.NoError(t, p.Wait(t.Context(), 1, 5*time.Second).Err())
	}
}

func free(t *testing.T, gs []*nemesis.SentinelGroup, key string) {
	t.Helper()
	for _, g := range gs {
		p, err := g.Primary(t.Context())
		require.NoError(t, err)
		require.NoError(t, p.Del(t.Context(), key).Err())
	}
}

// TestSentinelFailoverHoldsOnce is issue 34's case. Five groups; two are
// busy (another owner holds the lock there), so a lock needs the other
// three: a bare quorum. Group 0's replica is cut off, so its primary
// takes a's write alone. It then dies (kill -9), and Sentinel promotes
// the replica, which lacks the write. The other owner lets go, and b,
// which never saw group 0's old primary, asks for the lock. Without
// WAIT, a counted group 0 and holds the lock, and b gets it from groups
// 0, 3 and 4 while a still holds it: held twice. With WAIT, group 0's
// agreement does not count (ErrNotReplicated): a is refused.
//
// Then, with replication healthy, a takes the lock from a bare quorum
// again (groups 1, 2, 4), and group 1's primary dies. The promoted
// replica has a's write: a client that never saw the old primary is
// refused while a holds the lock. a extends it on the promoted replica,
// though a saw its new run_id: an extend needs the lock held there.
func TestSentinelFailoverHoldsOnce(t *testing.T) {
	gs := sentinelGroups(t, 5)
	ctx := t.Context()
	opts := &redlock.Options{MasterTimeout: slack}
	a := sentinelClient(t, gs, opts)
	b := sentinelClient(t, gs, opts)
	const ttl = 60 * time.Second

	busy(t, gs[3:], "{job}", ttl)
	// Group 0's replica gets nothing more: a's write stays on its primary.
	require.NoError(t, gs[0].Link.BlackHole(0))
	la, errA := a.Acquire(ctx, "job", ttl)
	require.NoError(t, gs[0].KillPrimary(ctx))
	free(t, gs[3:], "{job}")
	lb, errB := b.Acquire(ctx, "job", ttl)
	require.False(t, errA == nil && errB == nil && la.Held(), "a and b hold the lock at once")
	// What keeps it held once: group 0 did not count for a.
	require.ErrorIs(t, errA, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, errA, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrNotReplicated, "%v", errA)
	require.NoError(t, errB, "b's lock is the only one")
	require.NoError(t, lb.Release(ctx))
	// The release returns at the quorum; the others follow.
	require.Eventually(t, func() bool {
		for _, g := range gs {
			p, err := g.Primary(ctx)
			if err != nil {
				return false
			}
			if v := p.Get(ctx, "{job}").Val(); strings.Contains(v, lb.Value()) {
				t.Logf("%s: %q", g.Name, v)
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "b's release reached every group")

	// Replication works: a's lock survives group 1's failover.
	busy(t, []*nemesis.SentinelGroup{gs[0], gs[3]}, "{job}", ttl)
	la, err := a.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	require.NoError(t, gs[1].KillPrimary(ctx))
	p1, err := gs[1].Primary(ctx)
	require.NoError(t, err)
	v, err := p1.Get(ctx, "{job}").Result()
	require.NoError(t, err, "the promoted replica has a's write")
	assert.Contains(t, v, la.Value())
	free(t, []*nemesis.SentinelGroup{gs[0], gs[3]}, "{job}")
	c := sentinelClient(t, gs, opts)
	for attempt := range 3 {
		_, err := c.Acquire(ctx, "job", ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "attempt %d: held once", attempt)
	}
	require.True(t, la.Held())
	var extendErr error
	for range 3 { // the first call may meet a connection the failover closed
		if extendErr = la.Extend(ctx, ttl); extendErr == nil || !errors.Is(extendErr, redlock.ErrNoQuorum) {
			break
		}
	}
	require.NoError(t, extendErr)
	require.NoError(t, la.Release(ctx))
}
