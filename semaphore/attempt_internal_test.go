package semaphore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// A release woke Acquire for slot 0, but another permit took slot 0
// first. Slot 1 is free, and no release may announce it: its permit
// expired, or its release woke this same waiter before the attempt read
// the slot (two releases, one waiter). The attempt takes slot 1, which the
// masters name, in the same attempt. Before, it returned refused after
// the one round, and Acquire waited for its fallback timer (up to
// MaxRetryDelay) with a permit free.
func TestTakenFreedSlotTriesTheNamedSlot(t *testing.T) {
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	const capacity, ttl = 2, 10 * time.Second
	s, err := New(client, "freed", &Options{TTL: ttl})
	require.NoError(t, err)
	other, next, err := permits.AcquirePermit(t.Context(), client, "freed", capacity, 0, ttl)
	require.NoError(t, err, "slot 0 on an empty semaphore")
	require.Equal(t, -1, next)
	t.Cleanup(func() { _ = other.Release(context.Background()) })

	l, err := s.attempt(t.Context(), capacity, 0)
	require.NoError(t, err, "slot 0 is taken, slot 1 free")
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	_, err = s.TryAcquire(t.Context(), capacity)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "both permits are held")
}
