package mutex_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// doCluster starts n masters and returns them with a Client on them.
func doCluster(t *testing.T, n int) (*harness.Cluster, *redlock.Client) {
	t.Helper()
	cluster := harness.NewProcessCluster(t, n, harness.ProcessOptions{})
	return cluster, newDoClient(t, cluster)
}

func newDoClient(t *testing.T, cluster *harness.Cluster) *redlock.Client {
	t.Helper()
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// leftKeys returns the keys on the masters but released locks' fencing
// counters and release markers, which expire.
func leftKeys(t *testing.T, clients []*redis.Client) []string {
	t.Helper()
	var left []string
	for _, c := range clients {
		keys, err := c.Keys(context.Background(), "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			v, _ := c.Get(context.Background(), k).Result()
			if !strings.HasPrefix(v, "f:") && !strings.Contains(k, ":gone:") {
				left = append(left, k)
			}
		}
	}
	return left
}

// assertNothingLeft checks, within 5s, that no lock is left on the
// masters: the release reaches the slowest in the background.
func assertNothingLeft(t *testing.T, cluster *harness.Cluster) {
	t.Helper()
	assert.Eventually(t, func() bool { return len(leftKeys(t, cluster.Clients())) == 0 }, 5*time.Second, 10*time.Millisecond,
		"left on the masters: %v", leftKeys(t, cluster.Clients()))
}

// assertNoWatcher checks that no goroutine of Do's is left.
func assertNoWatcher(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	assert.NotContains(t, stacks, "internal/retry.watch", "Do left its watcher running")
}

func newMutex(t *testing.T, c *redlock.Client, key string, ttl time.Duration) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(c, key, &mutex.Options{TTL: ttl})
	require.NoError(t, err)
	return m
}

func TestDoRunsUnderLockAndReleases(t *testing.T) {
	cluster, c := doCluster(t, 3)
	other := newDoClient(t, cluster)
	ctx := t.Context()
	m := newMutex(t, c, "job", 3*time.Second)

	ran := false
	err := m.Do(ctx, func(ctx context.Context, l *redlock.Lock) error {
		ran = true
		assert.NoError(t, ctx.Err())
		assert.True(t, l.Held())
		assert.Same(t, l, m.Current())
		assert.Positive(t, l.Token())
		_, err := other.Acquire(ctx, "job", 2*time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotObtained, "another client took the lock during Do")
		// Longer than the TTL: only renewal keeps it.
		select {
		case <-ctx.Done():
			t.Errorf("Do's context ended: %v", context.Cause(ctx))
		case <-time.After(4 * time.Second):
		}
		assert.True(t, l.Held(), "renewal kept the lock")
		return nil
	})
	require.NoError(t, err)
	assert.True(t, ran)
	assert.Nil(t, m.Current())
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}

func TestDoJoinsErrors(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	errWork := errors.New("work failed")
	err := m.Do(t.Context(), func(context.Context, *redlock.Lock) error { return errWork })
	assert.ErrorIs(t, err, errWork)
	assert.Equal(t, errWork, err, "a release that succeeds adds nothing")
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}

// A lost lock ends fn's context at once, with the lock's error as its
// cause; Do's error reports the loss too.
func TestDoCancelsOnLoss(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 2*time.Second)
	ctx := t.Context()

	var cause, lockErr error
	err := m.Do(ctx, func(ctx context.Context, l *redlock.Lock) error {
		// A majority forgets the lock: the next renewal, within half a
		// TTL, finds it lost.
		for i := range 2 {
			require.NoError(t, cluster.Admin(i).Del(ctx, "{job}").Err())
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("Do's context did not end within 10s of the loss")
		}
		cause, lockErr = context.Cause(ctx), l.Err()
		return ctx.Err()
	})
	require.Error(t, lockErr)
	assert.ErrorIs(t, lockErr, redlock.ErrNotHeld)
	assert.Equal(t, lockErr, cause, "the context's cause is the lock's Err")
	assert.ErrorIs(t, err, context.Canceled, "fn's error")
	assert.ErrorIs(t, err, redlock.ErrNotHeld, "the unlock reports the loss")
	assert.Nil(t, m.Current())
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}

