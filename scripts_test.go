package redlock

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// A fenced acquire's token is the client's proposal where it is within
// TTL/16 of the master's clock, the nearest end of that window where it is
// not, and the counter + 1 where that is larger: the same from EVALSHA
// and from the functions library.
func TestAcquireTokenOnARealMaster(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	rdb := cl.Admin(0)
	ctx := t.Context()
	require.NoError(t, rdb.FunctionLoad(ctx, functions.Code()).Err())
	const ttl = 16_000 // ms: the window is ±1 s
	const slack = 1_000_000
	acquire := exclusiveMode.acquire
	ways := map[string]func(key string, proposal int64) *redis.Cmd{
		"EVALSHA": func(key string, proposal int64) *redis.Cmd {
			return acquire.Run(ctx, rdb, []string{key}, "owner", ttl, 1, proposal, 0, "nonce")
		},
		"FCALL": func(key string, proposal int64) *redis.Cmd {
			return rdb.FCall(ctx, functions.Name(acquire), []string{key}, "owner", ttl, 1, proposal, 0, "nonce")
		},
	}
	// clock returns the master's clock in microseconds.
	clock := func() int64 {
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMicro()
	}
	for way, run := range ways {
		token := func(key string, proposal func(now int64) int64) (lo, got, hi int64) {
			t.Helper()
			lo = clock()
			text, err := run(way+key, proposal(lo)).Text()
			require.NoError(t, err, "%s %s", way, key)
			hi = clock()
			got, err = strconv.ParseInt(text, 10, 64)
			require.NoError(t, err, "%s %s: %q", way, key, text)
			return lo, got, hi
		}
		lo, got, _ := token("inside", func(now int64) int64 { return now - slack/2 })
		assert.Equal(t, lo-slack/2, got, "%s: a proposal in the window is the token", way)
		lo, got, hi := token("ahead", func(now int64) int64 { return now + 3600_000_000 })
		assert.True(t, lo+slack <= got && got <= hi+slack, "%s: %d not within [%d, %d]", way, got, lo+slack, hi+slack)
		lo, got, hi = token("behind", func(now int64) int64 { return now - 3600_000_000 })
		assert.True(t, lo-slack <= got && got <= hi-slack, "%s: %d not within [%d, %d]", way, got, lo-slack, hi-slack)

		const counter = "8999999999999999999" // beyond any clock: counter + 1, digit by digit
		require.NoError(t, rdb.Set(ctx, lockKey(way+"counter"), "f:"+counter, 0).Err())
		text, err := run(lockKey(way+"counter"), clock()).Text()
		require.NoError(t, err)
		assert.Equal(t, "9000000000000000000", text, way)
	}
}
