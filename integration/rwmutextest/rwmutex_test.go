// Package rwmutextest runs package rwmutex against real masters.
package rwmutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/rwmutex"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewValidates(t *testing.T) {
	_, err := rwmutex.New(nil, "k", nil)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, "nil *redlock.Client")
	_, err = rwmutex.New(&redlock.Client{}, "", nil)
	assert.ErrorContains(t, err, "empty key")
}

func TestUnlockWithoutLock(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	m, err := rwmutex.New(c, "doc", nil)
	require.NoError(t, err)
	ctx := context.Background()
	owner := redlock.NewOwner()
	require.ErrorIs(t, m.RUnlock(ctx, owner), redlock.ErrNotHeld)
	require.ErrorIs(t, m.Unlock(ctx, owner), redlock.ErrNotHeld)
	require.NoError(t, m.RLock(ctx, owner))
	require.NoError(t, m.RLock(ctx, owner), "readers re-enter")
	assert.Equal(t, 2, m.Reader(owner).Holds())
	require.ErrorIs(t, m.Unlock(ctx, owner), redlock.ErrNotHeld, "a read hold is not a write hold")
	require.NoError(t, m.RUnlock(ctx, owner))
	require.NoError(t, m.RUnlock(ctx, owner))
	assert.Nil(t, m.Reader(owner))
}
