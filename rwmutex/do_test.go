package rwmutex_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/rwmutex"
)

func TestDoAndRDo(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := t.Context()
	m, err := rwmutex.New(c, "doc", &rwmutex.Options{TTL: 3 * time.Second})
	require.NoError(t, err)
	reader, other, writer := redlock.NewOwner(), redlock.NewOwner(), redlock.NewOwner()

	err = m.RDo(ctx, reader, func(ctx context.Context, l *redlock.Lock) error {
		assert.True(t, l.Held())
		assert.Same(t, l, m.Reader(reader))
		// Readers share the lock; a writer is kept out.
		require.NoError(t, m.RDo(ctx, other, func(context.Context, *redlock.Lock) error { return nil }))
		assert.ErrorIs(t, m.TryLock(ctx, writer), redlock.ErrNotObtained)
		return nil
	})
	require.NoError(t, err)
	assert.Nil(t, m.Reader(reader))

	err = m.Do(ctx, writer, func(ctx context.Context, l *redlock.Lock) error {
		assert.Same(t, l, m.Writer(writer))
		assert.Positive(t, l.Token())
		assert.ErrorIs(t, m.TryRLock(ctx, reader), redlock.ErrNotObtained)
		return nil
	})
	require.NoError(t, err)
	assert.Nil(t, m.Writer(writer))

	assert.ErrorIs(t, m.Do(ctx, writer, nil), redlock.ErrInvalidArgument)
	assert.ErrorIs(t, m.RDo(ctx, reader, nil), redlock.ErrInvalidArgument)

	assert.Eventually(t, func() bool { // nothing left but counters and markers
		for _, cl := range cluster.Clients() {
			keys, err := cl.Keys(context.Background(), "*").Result()
			require.NoError(t, err)
			for _, k := range keys {
				v, _ := cl.Get(context.Background(), k).Result()
				if !strings.HasPrefix(v, "f:") && !strings.Contains(k, ":gone:") {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
}
