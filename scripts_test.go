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

// An extend or re-entry never shortens a lock's TTL, so that one whose
// call timed out and lands after a later, longer one cannot cut the lock
// short of what its Lock counts on. A longer one still lengthens it.
func TestExtendNeverShortensOnARealMaster(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	rdb := cl.Admin(0)
	ctx := t.Context()
	const long, short, longer = 60_000, 5_000, 120_000 // ms
	// run runs script s of a Lock of "owner" (nonce "nonce") on name's
	// keys with ttl and holds.
	run := func(m *mode, s *redis.Script, name string, ttl, holds int64) int64 {
		t.Helper()
		v, err := s.Run(ctx, rdb, m.keys("", name), "owner", ttl, holds, "0", 0, "nonce").Int64()
		require.NoError(t, err)
		return v
	}
	// left returns the TTL in ms of key, or of the reader's entry in the
	// sorted set key:r for a read lock.
	left := func(m *mode, name string) int64 {
		t.Helper()
		k := lockKey(name)
		if m == readMode {
			score, err := rdb.ZScore(ctx, k+":r", "owner").Result()
			require.NoError(t, err)
			now, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			return int64(score) - now.UnixMilli()
		}
		d, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		return d.Milliseconds()
	}
	for name, m := range map[string]*mode{"exclusive": exclusiveMode, "write": writeMode, "read": readMode} {
		require.Positive(t, run(m, m.acquire, name, long, 1), name)
		require.Positive(t, run(m, m.extend, name, short, 1), name)
		assert.Greater(t, left(m, name), int64(long-10_000), "%s: an extend shortened the lock", name)
		require.Positive(t, run(m, m.acquire, name, short, 2), name)
		assert.Greater(t, left(m, name), int64(long-10_000), "%s: a re-entry shortened the lock", name)
		require.Positive(t, run(m, m.extend, name, longer, 2), name)
		assert.Greater(t, left(m, name), int64(longer-10_000), "%s: an extend did not lengthen the lock", name)
	}
}

// A last release replies 2 where an acquire was refused while its Lock
// held the lock (and publishes), 1 where none was: from EVALSHA and from
// the functions library.
func TestLastReleaseTellsItWasWaitedFor(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	rdb := cl.Admin(0)
	ctx := t.Context()
	require.NoError(t, rdb.FunctionLoad(ctx, functions.Code()).Err())
	m := exclusiveMode
	for _, fcall := range []bool{false, true} {
		run := func(s *redis.Script, key string, args ...any) int64 {
			t.Helper()
			var cmd *redis.Cmd
			if fcall {
				cmd = rdb.FCall(ctx, functions.Name(s), []string{key}, args...)
			} else {
				cmd = s.Run(ctx, rdb, []string{key}, args...)
			}
			v, err := cmd.Int64()
			require.NoError(t, err, "fcall %v", fcall)
			return v
		}
		for _, waited := range []bool{false, true} {
			key := lockKey(strconv.FormatBool(fcall) + strconv.FormatBool(waited))
			require.EqualValues(t, 1, run(m.acquire, key, "a", 10_000, 1, 0, 0, "n1"))
			if waited {
				require.EqualValues(t, 0, run(m.acquire, key, "b", 10_000, 1, 0, 0, "n2"), "refused")
			}
			want := int64(1)
			if waited {
				want = replyWaited
			}
			assert.Equal(t, want, run(m.release, key, "a", 10_000, 0, 0, 0, "n1"), "fcall %v, waited %v", fcall, waited)
		}
	}
}
