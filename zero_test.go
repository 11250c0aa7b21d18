package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// invalid checks that err wraps ErrInvalidArgument and says what to use.
func invalid(t *testing.T, name string, err error, want string) {
	t.Helper()
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
	assert.ErrorContains(t, err, want, name)
}

func TestZeroClient(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*redlock.Client{"zero Client": {}, "nil Client": nil} {
		t.Run(name, func(t *testing.T) {
			want := name + ": use redlock.New"
			for op, f := range map[string]func() error{
				"Acquire": func() error { _, err := c.Acquire(ctx, "k", time.Second); return err },
				"AcquireAs": func() error {
					_, err := c.AcquireAs(ctx, "k", "owner", time.Second)
					return err
				},
				"AcquireWrite": func() error {
					_, err := c.AcquireWrite(ctx, "k", "owner", time.Second)
					return err
				},
				"AcquireRead": func() error {
					_, err := c.AcquireRead(ctx, "k", "owner", time.Second)
					return err
				},
				"LoadScripts": func() error { return c.LoadScripts(ctx) },
				"Verify":      func() error { return c.Verify(ctx) },
				"Close":       func() error { return c.Close() },
			} {
				invalid(t, op, harness.Within(t, op, f), want)
			}
			assert.Zero(t, harness.Within(t, "Quorum", c.Quorum))
			assert.Empty(t, harness.Within(t, "Masters", c.Masters))
		})
	}
}

func TestZeroLock(t *testing.T) {
	ctx := context.Background()
	for name, l := range map[string]*redlock.Lock{"zero Lock": {}, "nil Lock": nil} {
		t.Run(name, func(t *testing.T) {
			want := name + ": use Client.Acquire"
			for op, f := range map[string]func() error{
				"Reenter": func() error { return l.Reenter(ctx) },
				"Extend":  func() error { return l.Extend(ctx, time.Second) },
				"Release": func() error { return l.Release(ctx) },
				"Err":     l.Err,
				"Context": func() error { return context.Cause(l.Context()) },
			} {
				invalid(t, op, harness.Within(t, op, f), want)
			}
			assert.Empty(t, harness.Within(t, "Key", l.Key))
			assert.Empty(t, harness.Within(t, "Value", l.Value))
			assert.Zero(t, harness.Within(t, "Token", l.Token))
			assert.Zero(t, harness.Within(t, "Holds", l.Holds))
			assert.Zero(t, harness.Within(t, "Until", l.Until))
			assert.False(t, harness.Within(t, "Held", l.Held))
			assert.NotEmpty(t, harness.Within(t, "String", l.String))
			harness.Within(t, "AutoRenew", func() int { l.AutoRenew(); return 0 })
			done := harness.Within(t, "Done", l.Done)
			select {
			case <-done:
			default:
				t.Error("Done of a zero Lock is not closed")
			}
		})
	}
}
