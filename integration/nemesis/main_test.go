package nemesis_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// Dials to killed or cut masters are expected here; go-redis would log each.
	redis.SetLogger(quietLogger{})
	// toxiproxy v2.5.0 leaks this goroutine (not ours) when a toxic is
	// removed while a connection closes: the noop toxic that RemoveToxic
	// starts blocks for ever sending to the closed link's output, and the
	// link's reader blocks behind it, sending to a stub nobody drains.
	// go-redis retries a dial that failed (a killed Sentinel primary) on
	// a goroutine of its own, waking once a second; it ends at its next
	// wake once its pool is closed.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/stream.(*ChanWriter).Write"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
