package integration_test

// Masters that are rueidis clients, through package rueidisadapter.

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rueidisadapter"
)

// newRueidisClient returns a redlock.Client on the cluster's masters through
// rueidis clients, all closed when the test ends.
func newRueidisClient(t *testing.T, cl *integration.Cluster) *redlock.Client {
	t.Helper()
	c, err := redlock.New(rueidisMasters(t, cl), &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// rueidisMasters returns a rueidis client of each of the cluster's masters,
// through the adapter, closed when the test ends.
func rueidisMasters(t *testing.T, cl *integration.Cluster) []redis.Scripter {
	t.Helper()
	var masters []redis.Scripter
	for _, addr := range cl.Addrs() {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		masters = append(masters, rueidisadapter.New(rc))
	}
	return masters
}

func TestLockThroughRueidis(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last: after the clients are closed
	cl := integration.NewCluster(t, 3)
	c, other := newRueidisClient(t, cl), newRueidisClient(t, cl)
	ctx := context.Background()

	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	first := l.Token()
	assert.Positive(t, first)
	_, err = other.Acquire(ctx, "job", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "held")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	// The refusals decide; a master may not be heard, or may have taken
	// the other's acquire before our late one (then undone).
	refused := 0
	for _, m := range qe.Masters {
		if errors.Is(m.Err, redlock.ErrHeldElsewhere) {
			refused++
		}
	}
	assert.GreaterOrEqual(t, refused, 2, "a refusal is an answer: %v", err)
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)

	// A master that lost its scripts replies NOSCRIPT: EVAL follows.
	for i := range cl.Masters {
		require.NoError(t, cl.Admin(i).ScriptFlush(ctx).Err())
	}
	l, err = other.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err, "after SCRIPT FLUSH")
	assert.Greater(t, l.Token(), first)
	require.NoError(t, l.Release(ctx))

	// Tokens beyond 2^53 come back as text, exact: through a float64 they
	// would round to a multiple of 256. (Late calls of the rounds above may
	// still add one or two.)
	const big = 1<<60 + 1
	for i := range cl.Masters {
		require.NoError(t, cl.Admin(i).Set(ctx, "{job}", "f:"+strconv.FormatUint(big, 10), time.Minute).Err())
	}
	l, err = c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	assert.True(t, l.Token() > big && l.Token() <= big+3, "token %d", l.Token())
	require.NoError(t, l.Release(ctx))
}

func TestRueidisScriptCommands(t *testing.T) {
	cl := integration.NewCluster(t, 1)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), ForceSingleClient: true})
	require.NoError(t, err)
	defer rc.Close()
	s := rueidisadapter.New(rc)
	ctx := context.Background()
	script := redis.NewScript("return ARGV[1]")

	sha, err := s.ScriptLoad(ctx, "return ARGV[1]").Result()
	require.NoError(t, err)
	assert.Equal(t, script.Hash(), sha)
	ok, err := s.ScriptExists(ctx, sha, "0000000000000000000000000000000000000000").Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false}, ok)
	v, err := s.EvalSha(ctx, sha, nil, int64(7)).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(7), v)
	v, err = s.EvalShaRO(ctx, sha, nil, 8).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(8), v)
	str, err := s.EvalRO(ctx, "return ARGV[1]", nil, "x").Text()
	require.NoError(t, err)
	assert.Equal(t, "x", str)

	err = s.Eval(ctx, "return redis.error_reply('boom')", nil).Err()
	var reply redis.Error
	require.ErrorAs(t, err, &reply, "a reply error is a redis.Error")
	assert.EqualError(t, err, "boom")
	assert.ErrorIs(t, s.Eval(ctx, "return nil", nil).Err(), redis.Nil)
	err = s.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
	assert.True(t, redis.HasErrorPrefix(err, "NOSCRIPT"), "%v", err)
}

var _ redlock.ChannelSubscriber = (*rueidisadapter.Scripter)(nil)

// TestRueidisWaitersAreWokenByReleases: a Mutex waiter on rueidis masters
// is woken by the holder's release, through the adapter's subscriptions,
// and the subscriptions end once no one waits. Timing: the waiter's timer
// waits at least 2.5s (MinRetryDelay 5s, drawn from its upper half); the
// wake-up must come within 2s of the release, which takes milliseconds.
func TestRueidisWaitersAreWokenByReleases(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last: after the clients are closed
	cl := integration.NewCluster(t, 3)
	holder, waiter := newRueidisClient(t, cl), newRueidisClient(t, cl)
	ctx := context.Background()
	l, err := holder.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	m, err := mutex.New(waiter, "job", &mutex.Options{MinRetryDelay: 5 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	locked := make(chan time.Time, 1)
	go func() {
		if err := m.Lock(ctx); assert.NoError(t, err) {
			locked <- time.Now()
		}
	}()
	subscribers := func() (n int64) {
		for i := range cl.Masters {
			subs, err := cl.Admin(i).PubSubNumSub(ctx, "{job}").Result()
			require.NoError(t, err)
			n += subs["{job}"]
		}
		return n
	}
	require.Eventually(t, func() bool { return subscribers() == 3 }, 10*time.Second, 5*time.Millisecond,
		"the waiter subscribed on every master")

	released := time.Now()
	require.NoError(t, l.Release(ctx))
	select {
	case at := <-locked:
		assert.Less(t, at.Sub(released), 2*time.Second, "woken by the release, not by its timer")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
	require.NoError(t, m.Unlock(ctx))
	require.Eventually(t, func() bool { return subscribers() == 0 }, 15*time.Second, 10*time.Millisecond,
		"the subscriptions end once no one waits")
}

// TestCloseIsBoundedWithAPausedRueidisMaster: Close ends the subscriptions
// of a waiter on rueidis masters, one of them paused, within its bound:
// about 8*MasterTimeout, plus 100ms for the UNSUBSCRIBE the paused master
// does not answer (260ms here). Asserted with a margin of 440ms: 700ms.
func TestCloseIsBoundedWithAPausedRueidisMaster(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	mt := 20 * time.Millisecond
	c, err := redlock.New(rueidisMasters(t, cl), &redlock.Options{MasterTimeout: mt})
	require.NoError(t, err)
	ctx := context.Background()
	l, err := newClient(t, cl, nil).Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	m, err := mutex.New(c, "job", &mutex.Options{MinRetryDelay: 5 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() { waited <- m.Lock(ctx) }()
	require.Eventually(t, func() bool {
		subs, err := cl.Admin(0).PubSubNumSub(ctx, "{job}").Result()
		return err == nil && subs["{job}"] == 1
	}, 10*time.Second, 5*time.Millisecond, "the waiter subscribed on master 0")
	require.NoError(t, cl.Masters[0].Pause(ctx))
	t.Cleanup(func() { _ = cl.Masters[0].Resume(ctx) })

	start := time.Now()
	require.NoError(t, c.Close())
	assert.Less(t, time.Since(start), 700*time.Millisecond)
	require.ErrorIs(t, <-waited, redlock.ErrClosed)
	require.NoError(t, cl.Masters[0].Resume(ctx))
	require.NoError(t, l.Release(ctx))
}
