package rwmutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/rwmutex"
)

// lossSetup returns the masters, an RWMutex on "doc" and a context that
// ends after 20s. The MasterTimeout, 1s, keeps a busy machine from
// failing a round the tests count on.
func lossSetup(t *testing.T) (*integration.Cluster, *rwmutex.RWMutex, context.Context) {
	t.Helper()
	cl := integration.NewCluster(t, 3)
	c, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	m, err := rwmutex.New(c, "doc", &rwmutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return cl, m, ctx
}

// loseByRefusal deletes every key on every master, then extends l: every
// master refuses, so l is lost at once.
func loseByRefusal(t *testing.T, cl *integration.Cluster, l *redlock.Lock) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cl.FlushAll(ctx))
	require.ErrorIs(t, l.Extend(ctx, 5*time.Second), redlock.ErrNotHeld)
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock is not lost after 10s")
	}
}

// writeFree checks that another client can take the write lock of "doc":
// nothing holds it on the masters.
func writeFree(t *testing.T, cl *integration.Cluster) {
	t.Helper()
	other, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	l, err := other.AcquireWrite(context.Background(), "doc", redlock.NewOwner(), 5*time.Second)
	require.NoError(t, err, "nothing holds the lock on the masters")
	require.NoError(t, l.Release(context.Background()))
}

// TestLostReadLockEndsTheReadHolds: once an owner's read lock is lost, it
// no longer reads: its Lock is no upgrade and takes the write lock. Its
// next read call reports the loss once, and the one after starts afresh.
// (Before, the owner's Lock was refused with ErrUpgrade until it had
// unlocked each read hold.)
func TestLostReadLockEndsTheReadHolds(t *testing.T) {
	cl, m, ctx := lossSetup(t)
	owner := redlock.NewOwner()
	require.NoError(t, m.RLock(ctx, owner))
	require.NoError(t, m.RLock(ctx, owner))
	lost := m.Reader(owner)
	loseByRefusal(t, cl, lost)
	assert.Same(t, lost, m.Reader(owner), "the lost lock, until reported")

	require.NoError(t, m.Lock(ctx, owner), "no upgrade: the owner reads no more")
	require.NoError(t, m.Unlock(ctx, owner))
	err := m.RUnlock(ctx, owner)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.ErrorContains(t, err, `release read "doc": owner "`+owner+`" lost the lock: `)
	assert.Nil(t, m.Reader(owner))
	require.ErrorIs(t, m.RUnlock(ctx, owner), redlock.ErrNotHeld)

	require.NoError(t, m.RLock(ctx, owner), "afresh")
	require.NotSame(t, lost, m.Reader(owner))
	require.NoError(t, m.RUnlock(ctx, owner))
	writeFree(t, cl)
}

// TestLostWriteLockEndsTheWriteHolds: once an owner's write lock is lost,
// its next write call, a Lock, reports the loss as a failed re-entry, and
// the next takes the write lock anew. (Before, every Lock of the owner
// failed until it had unlocked each write hold.)
func TestLostWriteLockEndsTheWriteHolds(t *testing.T) {
	cl, m, ctx := lossSetup(t)
	owner := redlock.NewOwner()
	require.NoError(t, m.Lock(ctx, owner))
	lost := m.Writer(owner)
	loseByRefusal(t, cl, lost)
	err := m.TryLock(ctx, owner)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.ErrorContains(t, err, `reenter "doc": owner "`+owner+`" lost the lock: `)
	require.NoError(t, m.Lock(ctx, owner), "afresh")
	require.NotSame(t, lost, m.Writer(owner))
	require.NoError(t, m.Unlock(ctx, owner))
	writeFree(t, cl)
}

// TestNilContextIsRefused: every call of an RWMutex that takes a context
// refuses a nil one with ErrInvalidArgument, before it touches anything:
// no panic, the holds are unchanged, and an unlock with a context then
// releases the lock on the masters.
func TestNilContextIsRefused(t *testing.T) {
	cl, m, ctx := lossSetup(t)
	var nilCtx context.Context
	reader, writer := redlock.NewOwner(), redlock.NewOwner()
	for _, side := range []struct {
		owner        string
		lock, unlock func(context.Context, string) error
		held         func(string) *redlock.Lock
		ops          map[string]func(context.Context, string) error
	}{
		{reader, m.RLock, m.RUnlock, m.Reader, map[string]func(context.Context, string) error{
			"RLock": m.RLock, "TryRLock": m.TryRLock, "RUnlock": m.RUnlock,
			"Lock": m.Lock, "TryLock": m.TryLock, "Unlock": m.Unlock,
		}},
		{writer, m.Lock, m.Unlock, m.Writer, map[string]func(context.Context, string) error{
			"RLock": m.RLock, "TryRLock": m.TryRLock, "RUnlock": m.RUnlock,
			"Lock": m.Lock, "TryLock": m.TryLock, "Unlock": m.Unlock,
		}},
	} {
		require.NoError(t, side.lock(ctx, side.owner))
		held := side.held(side.owner)
		for op, call := range side.ops {
			err := harness.Within(t, op, func() error { return call(nilCtx, side.owner) })
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
			assert.EqualError(t, err, `redlock: invalid argument: RWMutex.`+op+` "doc": nil context`)
			require.Same(t, held, side.held(side.owner), op)
			require.Equal(t, 1, held.Holds(), op)
			require.True(t, held.Held(), op)
		}
		assert.Nil(t, m.Reader(writer), "the writer's calls took no read hold")
		assert.Nil(t, m.Writer(reader), "the reader's calls took no write hold")
		require.NoError(t, side.unlock(ctx, side.owner))
		writeFree(t, cl)
	}
}
