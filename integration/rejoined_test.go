package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// waitCounter counts the WAIT commands a client sends.
type waitCounter struct{ n *atomic.Int64 }

func (h waitCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h waitCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "wait" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h waitCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "wait" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestPromotedPrimarysRejoinedReplicaIsWaitedFor: after a failover the
// client reaches the promoted server while the old primary is dead: it
// has no replica. The old primary then rejoins as its replica. No new
// connection, no new run_id: only the ROLE behind each write shows the
// replica. From then on every agreement that counts was covered by WAIT.
// With the rejoined replica paused, no acquire is granted: a failover to
// it would lose the lock.
func TestPromotedPrimarysRejoinedReplicaIsWaitedFor(t *testing.T) {
	g := sentinelGroups(t, 1)[0]
	ctx := t.Context()
	rc := g.NewClient()
	t.Cleanup(func() { _ = rc.Close() })
	var waits atomic.Int64
	rc.AddHook(waitCounter{&waits})
	c, err := redlock.New([]*redis.Client{rc}, &redlock.Options{MasterTimeout: slack})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	const ttl = 4 * slack // fencing's least
	try := func(key string) error {
		l, err := c.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	require.NoError(t, try("warm"))
	require.NotZero(t, waits.Load(), "WAIT while the first replica is there")

	oldAddr, err := g.PrimaryAddr(ctx)
	require.NoError(t, err)
	old := 0
	if g.Servers.Masters[1].Addr() == oldAddr {
		old = 1
	}
	require.NoError(t, g.Servers.Masters[old].Kill(ctx))
	require.Eventually(t, func() bool {
		a, err := g.PrimaryAddr(ctx)
		return err == nil && a == g.Servers.Masters[1-old].Addr()
	}, 20*time.Second, 50*time.Millisecond)
	// The client's rounds reach the promoted server, alone for now.
	var last error
	require.Eventually(t, func() bool { last = try("warm"); return last == nil }, 20*time.Second, 100*time.Millisecond, "%v", last)

	// The old primary rejoins as the promoted server's replica.
	host, port, err := net.SplitHostPort(g.Servers.Masters[1-old].Addr())
	require.NoError(t, err)
	rw := g.Servers.Masters[old].(interface {
		RestartWith(ctx context.Context, args ...string) error
	})
	require.NoError(t, rw.RestartWith(ctx, "--replicaof", host, port))
	require.Eventually(t, func() bool {
		info, err := g.Servers.Admin(1-old).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 20*time.Second, 50*time.Millisecond)

	// Rounds run until three are granted, at most 50. The first may find
	// the replica unwaited for: it knows it only from ROLE after its write.
	// Any later one WAITs. On a busy machine that WAIT may time out (within
	// 3/4 of MasterTimeout) before the replica acks: a refusal, which is
	// safe, so the round is tried again.
	const want, attempts = 3, 50
	granted, timedOut := 0, 0
	for attempt := 0; granted < want && attempt < attempts; attempt++ {
		before := waits.Load()
		// A key per round: a release left undecided does not hold up the next.
		l, err := c.Acquire(ctx, fmt.Sprintf("k%d", attempt), ttl)
		if err == nil {
			granted++
			require.Greater(t, waits.Load(), before, "attempt %d: granted without WAIT, with a replica connected", attempt)
			// The library retries an undecided release in the background.
			if err := l.Release(ctx); !errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, redlock.ErrNotHeld) {
				require.NoError(t, err)
			}
			continue
		}
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		require.ErrorIs(t, qe.Masters[0].Err, redlock.ErrNotReplicated, "%v", err)
		if attempt > 0 {
			require.Greater(t, waits.Load(), before, "attempt %d: refused without WAIT: %v", attempt, err)
			timedOut++
		}
	}
	require.Equal(t, want, granted, "%d of %d rounds granted; %d WAITs timed out", granted, attempts, timedOut)
	if timedOut > 0 {
		t.Logf("%d WAITs timed out before the replica acked", timedOut)
	}

	// The rejoined replica takes no more writes: nothing is granted.
	require.NoError(t, g.Servers.Masters[old].Pause(ctx))
	t.Cleanup(func() { _ = g.Servers.Masters[old].Resume(context.Background()) })
	_, err = c.Acquire(ctx, "paused", ttl)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "granted with the only replica paused: a failover to it loses the lock")
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrNotReplicated, "%v", err)
}
