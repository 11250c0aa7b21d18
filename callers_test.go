package redlock

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockUnlock takes and releases n keys in turn.
func lockUnlock(t *testing.T, c *Client, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		l, err := c.Acquire(ctx, fmt.Sprintf("k%d", i), time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
}

// A caller that has run a call runs later ones: 100 rounds of 5 calls
// start a few callers, not 500, and Close ends every one; a second Close
// too.
func TestCallersAreReused(t *testing.T) {
	c := newFakeClient(t, fakes(5), nil)
	lockUnlock(t, c, 50)
	started := c.callers.started.Load()
	// Usually 10 to 15: a round's calls, and those of the round before
	// still on their way back. A machine that stalls the callers while the
	// test goes on starts more (52 once in 70 runs under the race
	// detector); a caller per call would start 500.
	assert.LessOrEqual(t, started, int64(250), "callers started for 500 calls")
	assert.GreaterOrEqual(t, started, int64(5), "a round's calls run in parallel")
	require.NoError(t, c.Close())
	assert.Zero(t, c.callers.alive.Load(), "callers left after Close")
	require.NoError(t, c.Close())
}

// Callers beyond maxIdle end instead of waiting.
func TestCallersWaitingAreBounded(t *testing.T) {
	c := newFakeClient(t, fakes(5), nil)
	c.callers.maxIdle = 2
	lockUnlock(t, c, 5)
	// The bound leaves room for a busy machine.
	require.Eventually(t, func() bool { return c.callers.alive.Load() <= 2 },
		5*time.Second, 5*time.Millisecond, "more than 2 callers alive after 5s")
	assert.LessOrEqual(t, c.callers.idle.Load(), int32(2))
}

// A caller runs each call under the labels of the goroutine that made it,
// as a goroutine started for the call would: CPU profiles stay per request.
func TestCallersRunUnderTheCallersLabels(t *testing.T) {
	fs := fakes(1)
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Hour})
	pprof.Do(context.Background(), pprof.Labels("request", "first"), func(ctx context.Context) {
		_, err := c.Acquire(ctx, "first", 2*time.Hour)
		require.NoError(t, err)
	})
	require.Eventually(t, func() bool { return c.callers.idle.Load() >= 1 },
		5*time.Second, time.Millisecond, "no caller waiting after 5s")
	time.Sleep(50 * time.Millisecond) // from counting itself idle to waiting: microseconds
	started := c.callers.started.Load()

	fs[0].block(false)
	done := make(chan error, 1)
	go pprof.Do(context.Background(), pprof.Labels("request", "second"), func(ctx context.Context) {
		_, err := c.Acquire(ctx, "second", 2*time.Hour)
		done <- err
	})
	require.Eventually(t, func() bool { return fs[0].entered.Load() >= 2 },
		5*time.Second, time.Millisecond, "the second call never reached the master")
	var profile strings.Builder
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&profile, 1))
	fs[0].unblock()
	require.NoError(t, <-done)
	require.Equal(t, started, c.callers.started.Load(), "the waiting caller ran the second call")

	var labels []string
	for _, g := range strings.Split(profile.String(), "\n\n") {
		if strings.Contains(g, "redlock.(*Client).caller+") && strings.Contains(g, "fakeMaster") {
			for _, line := range strings.Split(g, "\n") {
				if strings.HasPrefix(line, "# labels:") {
					labels = append(labels, line)
				}
			}
		}
	}
	assert.Equal(t, []string{`# labels: {"request":"second"}`}, labels)
}
