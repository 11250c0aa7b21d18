package integration_test

// Fencing tokens are exact over the whole int64 range: Lua numbers are
// doubles, exact only up to 2^53, and a token must never pass through one.

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

const twoTo53 = 1 << 53

// setFences sets the fencing counter of the lock named key, released, on
// every master (values[i] on master i).
func setFences(t *testing.T, cl *integration.Cluster, key string, values ...uint64) {
	t.Helper()
	for i, v := range values {
		require.NoError(t, cl.Admin(i).Set(context.Background(), "{"+key+"}", "f:"+strconv.FormatUint(v, 10), time.Minute).Err())
	}
}

// fences returns the fencing counter of the lock named key on every master,
// as stored: a held lock's token, or a released one's counter.
func fences(t *testing.T, cl *integration.Cluster, key string) []string {
	t.Helper()
	out := make([]string, len(cl.Masters))
	for i := range cl.Masters {
		v, err := cl.Admin(i).Get(context.Background(), "{"+key+"}").Result()
		require.NoError(t, err)
		if c, ok := strings.CutPrefix(v, "f:"); ok {
			out[i] = c
		} else {
			out[i] = stored(t, cl, i, key).Token
		}
	}
	return out
}

// takeToken acquires the lock named key, checks the token stored with it
// on every master that holds it, releases it and returns the token.
func takeToken(t *testing.T, c *redlock.Client, cl *integration.Cluster, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	l, err := c.Acquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	// The raise round, if any, goes on in the background after the quorum.
	want := repeat(strconv.FormatUint(l.Token(), 10), len(cl.Masters))
	var tokens []string
	ok := assert.Eventually(t, func() bool {
		tokens = make([]string, len(cl.Masters))
		for i := range cl.Masters {
			tokens[i] = stored(t, cl, i, key).Token
		}
		return assert.ObjectsAreEqual(want, tokens)
	}, 2*time.Second, time.Millisecond, "every master stores the token")
	if !ok {
		t.Logf("tokens stored: %q, want %q", tokens, want[0])
	}
	require.NoError(t, l.Release(ctx))
	waitReleased(t, cl, key)
	return l.Token()
}

// TestFencingTokensExactAbove2To53: from 2^53 on, a double cannot tell
// consecutive integers apart; tokens must still be exact and strictly
// increasing. The original scripts handed out 2^53, 2^53, 2^53+2, 2^53+4,
// 2^53+4 here.
func TestFencingTokensExactAbove2To53(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	const start = twoTo53 - 2
	setFences(t, cl, "tok", start, start, start, start, start)
	for i := range uint64(6) {
		assert.Equal(t, start+1+i, takeToken(t, c, cl, "tok"), "acquisition %d", i)
	}
	assert.Equal(t, repeat(strconv.FormatUint(start+6, 10), 5), fences(t, cl, "tok"))
}

// TestFencingTokensExactWhenCountersDiffer: the counters differ across the
// masters, so the token is their largest and a second round raises the
// others to it; the comparison there must be exact too.
func TestFencingTokensExactWhenCountersDiffer(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	// A quorum of all five: the token is the largest counter of every
	// master, not of whichever three answer first.
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack, Quorum: 5})
	const m = twoTo53
	// Incremented: m+3 on master 0, m+2 elsewhere. A double holds neither m+3
	// (it rounds to m+4) nor m+5.
	setFences(t, cl, "mixed", m+2, m+1, m+1, m+1, m+1)
	assert.Equal(t, uint64(m+3), takeToken(t, c, cl, "mixed"))
	assert.Equal(t, repeat(strconv.Itoa(m+3), 5), fences(t, cl, "mixed"), "raised to the token everywhere")
	setFences(t, cl, "mixed", m+3, m+3, m+3, m+4, m+4)
	assert.Equal(t, uint64(m+5), takeToken(t, c, cl, "mixed"))
	assert.Equal(t, repeat(strconv.Itoa(m+5), 5), fences(t, cl, "mixed"))
	assert.Equal(t, uint64(m+6), takeToken(t, c, cl, "mixed"))
}

