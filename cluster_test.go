package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/internal/pipeline"
)

// clusterClient returns a Client whose master 0 is rc, and the others
// plain masters, with a 1s master timeout and no fencing counter. It is
// closed at cleanup.
func clusterClient(t *testing.T, rc *harness.RedisCluster, plain *harness.Cluster) *Client {
	t.Helper()
	cc := rc.NewClient()
	t.Cleanup(func() { _ = cc.Close() })
	masters := []redis.Scripter{cc}
	if plain != nil {
		for _, c := range plain.Clients() {
			masters = append(masters, c)
		}
	}
	c, err := New(masters, &Options{MasterTimeout: time.Second, NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// commandCalls returns how many times server i of rc ran cmd.
func commandCalls(ctx context.Context, t *testing.T, rc *harness.RedisCluster, i int, cmd string) int {
	t.Helper()
	info, err := rc.Servers.Admin(i).Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	line := infoField(info, "cmdstat_"+cmd) // calls=N,usec=...
	calls, _, _ := strings.Cut(strings.TrimPrefix(line, "calls="), ",")
	n := 0
	for _, d := range calls {
		n = n*10 + int(d-'0')
	}
	return n
}

// TestClusterNodeOfTheSlotIsTheServer: a cluster master's calls for a
// lock go to the node that serves its slot, which is identified, and
// whose replicas are waited for. Shard a has its replica, shard b lost
// it: a's lock is followed by WAIT and ROLE on a's node, b's by ROLE
// alone on b's node, and each node's identity tells its own run_id and
// replica count.
func TestClusterNodeOfTheSlotIsTheServer(t *testing.T) {
	ctx := t.Context()
	rc := harness.NewRedisCluster(t, harness.RedisClusterOptions{})
	const keyA, keyB = "a", "b" // "{a}" and "{b}" hash to two shards
	ma, _, err := rc.Shard(ctx, "{"+keyA+"}")
	require.NoError(t, err)
	mb, rb, err := rc.Shard(ctx, "{"+keyB+"}")
	require.NoError(t, err)
	require.NotEqual(t, ma, mb)
	require.NoError(t, rc.Servers.Masters[rb].Kill(ctx))
	require.Eventually(t, func() bool {
		info, err := rc.Servers.Admin(mb).Info(ctx, "replication").Result()
		return err == nil && infoField(info, "connected_slaves") == "0"
	}, 10*time.Second, 10*time.Millisecond, "b's master lost its replica")

	c := clusterClient(t, rc, nil)
	require.NoError(t, c.Verify(ctx), "every master node is checked")
	waits, roles := commandCalls(ctx, t, rc, ma, "wait"), commandCalls(ctx, t, rc, ma, "role")
	la, err := c.Acquire(ctx, keyA, 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, commandCalls(ctx, t, rc, ma, "wait"), waits, "WAIT on a's node")
	assert.Greater(t, commandCalls(ctx, t, rc, ma, "role"), roles, "ROLE on a's node")
	waits, roles = commandCalls(ctx, t, rc, mb, "wait"), commandCalls(ctx, t, rc, mb, "role")
	lb, err := c.Acquire(ctx, keyB, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, waits, commandCalls(ctx, t, rc, mb, "wait"), "no WAIT on b's node: no replica")
	assert.Greater(t, commandCalls(ctx, t, rc, mb, "role"), roles, "ROLE on b's node")

	for _, tc := range []struct {
		lock     *Lock
		server   int
		replicas int
	}{{la, ma, 1}, {lb, mb, 0}} {
		to, err := c.nodes[0].shards.Route(tc.lock.keys)
		require.NoError(t, err)
		info, err := rc.Servers.Admin(tc.server).Info(ctx, "server").Result()
		require.NoError(t, err)
		id := to.ID.(*idCache)
		assert.Equal(t, infoField(info, "run_id"), id.Last(), "lock %s: the identity is its node's", tc.lock.Key())
		assert.Equal(t, tc.replicas, id.Replicas(), "lock %s: its node's replicas", tc.lock.Key())
		runID, verdict, known := id.Known()
		assert.True(t, known)
		assert.NoError(t, verdict, "a master")
		assert.Equal(t, id.Last(), runID)
	}
	require.NoError(t, la.Release(ctx))
	require.NoError(t, lb.Release(ctx))

	// A master node that is down is reported by its address.
	require.NoError(t, rc.Servers.Masters[mb].Kill(ctx))
	err = c.Verify(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node "+rc.Announced(mb)+": ", "%v", err)
}

// TestClusterMovedSlotIsNotCounted: after a failover the client has not
// seen yet, the node it routes a lock to answers MOVED. That answer is
// an error, never an agreement, and makes the client reload its slot
// map. The node that took the slot over is then quarantined, as a new
// run_id would be, until the longest TTL has passed; then it counts.
func TestClusterMovedSlotIsNotCounted(t *testing.T) {
	ctx := t.Context()
	rc := harness.NewRedisCluster(t, harness.RedisClusterOptions{})
	plain := harness.NewProcessCluster(t, 2, harness.ProcessOptions{})
	c := clusterClient(t, rc, plain)
	const key, ttl = "job", 2 * time.Second
	// Plain master 2 is busy: a lock needs the cluster.
	require.NoError(t, plain.Admin(1).Set(ctx, "{"+key+"}", "other", time.Hour).Err())
	l, err := c.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	_, promoted, err := rc.Failover(ctx, "{"+key+"}")
	require.NoError(t, err)
	_, err = c.Acquire(ctx, key, ttl)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.False(t, qe.Masters[0].Agreed)
	assert.ErrorContains(t, qe.Masters[0].Err, "MOVED", "the old node redirects")

	// The slot map reloads in the background: the new node is then
	// quarantined, and counts once the longest TTL has passed.
	quarantined := false
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 100, "the lock is never obtained")
		l, err = c.Acquire(ctx, key, ttl)
		if err == nil {
			break
		}
		require.ErrorAs(t, err, &qe)
		if errors.Is(qe.Masters[0].Err, ErrQuarantined) {
			quarantined = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.True(t, quarantined, "the node that took the slot over was quarantined")
	v, err := rc.ReadKey(ctx, promoted, "{"+key+"}")
	require.NoError(t, err)
	assert.Contains(t, v, l.Value(), "the lock is on the promoted node")
	require.NoError(t, l.Release(ctx))
}

// TestStaleErrors tells which errors of a routed call reload the slot
// map. The servers' errors are real replies.
func TestStaleErrors(t *testing.T) {
	ctx := t.Context()
	admin := harness.NewProcessCluster(t, 1, harness.ProcessOptions{}).Admin(0)
	reply := func(msg string) error {
		err := admin.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
		require.Error(t, err)
		return err
	}
	for _, tc := range []struct {
		err   error
		stale bool
	}{
		{nil, false},
		{pipeline.ErrQueueFull, false},
		{redis.ErrClosed, true},
		{context.DeadlineExceeded, true},
		{reply("MOVED 3999 127.0.0.1:6381"), true},
		{reply("ASK 3999 127.0.0.1:6381"), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("ERR Error running script"), false},
		{reply("NOSCRIPT No matching script"), false},
	} {
		assert.Equal(t, tc.stale, stale(tc.err), "%v", tc.err)
	}
}
