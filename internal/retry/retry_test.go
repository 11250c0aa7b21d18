package retry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// TestWaitErrorMatchesTheContextThatEnded: the context ends after an
// attempt's round was decided, so the attempt's error does not tell; Wait's
// must still match ctx.Err().
func TestWaitErrorMatchesTheContextThatEnded(t *testing.T) {
	c, err := redlock.New([]redis.Scripter{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	refused := fmt.Errorf("%w: held elsewhere", redlock.ErrNotObtained)
	_, err = Wait(ctx, c, "k", false, Options{}, &Turn{}, func(context.Context) (*redlock.Lock, error) {
		cancel()
		return nil, refused
	})
	require.ErrorIs(t, err, refused)
	require.ErrorIs(t, err, context.Canceled)
}

// TestBackoffDoublesUpToItsMost: the delays double from the least to the
// most and stay there; each is drawn from the upper half of its step.
func TestBackoffDoublesUpToItsMost(t *testing.T) {
	b := Options{MinRetryDelay: 5 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}.Backoff()
	for _, step := range []time.Duration{5, 10, 20, 40, 80, 160, 200, 200, 200} {
		step *= time.Millisecond
		for range 20 {
			d := b.Draw()
			require.GreaterOrEqual(t, d, step/2, "step %v", step)
			require.LessOrEqual(t, d, step, "step %v", step)
		}
		b.Double()
	}
}
