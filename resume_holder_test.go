package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/internal/link"
)

// TestResumeStoresTheHolder: a Lock that Resume makes stores the
// resuming client's Options.Holder with its nonce, as Acquire's do. A
// restarted process resumes with a new pid: inspect must show it.
func TestResumeStoresTheHolder(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	client := func(holder string) *Client {
		c, err := New(cluster.Clients(), &Options{MasterTimeout: 500 * time.Millisecond, Holder: holder})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close()) })
		return c
	}
	ctx := t.Context()
	old, err := client("web-3 pid 42").Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	l, err := client("web-3 pid 43").Resume(ctx, "job", old.Value(), 10*time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(l.nonce, " web-3 pid 43"), "nonce %q", l.nonce)
	for i := range cluster.Masters {
		v, err := cluster.Admin(i).Get(ctx, "{job}").Result()
		require.NoError(t, err)
		h, ok := link.ParseHolder(v)
		require.True(t, ok, v)
		assert.Equal(t, l.nonce, h.Nonce, "master %d", i)
		assert.Equal(t, old.Value(), h.Owner, "master %d", i)
	}
	require.NoError(t, l.Release(ctx))
}

// TestResumedLockHasTheResumesValues: with an Observer, a resumed Lock's
// renewals carry the values of Resume's context, as an acquired Lock's
// carry the acquire's: its renewals belong to the trace of the work.
func TestResumedLockHasTheResumesValues(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	rec := &ctxRecorder{rounds: map[string][]any{}, events: map[EventKind][]any{}}
	c, err := New(cluster.Clients(), &Options{MasterTimeout: 500 * time.Millisecond, Observer: rec})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	old, err := c.AcquireAs(t.Context(), "job", "alice", 2*time.Second) // 4*MasterTimeout: fencing's least
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "resumed"))
	l, err := c.Resume(ctx, "job", old.Value(), time.Second)
	require.NoError(t, err)
	cancel() // the caller's context ends: renewal goes on
	l.AutoRenew()
	require.Eventually(t, func() bool { return len(rec.event(EventRenewed)) > 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "resumed", rec.event(EventRenewed)[0], "a renewal of the resumed Lock")
	require.NoError(t, l.Release(context.Background()))
}
