package integration_test

// Redlock with a Redis Cluster as one of its masters. A lock's keys live
// on one shard. Its master replicates asynchronously, and a shard
// failover may lose a write. The cluster's agreement counts only once
// WAIT, on the node of the lock's slot, saw every replica acknowledge it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/integration/nemesis"
)

// redisCluster starts a three-shard cluster, stopped when the test ends.
func redisCluster(t *testing.T) *nemesis.RedisCluster {
	t.Helper()
	rc, err := nemesis.StartRedisCluster(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rc.Close()) })
	return rc
}

// clusterFirstClient returns a redlock Client of the cluster, as master
// 0, then the plain masters; closed when the test ends.
func clusterFirstClient(t *testing.T, rc *nemesis.RedisCluster, plain *integration.Cluster, opts *redlock.Options) *redlock.Client {
	t.Helper()
	cc := rc.NewClient()
	masters := []redis.Scripter{cc}
	for _, m := range plain.Clients() {
		masters = append(masters, m)
	}
	c, err := redlock.New(masters, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Close())
		_ = cc.Close()
	})
	return c
}

// busyOn makes plain masters is hold the lock key for another owner;
// freeOn lets it go.
func busyOn(t *testing.T, plain *integration.Cluster, key string, ttl time.Duration, is ...int) {
	t.Helper()
	for _, i := range is {
		require.NoError(t, plain.Admin(i).Set(t.Context(), key, "other", ttl).Err())
	}
}

func freeOn(t *testing.T, plain *integration.Cluster, key string, is ...int) {
	t.Helper()
	for _, i := range is {
		require.NoError(t, plain.Admin(i).Del(t.Context(), key).Err())
	}
}

