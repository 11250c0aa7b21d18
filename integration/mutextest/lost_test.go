package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// lossClient returns the masters and a client on them. Its MasterTimeout,
// 750ms, keeps a busy machine from failing a round these tests count on.
// Fencing allows no longer one for the 3s TTL of TestLostLockUnlocksTheMutex.
func lossClient(t *testing.T) (*integration.Cluster, *redlock.Client) {
	t.Helper()
	cl := integration.NewCluster(t, 3)
	c, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 750 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return cl, c
}

// bounded returns a context that ends after 20s, so that a Lock that
// never gets the lock fails the test rather than hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loseByRefusal deletes the lock on every master, then extends it: every
// master refuses, so the lock is lost at once (no timing involved).
func loseByRefusal(t *testing.T, cl *integration.Cluster, l *redlock.Lock) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cl.FlushAll(ctx))
	require.ErrorIs(t, l.Extend(ctx, 5*time.Second), redlock.ErrNotHeld)
	waitDone(t, l)
}

// waitDone waits for l's Done, at most 10s.
func waitDone(t *testing.T, l *redlock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock is not lost after 10s")
	}
}

// freeOnMasters checks that another client can take the lock named key:
// nothing holds it on the masters.
func freeOnMasters(t *testing.T, cl *integration.Cluster, key string) {
	t.Helper()
	other, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	l, err := other.Acquire(context.Background(), key, 8*time.Second) // 4*MasterTimeout: fencing's least
	require.NoError(t, err, "the lock is free on the masters")
	require.NoError(t, l.Release(context.Background()))
}

// TestLostLockUnlocksTheMutex: once the lock is lost, the Mutex holds
// nothing: TryLock and Lock take the lock anew without an Unlock. The
// first Unlock then reports the loss and leaves the new lock held; Current
// gives the new lock from then on, and the next Unlock releases it.
// (Before, TryLock answered "this Mutex holds it" and Lock waited for its
// context until an Unlock.)
func TestLostLockUnlocksTheMutex(t *testing.T) {
	cl, c := lossClient(t)
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, m *mutex.Mutex)
	}{
		{"refused on every master", func(t *testing.T, m *mutex.Mutex) { loseByRefusal(t, cl, m.Current()) }},
		{"validity ran out", func(t *testing.T, m *mutex.Mutex) { waitDone(t, m.Current()) }},
		{"released on the Lock", func(t *testing.T, m *mutex.Mutex) {
			require.NoError(t, m.Current().Release(context.Background()))
		}},
	} {
		for _, relock := range []string{"TryLock", "Lock"} {
			t.Run(tc.name+"/"+relock, func(t *testing.T) {
				ctx := bounded(t)
				// 3s: "validity ran out" waits for it; no AutoRenew.
				m, err := mutex.New(c, "k", &mutex.Options{TTL: 3 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
				require.NoError(t, err)
				require.NoError(t, m.Lock(ctx))
				lost := m.Current()
				tc.lose(t, m)
				assert.Same(t, lost, m.Current(), "the lost lock, until reported")
				if relock == "TryLock" {
					// The keys outlive the validity by the drift allowance:
					// until they expire, the masters refuse (at most 5s).
					for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
						err := harness.Within(t, relock, func() error { return m.TryLock(ctx) })
						if err == nil {
							break
						}
						require.NotContains(t, err.Error(), "this Mutex holds it")
						require.True(t, time.Now().Before(deadline), "TryLock refused for 5s: %v", err)
					}
				} else {
					require.NoError(t, harness.Within(t, relock, func() error { return m.Lock(ctx) }))
				}
				assert.Same(t, lost, m.Current(), "the loss comes first")
				require.ErrorIs(t, m.Unlock(ctx), redlock.ErrNotHeld, "the loss, reported")
				got := m.Current()
				require.NotSame(t, lost, got, "Current gives the new lock")
				assert.True(t, got.Held(), "the report left the new lock held")
				require.NoError(t, m.Unlock(ctx), "the new hold")
				freeOnMasters(t, cl, "k")
				require.ErrorIs(t, m.Unlock(ctx), redlock.ErrNotHeld)
			})
		}
	}
}

