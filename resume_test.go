package redlock_test

import (
	"context"
	"errors"
	"fmt"
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

func resumeClient(t *testing.T, cluster *harness.Cluster) *redlock.Client {
	t.Helper()
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// resumeLeft returns the keys on the masters but released locks' fencing
// counters and release markers, which expire.
func resumeLeft(t *testing.T, clients []*redis.Client) []string {
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

// resumeLeftDetail is resumeLeft with each key's master, value and TTL.
func resumeLeftDetail(t *testing.T, cluster *harness.Cluster) []string {
	t.Helper()
	var left []string
	for i := range cluster.Masters {
		for _, k := range resumeLeft(t, []*redis.Client{cluster.Admin(i)}) {
			v, _ := cluster.Admin(i).Get(t.Context(), k).Result()
			d, _ := cluster.Admin(i).PTTL(t.Context(), k).Result()
			left = append(left, fmt.Sprintf("master %d %s=%q (PTTL %v)", i, k, v, d))
		}
	}
	return left
}

// longestPTTL returns, and reads no later than Resume's start, the
// longest TTL a master has left for key.
func longestPTTL(t *testing.T, cluster *harness.Cluster, key string) time.Duration {
	t.Helper()
	var longest time.Duration
	for i := range cluster.Masters {
		d, err := cluster.Admin(i).PTTL(t.Context(), "{"+key+"}").Result()
		require.NoError(t, err)
		longest = max(longest, d)
	}
	return longest
}

func TestResumeTakesOver(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	first, second := resumeClient(t, cluster), resumeClient(t, cluster)
	ctx := t.Context()

	old, err := first.AcquireAs(ctx, "job", "alice", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, old.Reenter(ctx))
	time.Sleep(300 * time.Millisecond) // the TTL runs down: Resume must not restore it

	before := time.Now()
	pttl := longestPTTL(t, cluster, "job")
	// A TTL longer than what is left: validity must not come from it.
	l, err := second.Resume(ctx, "job", "alice", 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, old.Token(), l.Token(), "the stored token")
	assert.Equal(t, "alice", l.Value())
	assert.Equal(t, 1, l.Holds(), "earlier re-entries are forgotten")
	assert.True(t, l.Held())
	assert.False(t, l.Until().After(before.Add(pttl)), "validity %v past the remaining TTL %v", l.Until().Sub(before), pttl)

	// The old Lock's nonce is gone on every master.
	err = old.Extend(ctx, 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.ErrorIs(t, old.Err(), redlock.ErrNotHeld, "the old Lock is lost")

	// An ordinary Lock from now on.
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	l.AutoRenew()
	require.NoError(t, l.Release(ctx))
	assert.Eventually(t, func() bool { return len(resumeLeft(t, cluster.Clients())) == 0 }, 5*time.Second, 10*time.Millisecond)
	_, err = second.Acquire(ctx, "job", 2*time.Second)
	assert.NoError(t, err, "the lock is free")
}

func TestResumeWrongOwner(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c := resumeClient(t, cluster)
	ctx := t.Context()
	l, err := c.AcquireAs(ctx, "job", "alice", 10*time.Second)
	require.NoError(t, err)

	_, err = c.Resume(ctx, "job", "bob", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.True(t, errors.As(err, &qe), "%v", err)
	assert.Equal(t, "resume", qe.Op)
	refused := 0
	for _, m := range qe.Masters {
		if errors.Is(m.Err, redlock.ErrNotHeld) {
			refused++
		}
	}
	assert.GreaterOrEqual(t, refused, 2, "the masters refuse: %v", err)

	_, err = c.Resume(ctx, "free", "alice", 10*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "nothing to resume")

	require.NoError(t, l.Extend(ctx, 10*time.Second), "alice's lock is untouched")
	require.NoError(t, l.Release(ctx))
	assert.Eventually(t, func() bool { return len(resumeLeft(t, cluster.Clients())) == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A Mutex resumes the lock another Mutex holds, by its Value.
func TestMutexResume(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	first, second := resumeClient(t, cluster), resumeClient(t, cluster)
	ctx := t.Context()
	a, err := mutex.New(first, "job", &mutex.Options{TTL: 5 * time.Second})
	require.NoError(t, err)
	b, err := mutex.New(second, "job", &mutex.Options{TTL: 5 * time.Second, AutoRenew: true})
	require.NoError(t, err)
	require.NoError(t, a.Lock(ctx))
	value, token := a.Current().Value(), a.Current().Token()

	require.NoError(t, b.Resume(ctx, value))
	assert.Equal(t, token, b.Current().Token())
	assert.ErrorIs(t, b.Resume(ctx, value), redlock.ErrNotObtained, "b holds it already")
	assert.ErrorIs(t, a.Extend(ctx), redlock.ErrNotHeld, "a lost it")
	require.NoError(t, b.Unlock(ctx))
	// Bounded: the release reaches the third master in the background.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = resumeLeftDetail(t, cluster); len(left) == 0 {
			return
		}
	}
	t.Errorf("keys left 5s after Unlock: %v", left)
}

func TestResumeBadInput(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c := resumeClient(t, cluster)
	ctx := t.Context()
	for name, f := range map[string]func() error{
		"empty key":   func() error { _, err := c.Resume(ctx, "", "alice", time.Second); return err },
		"empty owner": func() error { _, err := c.Resume(ctx, "job", "", time.Second); return err },
		"short TTL":   func() error { _, err := c.Resume(ctx, "job", "alice", time.Millisecond); return err },
		//lint:ignore SA1012 a nil context is what is tested
		"nil context": func() error { _, err := c.Resume(nil, "job", "alice", time.Second); return err }, //nolint:staticcheck
	} {
		assert.ErrorIs(t, f(), redlock.ErrInvalidArgument, name)
	}
	var zero redlock.Client
	_, err := zero.Resume(ctx, "job", "alice", time.Second)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Empty(t, resumeLeft(t, cluster.Clients()))
}
