package harness

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// CountingHook is a go-redis hook that shows every command a client
// sends, alone or in a pipeline, to the function before sending it.
type CountingHook func(cmds ...redis.Cmder)

func (f CountingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f CountingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}

func (f CountingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f(cmds...)
		return next(ctx, cmds)
	}
}
