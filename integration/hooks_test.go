package integration_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/harness"
)

// scriptHook counts the script calls (EVALSHA, EVAL, FCALL) a go-redis
// client sends, alone or pipelined.
type scriptHook struct{ calls atomic.Int64 }

func (h *scriptHook) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		switch strings.ToLower(c.Name()) {
		case "evalsha", "eval", "fcall":
			h.calls.Add(1)
		}
	}
}

// serverScriptCalls returns how many script calls master i has run since
// its statistics were reset, failed and rejected ones included.
func serverScriptCalls(t *testing.T, cl *integration.Cluster, i int) int64 {
	t.Helper()
	info, err := cl.Admin(i).Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
		default:
			continue
		}
		require.True(t, ok)
		for field := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k == "calls" || k == "rejected_calls" { // calls counts the failed ones
				c, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				n += c
			}
		}
	}
	return n
}

// A go-redis hook is the way to instrument redlock's calls: it sees every
// script call a master runs, those pipelined together included. (A type
// that embeds *redis.Client and overrides EvalSha sees only the calls sent
// alone: batches go through the embedded client's Pipeline.)
func TestHookSeesEveryScriptCall(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	ctx := t.Context()
	hooks := make([]*scriptHook, len(cl.Masters))
	masters := make([]*redis.Client, len(cl.Masters))
	for i, addr := range cl.Addrs() {
		require.NoError(t, cl.Admin(i).ConfigResetStat(ctx).Err())
		masters[i] = redis.NewClient(integration.MasterOptions(addr))
		t.Cleanup(func() { _ = masters[i].Close() })
		hooks[i] = &scriptHook{}
		masters[i].AddHook(harness.CountingHook(hooks[i].count))
	}
	c, err := redlock.New(masters, &redlock.Options{MasterTimeout: slack})
	require.NoError(t, err)

	// Many goroutines at once, so that calls to each master are batched.
	const goroutines, rounds = 32, 4
	var wg sync.WaitGroup
	var acquired atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				l, err := c.Acquire(ctx, "hook:"+strconv.Itoa(g*rounds+r), 10*time.Second)
				if err != nil {
					continue
				}
				acquired.Add(1)
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	require.NoError(t, c.Close()) // waits for the calls left in the background
	require.Positive(t, acquired.Load())
	for i := range cl.Masters {
		ran := serverScriptCalls(t, cl, i)
		assert.GreaterOrEqual(t, ran, 2*acquired.Load(), "master %d ran an acquire and a release per lock", i)
		assert.Equal(t, ran, hooks[i].calls.Load(), "master %d: the hook saw every script call it ran", i)
	}
}
