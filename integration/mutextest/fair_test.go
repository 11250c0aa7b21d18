package mutex_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/mutex"
)

// A master down leaves a fair waiter's subscriptions unconfirmed: Wait
// starts a goroutine that waits for them. It ends with Wait, whether ctx
// ends (Lock, Wait) or the ticket is cancelled. It fails where the waker's Close leaves it running:
// one goroutine per Wait is left after the Client's Close.
func TestFairWaitEndsItsGoroutines(t *testing.T) {
	cl := integration.NewCluster(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close()) // a master down: its subscription is never confirmed
	down := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer down.Close()
	clients := append(cl.Clients(), down)
	c, err := redlock.New(clients, &redlock.Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()
	f, err := mutex.NewFair(c, "leak", &mutex.FairOptions{TTL: 30 * time.Second, WaiterTTL: time.Second})
	require.NoError(t, err)
	holder, err := f.Lock(t.Context())
	require.NoError(t, err)
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err := f.Lock(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		tk, err := f.Enqueue(t.Context())
		require.NoError(t, err)
		ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err = tk.Wait(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		done := make(chan error, 1)
		go func() { _, err := tk.Wait(t.Context()); done <- err }()
		time.Sleep(100 * time.Millisecond) // Wait is under way, or Cancel ends it before
		tk.Cancel()
		assert.ErrorIs(t, <-done, redlock.ErrNotObtained)
	}
	require.NoError(t, holder.Release(t.Context()))
	require.NoError(t, c.Close())
	goleak.VerifyNone(t, before)
}
