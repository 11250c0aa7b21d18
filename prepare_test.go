package redlock

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// infoCounter is a go-redis hook that counts INFO commands.
type infoCounter struct{ n atomic.Int64 }

func (h *infoCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *infoCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "info") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *infoCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestDeadMasterIsSetUpAtMostOncePerInterval: a master that cannot be
// identified (nothing listens there) is set up again in the background at
// most once per retryPreparation while a quorum is ready without it, not
// on every acquire. Before, each acquire started a setup (an INFO) as soon
// as the last had failed. The bound allows two setups per interval
// started, whatever the machine's speed.
func TestDeadMasterIsSetUpAtMostOncePerInterval(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })
	infos := &infoCounter{}
	dead.AddHook(infos)
	fs := fakes(2)
	// Close gives the dead master's pending releases 4*MasterTimeout.
	c, err := New([]redis.Scripter{fs[0], fs[1], dead}, &Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	start := time.Now()
	for range 50 {
		l, err := c.Acquire(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	intervals := int64(time.Since(start)/retryPreparation) + 1
	require.NoError(t, c.Close())
	assert.Positive(t, infos.n.Load(), "the dead master's setup was tried")
	assert.LessOrEqual(t, infos.n.Load(), 2*intervals, "setups in %d intervals", intervals)
}
