package integration_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// wrappedRing is a user's type that embeds a go-redis Ring.
type wrappedRing struct{ *redis.Ring }

// A master that shards keys but is not a go-redis type the library
// knows gets one renewal call per lock. A batched call is routed by its
// first key: the other locks would not be renewed, and be lost.
func TestBatchedRenewalOnWrappedRings(t *testing.T) {
	cl := integration.NewCluster(t, 6)
	var masters []redis.Scripter
	for i := 0; i < 6; i += 2 {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{
			"a": cl.Masters[i].Addr(), "b": cl.Masters[i+1].Addr()}})
		t.Cleanup(func() { _ = ring.Close() })
		masters = append(masters, wrappedRing{ring})
	}
	c, err := redlock.New(masters, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const ttl = 900 * time.Millisecond
	locks := make([]*redlock.Lock, 20)
	for i := range locks {
		locks[i], err = c.Acquire(ctx, "wring:"+strconv.Itoa(i), ttl)
		require.NoError(t, err)
	}
	for _, l := range locks {
		l.AutoRenew()
	}
	time.Sleep(3 * ttl)
	for i, l := range locks {
		require.NoError(t, l.Err(), "lock %d", i)
	}
}
