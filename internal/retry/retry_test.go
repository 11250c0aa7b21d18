package retry

import (
	"context"
	"fmt"
	"testing"

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