// requireGone waits until no live cluster node, replicas included, and
// no plain master holds value under key. A release returns at the
// quorum; the others follow.
func requireGone(t *testing.T, rc *nemesis.RedisCluster, plain *integration.Cluster, key, value string) {
	t.Helper()
	ctx := t.Context()
	require.Eventually(t, func() bool {
		for i, m := range rc.Servers.Masters {
			if !m.Running() {
				continue
			}
			v, err := rc.ReadKey(ctx, i, key)
			if redis.HasErrorPrefix(err, "MOVED") { // another shard's node
				continue
			}
			if err != nil && !errors.Is(err, redis.Nil) || strings.Contains(v, value) {
				t.Logf("cluster node %d: %q, %v", i, v, err)
				return false
			}
		}
		for i := range plain.Masters {
			if v := plain.Admin(i).Get(ctx, key).Val(); strings.Contains(v, value) {
				t.Logf("master %d: %q", i+1, v)
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the release reached every node")
}

// TestClusterShardFailoverHoldsOnce is issue 34's case with a Redis
// Cluster as master 0 and four plain masters. Two plain masters are busy
// (another owner holds the lock there), so a lock needs the other three:
// a bare quorum with the cluster. The replica of the lock's shard is cut
// off, so its master takes a's write alone. It then dies (kill -9) and
// the replica takes over, without the write. The other owner lets go,
// and b, which never saw the old node, asks for the lock. Without WAIT,
// the cluster counted for a, and b gets the lock from the cluster and
// the two freed masters while a still holds it: held twice. With WAIT on
// the slot's node, the cluster's agreement does not count
// (ErrNotReplicated): a is refused.
//
// Then, with replication healthy, a takes a lock on another shard from a
// bare quorum with the cluster, and that shard fails over (forced, its
// master alive). The promoted replica has a's write: a client that never
// saw the old node is refused while a holds the lock. a extends it on the
// promoted node once its slot map caught up, and its release leaves
// nothing on any node.
func TestClusterShardFailoverHoldsOnce(t *testing.T) {
	rc := redisCluster(t)
	plain := integration.NewProcessCluster(t, 4, integration.ProcessOptions{})
	ctx := t.Context()
	opts := &redlock.Options{MasterTimeout: slack}
	a := clusterFirstClient(t, rc, plain, opts)
	b := clusterFirstClient(t, rc, plain, opts)
	const ttl = 60 * time.Second

	busyOn(t, plain, "{job}", ttl, 2, 3)
	m, _, err := rc.Shard(ctx, "{job}")
	require.NoError(t, err)
	// The shard's replica gets nothing more: a's write stays on its master.
	require.NoError(t, rc.Link.BlackHole(m))
	la, errA := a.Acquire(ctx, "job", ttl)
	_, promoted, err := rc.KillMaster(ctx, "{job}")
	require.NoError(t, err)
	freeOn(t, plain, "{job}", 2, 3)
	lb, errB := b.Acquire(ctx, "job", ttl)
	require.False(t, errA == nil && errB == nil && la.Held(), "a and b hold the lock at once")
	// What keeps it held once: the cluster did not count for a.
	require.ErrorIs(t, errA, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, errA, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrNotReplicated, "%v", errA)
	require.NoError(t, errB, "b's lock is the only one")
	require.NoError(t, lb.Release(ctx))
	requireGone(t, rc, plain, "{job}", lb.Value())

	// Replication works: a's lock survives a failover of its shard. The
	// shard that lost its master has no replica left: another is used.
	name := ""
	for i := range 50 {
		n := fmt.Sprintf("job%d", i)
		if m2, _, err := rc.Shard(ctx, "{"+n+"}"); err == nil && m2 != promoted {
			name = n
			break
		}
	}
	require.NotEmpty(t, name, "a name on a shard with a replica")
	key := "{" + name + "}"
	busyOn(t, plain, key, ttl, 0, 2)
	la, err = a.Acquire(ctx, name, ttl)
	require.NoError(t, err)
	_, promoted, err = rc.Failover(ctx, key)
	require.NoError(t, err)
	v, err := rc.ReadKey(ctx, promoted, key)
	require.NoError(t, err, "the promoted replica has a's write")
	assert.Contains(t, v, la.Value())
	freeOn(t, plain, key, 0, 2)
	c := clusterFirstClient(t, rc, plain, opts)
	// The promoted node refuses: it holds a's lock. A fresh client's
	// first round may go before its slot map is loaded.
	refused := false
	for attempt := 0; attempt < 3 || !refused; attempt++ {
		require.Less(t, attempt, 20, "the promoted node never refused")
		_, err := c.Acquire(ctx, name, ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "attempt %d: held once", attempt)
		require.ErrorAs(t, err, &qe)
		refused = refused || errors.Is(qe.Masters[0].Err, redlock.ErrHeldElsewhere)
	}
	require.True(t, la.Held())
	// a's slot map is stale: the demoted node answers MOVED, which
	// reloads it.
	var extendErr error
	for range 20 {
		if extendErr = la.Extend(ctx, ttl); extendErr == nil || !errors.Is(extendErr, redlock.ErrNoQuorum) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, extendErr)
	require.NoError(t, la.Release(ctx))
	requireGone(t, rc, plain, key, la.Value())
}

// TestClusterMasterRenewsOneLockPerCall: a cluster master does not batch
// renewals, but renews each auto-renewed lock on the node of its slot,
// with WAIT there. Locks on every shard stay held past several TTLs.
func TestClusterMasterRenewsOneLockPerCall(t *testing.T) {
	rc := redisCluster(t)
	plain := integration.NewProcessCluster(t, 2, integration.ProcessOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := clusterFirstClient(t, rc, plain, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	const ttl = time.Second
	var locks []*redlock.Lock
	for i := range 12 { // "{r0}" to "{r11}" span the three shards
		l, err := c.Acquire(ctx, fmt.Sprintf("r%d", i), ttl)
		require.NoError(t, err)
		l.AutoRenew()
		locks = append(locks, l)
	}
	time.Sleep(3 * ttl)
	for _, l := range locks {
		require.True(t, l.Held(), "lock %s: %v", l.Key(), l.Err())
		require.NoError(t, l.Release(ctx))
	}
}
