package retry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// TestRunCancelsWithinTheMargin: a lock that nothing renews ends Run's
// context margin before Until, with a cause that says so. The lock's own
// signal would fire only at Until. The test allows the margin, 300ms, of
// scheduling slack.
func TestRunCancelsWithinTheMargin(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := t.Context()
	l, err := c.Acquire(ctx, "job", time.Second)
	require.NoError(t, err)

	const margin = 300 * time.Millisecond
	var left time.Duration
	var cause error
	unlocked := false
	err = Run(ctx, l, margin, time.Second, func(ctx context.Context, got *redlock.Lock) error {
		assert.Same(t, l, got)
		select {
		case <-ctx.Done():
			left = time.Until(l.Until())
		case <-time.After(5 * time.Second):
			t.Error("Run's context did not end within 5s")
		}
		cause = context.Cause(ctx)
		return nil
	}, func(ctx context.Context) error {
		unlocked = true
		assert.NoError(t, ctx.Err(), "unlock gets a live context")
		_, bounded := ctx.Deadline()
		assert.True(t, bounded, "unlock's context is bounded")
		return l.Release(ctx)
	})
	require.NoError(t, err)
	assert.True(t, unlocked)
	assert.ErrorIs(t, cause, redlock.ErrNotHeld)
	assert.ErrorContains(t, cause, "validity runs out")
	assert.Positive(t, left, "cancelled before Until")
	assert.LessOrEqual(t, left, margin)
}
