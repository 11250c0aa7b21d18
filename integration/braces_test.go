package integration_test

// Lock names with braces on Redis Cluster masters: all keys of one lock
// must hash to one slot, or every script fails with CROSSSLOT.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// newClusterModeMasters starts n independent masters in cluster mode, each
// a one-node cluster that serves every slot: a script whose keys span two
// slots fails there with CROSSSLOT, as on a real Redis Cluster.
func newClusterModeMasters(t *testing.T, n int) *integration.Cluster {
	t.Helper()
	cl := integration.NewProcessCluster(t, n, integration.ProcessOptions{
		Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, cl.Admin(i).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err())
	}
	for i := range n {
		require.Eventually(t, func() bool {
			info, err := cl.Admin(i).ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, 15*time.Second, 20*time.Millisecond, "master %d never reached cluster_state:ok", i)
	}
	// The harness's check: keys in two slots are refused.
	err := cl.Admin(0).Eval(ctx, "return 1", []string{"a", "b"}).Err()
	require.ErrorContains(t, err, "CROSSSLOT")
	return cl
}

// braceNames are lock names that give the keys "{name}..." an empty or
// shifted hash tag, with the prefix they are used under.
var braceNames = []struct{ prefix, key string }{
	{"", "}"},
	{"", "}a"},
	{"", "}}"},
	{"", "}{"},
	{"", "}{x}"},
	{"", "a}"},
	{"", "{"},
	{"", "{}"},
	{"", "a{b}c"},
	{"}", "k"},
	{"{}", "k"},
	{"app:}", "}"},
}

// TestBraceKeysWorkOnClusterMasters runs every kind of operation on lock
// names with braces against cluster-mode masters: exclusive, reentrant,
// read and write locks, the fencing raise round, and wake-on-release.
func TestBraceKeysWorkOnClusterMasters(t *testing.T) {
	cl := newClusterModeMasters(t, 3)
	const ttl = 10 * time.Second
	for _, name := range braceNames {
		key := name.key
		t.Run(name.prefix+"|"+key, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, cl.FlushAll(ctx)) // the last subtest's client has closed
			c := newClient(t, cl, &redlock.Options{MasterTimeout: slack, KeyPrefix: name.prefix})
			waker := hooks.NewWaker(c, key, true, time.Time{})
			defer waker.Close()

			l, err := c.Acquire(ctx, key, ttl)
			require.NoError(t, err, "acquire")
			first := l.Token()
			require.NoError(t, l.Extend(ctx, ttl), "extend")
			_, err = c.Acquire(ctx, key, ttl)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "held")
			require.NoError(t, l.Release(ctx), "release")

			// The counters differ on every master and run ahead of the
			// clocks, so that any quorum's do: the next token needs the
			// raise round.
			fence, ahead := fenceKey(t, cl, 0), time.Now().Add(time.Hour).UnixMicro()
			for i := range 3 {
				require.NoError(t, cl.Admin(i).Set(ctx, fence, "f:"+strconv.FormatInt(ahead+int64(i), 10), time.Minute).Err())
			}
			l, err = c.AcquireAs(ctx, key, "owner", ttl)
			require.NoError(t, err, "acquire with differing counters")
			assert.Greater(t, l.Token(), uint64(ahead), "after token %d", first)
			require.NoError(t, l.Reenter(ctx), "reenter")
			require.NoError(t, l.Release(ctx))
			require.NoError(t, l.Release(ctx))

			w, err := c.AcquireWrite(ctx, key, "writer", ttl)
			require.NoError(t, err, "write lock")
			_, err = c.AcquireRead(ctx, key, "reader", ttl)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "no reader while a writer holds it")
			require.NoError(t, w.Release(ctx))
			r, err := c.AcquireRead(ctx, key, "reader", ttl)
			require.NoError(t, err, "read lock")
			_, err = c.AcquireWrite(ctx, key, "writer", ttl)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "no writer while a reader holds it")
			require.NoError(t, r.Release(ctx))

			// Releases publish where the Waker listens. Its subscription is
			// made in the background: release again until one arrives.
			for attempt := 0; ; attempt++ {
				require.Less(t, attempt, 50, "no wake-up from the releases")
				select {
				case <-waker.Wake():
				case <-time.After(100 * time.Millisecond):
					l, err := c.Acquire(ctx, key, ttl)
					require.NoError(t, err)
					require.NoError(t, l.Release(ctx))
					continue
				}
				break
			}
		})
	}
}

// fenceKey returns the one key on master i that holds a released lock's
// fencing counter. A release returns once a quorum has answered, so it
// waits up to 5s for master i's.
func fenceKey(t *testing.T, cl *integration.Cluster, i int) string {
	t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		keys, err := cl.Admin(i).Keys(ctx, "*").Result()
		require.NoError(t, err)
		var free []string
		for _, k := range keys {
			if v, _ := cl.Admin(i).Get(ctx, k).Result(); isFree(v) {
				free = append(free, k)
			}
		}
		if len(free) == 1 || time.Now().After(end) {
			require.Len(t, free, 1, "of %q", keys)
			return free[0]
		}
	}
}