// Renewal that cannot reach a quorum ends fn's context before the
// validity runs out: the renewal gives up once a retry could not end in
// time, and Do's margin (a tenth of the TTL) backs it up.
func TestDoCancelsWhenRenewalFails(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	ctx := t.Context()
	t.Cleanup(func() {
		for i := range 2 {
			_ = cluster.Masters[i].Resume(context.Background())
		}
	})

	var cause, lockErr error
	var left time.Duration
	_ = m.Do(ctx, func(ctx context.Context, l *redlock.Lock) error {
		for i := range 2 { // renewals time out: nothing proves a loss
			require.NoError(t, cluster.Masters[i].Pause(ctx))
		}
		select {
		case <-ctx.Done():
			left = time.Until(l.Until())
		case <-time.After(10 * time.Second):
			t.Error("Do's context did not end within 10s")
		}
		cause, lockErr = context.Cause(ctx), l.Err()
		return nil
	})
	require.Error(t, cause)
	assert.ErrorIs(t, cause, redlock.ErrNotHeld)
	if lockErr != nil {
		assert.Equal(t, lockErr, cause, "the context's cause is the lock's Err")
	} else {
		assert.ErrorContains(t, cause, "validity runs out")
	}
	assert.Positive(t, left, "cancelled before Until")
	assertNoWatcher(t)
}

func TestDoPanicReleases(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	var p any
	func() {
		defer func() { p = recover() }()
		_ = m.Do(t.Context(), func(context.Context, *redlock.Lock) error { panic("boom") })
	}()
	assert.Equal(t, "boom", p, "the panic goes on")
	assert.Nil(t, m.Current())
	require.NoError(t, m.TryLock(t.Context()), "the Mutex is free again")
	require.NoError(t, m.Unlock(t.Context()))
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}

func TestDoBadInput(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	called := false
	fn := func(context.Context, *redlock.Lock) error { called = true; return nil }

	err := m.Do(t.Context(), nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, "nil func")
	//lint:ignore SA1012 a nil context is what is tested
	err = m.Do(nil, fn) //nolint:staticcheck
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, "nil context")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = m.Do(ctx, fn)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, called, "fn ran without the lock")
	assert.Nil(t, m.Current())
	assertNothingLeft(t, cluster)

	r, err := mutex.NewReentrant(c, "job", nil)
	require.NoError(t, err)
	assert.ErrorIs(t, r.Do(t.Context(), "owner", nil), redlock.ErrInvalidArgument)
}

// A Reentrant's Do adds a hold to the owner's and removes it after.
func TestReentrantDo(t *testing.T) {
	cluster, c := doCluster(t, 3)
	r, err := mutex.NewReentrant(c, "job", &mutex.Options{TTL: 3 * time.Second})
	require.NoError(t, err)
	ctx := t.Context()
	owner := redlock.NewOwner()
	require.NoError(t, r.Lock(ctx, owner))
	err = r.Do(ctx, owner, func(_ context.Context, l *redlock.Lock) error {
		assert.Equal(t, 2, l.Holds())
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 1, r.Current(owner).Holds())
	require.NoError(t, r.Unlock(ctx, owner))
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}

// A Mutex whose earlier lock was lost, its loss not reported yet, still
// runs fn under the lock Do takes, and Do releases that lock. The loss
// is left for an Unlock to report.
func TestDoAfterUnreportedLoss(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	ctx := t.Context()
	require.NoError(t, m.Lock(ctx))
	old := m.Current()
	require.NoError(t, old.Release(ctx)) // a loss for the Mutex

	ran := false
	err := m.Do(ctx, func(ctx context.Context, l *redlock.Lock) error {
		ran = true
		assert.True(t, old != l, "fn got the lost lock")
		assert.True(t, l.Held(), "fn's lock is held")
		assert.NoError(t, ctx.Err(), "fn's context ended: %v", context.Cause(ctx))
		return nil
	})
	assert.True(t, ran)
	assert.NoError(t, err)
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
	assert.ErrorIs(t, m.Unlock(ctx), redlock.ErrNotHeld, "the old loss is reported")
	require.NoError(t, m.TryLock(ctx), "the Mutex is free")
	require.NoError(t, m.Unlock(ctx))
}

// fn that unlocks the Mutex itself lets another holder take it. Do's
// own unlock then must not release that holder's lock.
func TestDoUnlockedByFn(t *testing.T) {
	cluster, c := doCluster(t, 3)
	m := newMutex(t, c, "job", 3*time.Second)
	ctx := t.Context()
	var next *redlock.Lock
	err := m.Do(ctx, func(context.Context, *redlock.Lock) error {
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, m.Lock(ctx)) // another goroutine's turn
		next = m.Current()
		return nil
	})
	assert.ErrorIs(t, err, redlock.ErrNotHeld, "Do found its lock unlocked")
	require.NotNil(t, next)
	assert.True(t, next.Held(), "Do released the next holder's lock: %v", next.Err())
	assert.True(t, next == m.Current(), "the next holder's lock is the Mutex's")
	require.NoError(t, m.Unlock(ctx))
	assertNoWatcher(t)
	assertNothingLeft(t, cluster)
}