// TestFencingTokensUpToMaxInt64: tokens run exactly up to the largest
// int64, including through the raise round. Past it the counter would overflow: every
// master refuses with an error that names the counter, the acquire fails
// with ErrNotObtained, and nothing is left locked.
func TestFencingTokensUpToMaxInt64(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack, Quorum: 5}) // as above
	const top = math.MaxInt64
	setFences(t, cl, "end", top-3, top-3, top-3, top-3, top-3)
	assert.Equal(t, uint64(top-2), takeToken(t, c, cl, "end"))
	setFences(t, cl, "end", top-3, top-1, top-3, top-3, top-2) // master 1 gives the largest
	assert.Equal(t, uint64(top), takeToken(t, c, cl, "end"))
	assert.Equal(t, repeat(strconv.Itoa(top), 5), fences(t, cl, "end"), "raised to the largest int64")

	_, err := c.Acquire(context.Background(), "end", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Zero(t, qe.Agreed)
	for i, m := range qe.Masters {
		require.Error(t, m.Err, "master %d", i)
		assert.Contains(t, m.Err.Error(), "fencing counter 9223372036854775807 of {end} cannot be incremented", "master %d", i)
		assert.Contains(t, m.Err.Error(), "overflow", "master %d", i)
	}
	assert.Equal(t, repeat(strconv.Itoa(top), 5), fences(t, cl, "end"), "counters unchanged")
	waitReleased(t, cl, "end")
	assertEmpty(t, cl)
}

// TestFencingTokensGrowAcrossEmptyRestarts: tokens are a hybrid logical
// clock, so a lock taken after every master lost its data (restarted
// empty, or its counter expired) still gets a larger token than before;
// counters alone would start again from 1. The token is the client's clock
// in microseconds when the masters' clocks agree with it.
func TestFencingTokensGrowAcrossEmptyRestarts(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	ctx := context.Background()
	before := uint64(time.Now().UnixMicro())
	first := takeToken(t, c, cl, "hlc")
	assert.GreaterOrEqual(t, first, before, "about the clock in µs")
	assert.LessOrEqual(t, first, uint64(time.Now().UnixMicro()), "about the clock in µs")

	require.NoError(t, cl.FlushAll(ctx)) // every master lost its data
	assert.Greater(t, takeToken(t, c, cl, "hlc"), first)
}

// TestFenceKeysExpire: a released lock leaves its fencing counter in its
// key for the rest of the key's TTL, exactly as the lock had it, so that
// lock names used once leave nothing for long.
func TestFenceKeysExpire(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	const ttl = 800 * time.Millisecond // 4*MasterTimeout: fencing's least
	l, err := c.Acquire(ctx, "once", ttl)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	require.NoError(t, l.Release(ctx))
	waitReleased(t, cl, "once")
	for i := range cl.Masters {
		v, err := cl.Admin(i).Get(ctx, "{once}").Result()
		if errors.Is(err, redis.Nil) {
			continue // expired already on a slow machine
		}
		require.NoError(t, err)
		// The lock's token, or a larger one that a master agreeing after
		// the decision handed out (a proposal that came late is raised into
		// the master's clock window).
		counter, ok := strings.CutPrefix(v, "f:")
		require.True(t, ok, "master %d holds %q, not a free lock", i, v)
		n, err := strconv.ParseUint(counter, 10, 64)
		require.NoError(t, err, "master %d", i)
		assert.GreaterOrEqual(t, n, l.Token(), "master %d", i)
		pttl, err := cl.Admin(i).PTTL(ctx, "{once}").Result()
		require.NoError(t, err)
		assert.True(t, pttl == -2 || pttl > 0 && pttl <= ttl, "the counter on master %d expires in %v", i, pttl)
	}
	// Redis expires a key on access at the latest: EXISTS sees it gone.
	require.Eventually(t, func() bool {
		for i := range cl.Masters {
			if n, err := cl.Admin(i).Exists(ctx, "{once}").Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	}, ttl+5*time.Second, 10*time.Millisecond, "counters gone once the TTL ran out")
}