// TestLostLockWakesTheMutexsWaiter: a goroutine that waits in Lock for the
// holder of the same Mutex gets the lock once the holder's lock is lost.
// (Before, it waited until its context ended.) The old holder's Unlock then
// reports its loss and leaves the waiter's new lock held: it must not end
// another goroutine's critical section (review of the first version, where
// it released the new lock and returned nil).
func TestLostLockWakesTheMutexsWaiter(t *testing.T) {
	cl, c := lossClient(t)
	ctx := bounded(t)
	m := newMutex(t, c, "k")
	require.NoError(t, m.Lock(ctx))
	lost := m.Current()
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	select {
	case err := <-got:
		t.Fatalf("the waiter locked while the lock was held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	loseByRefusal(t, cl, lost)
	waitLock(t, got, "the waiter after the loss")
	require.Same(t, lost, m.Current(), "the loss comes first")
	require.ErrorIs(t, m.Extend(ctx), redlock.ErrNotHeld, "the old holder cannot extend the new lock")
	require.ErrorIs(t, m.Unlock(ctx), redlock.ErrNotHeld, "the old holder's Unlock reports its loss")
	taken := m.Current()
	require.NotSame(t, lost, taken)
	assert.True(t, taken.Held(), "the waiter's lock is still held")
	require.NoError(t, m.Extend(ctx), "the waiter's")
	require.NoError(t, m.Unlock(ctx), "the waiter's Unlock")
	freeOnMasters(t, cl, "k")
}

// TestUnlockAfterLossReportsIt: the first Unlock after a loss returns an
// error wrapping ErrNotHeld and the lock's Err, and leaves the Mutex
// usable; a later Lock and Unlock work as usual.
func TestUnlockAfterLossReportsIt(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		cl, c := lossClient(t)
		ctx := bounded(t)
		m := newMutex(t, c, "k")
		require.NoError(t, m.Lock(ctx))
		lost := m.Current()
		loseByRefusal(t, cl, lost)
		err := m.Unlock(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, `release "k": this Mutex lost the lock: `)
		var qe *redlock.QuorumError
		assert.ErrorAs(t, err, &qe, "the cause: the refused extend")
		if cause := errors.Unwrap(err); assert.NotNil(t, cause, "one cause") {
			assert.Equal(t, lost.Err().Error(), cause.Error(), "the cause, not wrapped twice in ErrNotHeld")
		}
		assert.Nil(t, m.Current(), "reported")
		err = m.Unlock(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, "this Mutex does not hold it", "reported once")

		require.NoError(t, m.Lock(ctx))
		require.NoError(t, m.Unlock(ctx))
		freeOnMasters(t, cl, "k")
	})
	t.Run("client closed", func(t *testing.T) {
		cl := integration.NewCluster(t, 3)
		// 1.25s: the longest fencing allows for newMutex's 5s TTL.
		c, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 1250 * time.Millisecond})
		require.NoError(t, err)
		ctx := bounded(t)
		m := newMutex(t, c, "k")
		require.NoError(t, m.TryLock(ctx))
		require.NoError(t, c.Close())
		err = m.Unlock(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		require.ErrorIs(t, err, redlock.ErrClosed)
		assert.EqualError(t, err, `redlock: lock not held: release "k": this Mutex lost the lock: redlock: client closed`)
		err = m.TryLock(ctx)
		require.ErrorIs(t, err, redlock.ErrClosed, "the turn is free: the closed client refuses")
	})
}

// TestLossRacesUnlock: the lock ends (refused on every master, or
// released on the Lock) while Unlock runs, and Current and TryLock are
// called. The hold ends once, and its turn is given up once: afterwards
// the Mutex locks and unlocks as usual, within 5s (a turn given up twice
// would block, one never given up too). Run with -race.
func TestLossRacesUnlock(t *testing.T) {
	cl, c := lossClient(t)
	ctx := bounded(t)
	m := newMutex(t, c, "k")
	for i := range 20 {
		require.NoError(t, harness.Within(t, "Lock", func() error { return m.Lock(ctx) }), i)
		l := m.Current()
		var lose func()
		if i%2 == 0 {
			lose = func() { _ = l.Release(context.Background()) }
		} else {
			require.NoError(t, cl.FlushAll(ctx))
			lose = func() { _ = l.Extend(context.Background(), 5*time.Second) }
		}
		unlocked := make(chan error, 1)
		relocked := make(chan error, 1)
		lost := make(chan struct{})
		go func() {
			defer close(lost)
			lose()
		}()
		go func() { unlocked <- m.Unlock(context.Background()) }()
		go func() {
			_ = m.Current()
			relocked <- m.TryLock(context.Background())
		}()
		if err := <-unlocked; err != nil {
			require.ErrorIs(t, err, redlock.ErrNotHeld, i)
		}
		if err := <-relocked; err == nil { // after the loss, or the Unlock
			require.NoError(t, harness.Within(t, "Unlock", func() error { return m.Unlock(context.Background()) }), i)
		}
		// A Release on the Lock closes Done, which frees the Mutex, before
		// its round reaches the masters: until it returns, they may still
		// hold the lock and refuse a TryLock.
		<-lost
		require.NoError(t, harness.Within(t, "TryLock", func() error { return m.TryLock(ctx) }), i)
		require.NoError(t, harness.Within(t, "Unlock", func() error { return m.Unlock(ctx) }), i)
	}
	freeOnMasters(t, cl, "k")
}
