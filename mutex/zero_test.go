package mutex_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

func TestZeroMutex(t *testing.T) {
	var m mutex.Mutex
	ctx := context.Background() // never ends: a zero Mutex must not wait
	for op, f := range map[string]func() error{
		"Lock":    func() error { return m.Lock(ctx) },
		"TryLock": func() error { return m.TryLock(ctx) },
		"Unlock":  func() error { return m.Unlock(ctx) },
		"Extend":  func() error { return m.Extend(ctx) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "zero Mutex: use mutex.New", op)
	}
	assert.Empty(t, harness.Within(t, "Key", m.Key))
	assert.Nil(t, harness.Within(t, "Current", m.Current))
}

func TestZeroReentrant(t *testing.T) {
	var r mutex.Reentrant
	ctx := context.Background()
	owner := redlock.NewOwner()
	for op, f := range map[string]func() error{
		"Lock":    func() error { return r.Lock(ctx, owner) },
		"TryLock": func() error { return r.TryLock(ctx, owner) },
		"Unlock":  func() error { return r.Unlock(ctx, owner) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "zero Reentrant: use mutex.NewReentrant", op)
	}
	assert.Nil(t, harness.Within(t, "Current", func() *redlock.Lock { return r.Current(owner) }))
}

// TestLongKeyIsCutInErrors: an error names a long key by its first 64
// bytes and its length, not whole (a 1 MiB key made every error 1 MiB).
// Unlock of a Mutex that holds nothing sends nothing: no master needed.
func TestLongKeyIsCutInErrors(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { require.NoError(t, rc.Close()) }()
	c, err := redlock.New([]*redis.Client{rc}, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	key := strings.Repeat("k", 1<<20)
	m, err := mutex.New(c, key, nil)
	require.NoError(t, err)
	err = m.Unlock(context.Background())
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Less(t, len(err.Error()), 200, "the key is cut")
	assert.Contains(t, err.Error(), "(1048576 bytes)")
}
