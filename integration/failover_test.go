package integration_test

// Failover with asynchronous replication, the reason Redlock uses
// independent masters: a lock written to a master that dies before
// replicating it is gone from the promoted replica.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/integration/nemesis"
)

// replicated starts one replica per master of masters, each replicating
// through its own proxy, and waits until every replica has caught up with
// a marker key. The proxies are returned so that replication can be cut.
func replicated(t *testing.T, masters *integration.Cluster) (*integration.Cluster, *nemesis.Proxies) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := len(masters.Masters)
	replicas := integration.NewProcessCluster(t, n, integration.ProcessOptions{})
	links := proxied(t, masters)
	for i, addr := range links.Addrs() {
		// Full syncs start at once instead of waiting 5s for more replicas.
		require.NoError(t, masters.Admin(i).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		require.NoError(t, replicas.Admin(i).Do(ctx, "REPLICAOF", host, port).Err())
	}
	for i := range n {
		require.NoError(t, masters.Admin(i).Set(ctx, "marker", i, 0).Err())
	}
	for i := range n {
		require.Eventually(t, func() bool {
			v, err := replicas.Admin(i).Get(ctx, "marker").Int()
			return err == nil && v == i
		}, 15*time.Second, 10*time.Millisecond, "replica %d never caught up", i)
	}
	return replicas, links
}

// promote kills master i and turns its replica into a master, as a
// failover would.
func promote(t *testing.T, masters, replicas *integration.Cluster, i int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, masters.Masters[i].Kill(ctx))
	require.NoError(t, replicas.Admin(i).Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	info, err := replicas.Admin(i).Info(ctx, "replication").Result()
	require.NoError(t, err)
	require.Contains(t, info, "role:master")
}

// TestFailoverSingleInstanceLockHeldTwice: a plain SET NX PX lock on one
// master with a replica. The master dies before the lock reaches the
// replica; the promoted replica grants the same lock to a second client
// while the first still holds it.
func TestFailoverSingleInstanceLockHeldTwice(t *testing.T) {
	masters := integration.NewProcessCluster(t, 1, integration.ProcessOptions{})
	replicas, links := replicated(t, masters)
	ctx := context.Background()
	const ttl = 10 * time.Second

	require.NoError(t, links.BlackHole(0), "replication stalls")
	start := time.Now()
	ok, err := masters.Admin(0).SetNX(ctx, "lock", "a", ttl).Result()
	require.NoError(t, err)
	require.True(t, ok, "a takes the lock")
	ok, err = masters.Admin(0).SetNX(ctx, "lock", "b", ttl).Result()
	require.NoError(t, err)
	require.False(t, ok, "b cannot take it from the master")
	time.Sleep(100 * time.Millisecond)
	_, err = replicas.Admin(0).Get(ctx, "lock").Result()
	require.ErrorIs(t, err, redis.Nil, "the lock has not reached the replica")

	promote(t, masters, replicas, 0)
	ok, err = replicas.Admin(0).SetNX(ctx, "lock", "b", ttl).Result()
	require.NoError(t, err)
	assert.True(t, ok, "b takes the lock on the promoted replica")
	assert.Less(t, time.Since(start), ttl-time.Duration(float64(ttl)*redlock.DefaultDriftFactor)-2*time.Millisecond, "while a still holds it: held twice")
}

// TestFailoverRedlockHeldOnce: the same failover on one of five Redlock
// masters, each with a replica; master 0's has not received the lock. Its
// agreement did not count (WAIT saw no replica take it). The promoted
// replica grants the lock, but the four others refuse: the second client
// does not get the lock while the first's validity lasts.
func TestFailoverRedlockHeldOnce(t *testing.T) {
	masters := integration.NewProcessCluster(t, 5, integration.ProcessOptions{})
	replicas, links := replicated(t, masters)
	ctx := context.Background()
	const ttl = 10 * time.Second
	opts := &redlock.Options{MasterTimeout: slack}

	require.NoError(t, links.BlackHole(0), "replication stalls")
	a := newClient(t, masters, opts)
	la, err := a.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	waitHeldEverywhere(t, masters, la)
	time.Sleep(100 * time.Millisecond)
	_, err = replicas.Admin(0).Get(ctx, "{job}").Result()
	require.ErrorIs(t, err, redis.Nil, "the lock has not reached replica 0")

	promote(t, masters, replicas, 0)
	// b sees the failed-over deployment: the promoted replica instead of m0.
	promoted := nemesis.NewClient(replicas.Masters[0].Addr())
	t.Cleanup(func() { promoted.Close() })
	b, err := redlock.New(append([]*redis.Client{promoted}, masters.Clients()[1:]...), opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })

	for attempt := range 5 {
		_, err := b.Acquire(ctx, "job", ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "attempt %d: held once", attempt)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		// Three refusals decide the round, so the promoted replica's yes
		// may come too late to be counted; no other master may agree.
		assert.LessOrEqual(t, qe.Agreed, 1, "at most the promoted replica agreed")
		for i, m := range qe.Masters[1:] {
			assert.False(t, m.Agreed, "master %d still holds a's lock", i+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, la.Held(), "a's validity lasts")
	require.NoError(t, la.Extend(ctx, ttl), "a still holds a quorum (m1-m4)")

	// b's deployment works: once a lets go, b gets the lock, on all five.
	require.NoError(t, la.Release(ctx))
	lb, err := b.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	require.NoError(t, lb.Release(ctx))
}
