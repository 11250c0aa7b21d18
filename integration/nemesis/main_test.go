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
	goleak.VerifyTestMain(m)
}
