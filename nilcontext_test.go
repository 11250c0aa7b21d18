package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// A nil context is refused before anything is touched: before the fix, a
// nil context panicked while the client counted the call in flight (Close
// then hung), or after Release had marked the lock released (the lock then
// stayed on every master for its TTL).
func TestNilContextIsRefusedBeforeAnythingChanges(t *testing.T) {
	fs := fakes(3)
	c, err := New(fs, &Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	var nilCtx context.Context // a variable: staticcheck flags a literal nil

	for op, f := range map[string]func() error{
		"acquire": func() error { _, err := c.Acquire(nilCtx, "k", 10*time.Second); return err },
		"acquire as": func() error {
			_, err := c.AcquireAs(nilCtx, "k", "owner", 10*time.Second)
			return err
		},
		"acquire write": func() error {
			_, err := c.AcquireWrite(nilCtx, "k", "owner", 10*time.Second)
			return err
		},
		"acquire read": func() error {
			_, err := c.AcquireRead(nilCtx, "k", "owner", 10*time.Second)
			return err
		},
		"load scripts": func() error { return c.LoadScripts(nilCtx) },
		"verify":       func() error { return c.Verify(nilCtx) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "nil context", op)
	}

	l, err := c.AcquireAs(ctx, "k", "owner", 10*time.Second)
	require.NoError(t, err)
	// Two masters decided the acquire: wait for the third's answer.
	heldEverywhere(t, fs, 1)
	for op, f := range map[string]func() error{
		"reenter": func() error { return l.Reenter(nilCtx) },
		"extend":  func() error { return l.Extend(nilCtx, 10*time.Second) },
		"release": func() error { return l.Release(nilCtx) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, ErrInvalidArgument, op)
		assert.ErrorContains(t, err, op+": nil context")
	}
	assert.True(t, l.Held(), "the refused calls left the lock held")
	assert.Equal(t, 1, l.Holds())
	assert.NoError(t, l.Err())
	for i, f := range fs {
		assert.True(t, held(f), "master %d still holds the lock", i)
	}

	// The lock can still be released, and nothing is left in flight:
	// Close waits for the calls that the release left in the background.
	require.NoError(t, l.Release(ctx))
	require.NoError(t, harness.Within(t, "Close", c.Close))
	for i, f := range fs {
		assert.False(t, held(f), "master %d released the lock", i)
	}
}
