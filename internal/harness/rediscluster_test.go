package harness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisClusterFailovers starts a three-shard cluster, writes through
// a cluster client, and fails two shards over: forced with the master
// alive, and by kill -9. The promoted replicas serve the writes.
func TestRedisClusterFailovers(t *testing.T) {
	ctx := testCtx(t)
	rc := NewRedisCluster(t, RedisClusterOptions{})
	cc := rc.NewClient()
	defer cc.Close()
	keys := []string{"a", "b", "c"} // slots 15495, 3300, 7365: three shards
	masters := map[int]bool{}
	for _, k := range keys {
		require.NoError(t, cc.Set(ctx, k, "v"+k, 0).Err())
		m, r, err := rc.Shard(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, m+rc.Shards, r, "key %s", k)
		masters[m] = true
		require.NoError(t, rc.Servers.Admin(m).Wait(ctx, 1, 0).Err())
	}
	assert.Len(t, masters, 3)

	demoted, promoted, err := rc.Failover(ctx, "a")
	require.NoError(t, err)
	m, r, err := rc.Shard(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []int{promoted, demoted}, []int{m, r})
	v, err := rc.ReadKey(ctx, demoted, "a")
	require.NoError(t, err, "the demoted master replicates")
	assert.Equal(t, "va", v)

	killed, promoted, err := rc.KillMaster(ctx, "b")
	require.NoError(t, err)
	assert.False(t, rc.Servers.Masters[killed].Running())
	v, err = rc.ReadKey(ctx, promoted, "b")
	require.NoError(t, err)
	assert.Equal(t, "vb", v)
	// go-redis reloads its slot map on MOVED, not on a refused dial.
	require.Eventually(t, func() bool {
		cc.ReloadState(ctx)
		return cc.Get(ctx, "b").Val() == "vb"
	}, 10*time.Second, 50*time.Millisecond, "the client follows the failover")
}
