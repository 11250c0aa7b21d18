package integration_test

// A released lock leaves its fencing counter in its key (see scripts.lua):
// the release frees it in one command where the lock is ours, and puts back
// whatever else it finds, TTL and all.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/link"
)

// TestReleasePutsBackWhatIsNotOurs: on each master the last release finds
// something else where its lock was: another holder, a free lock whose
// counter is larger or smaller than its token, or nothing. It leaves the
// first two as they were, TTL included, raises the smaller counter to its
// token, creates nothing where nothing was, and frees its own lock.
func TestReleasePutsBackWhatIsNotOurs(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	token := l.Token()
	other := link.FormatHolder(link.Holder{Owner: "other", Nonce: "other-nonce", Holds: 1, Token: strconv.FormatUint(token+7, 10)})
	larger, smaller := "f:"+strconv.FormatUint(token+100, 10), "f:"+strconv.FormatUint(token-100, 10)
	ttls := []time.Duration{30 * time.Second, 20 * time.Second, 10 * time.Second}
	for i, v := range []string{other, larger, smaller} {
		require.NoError(t, cl.Admin(i).Set(ctx, "{job}", v, ttls[i]).Err())
	}
	require.NoError(t, cl.Admin(3).Del(ctx, "{job}").Err())

	err = l.Release(ctx)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "ours on one master only")
	ours := "f:" + strconv.FormatUint(token, 10)
	// The release failed once three masters refused: those where it freed
	// the lock may not have answered yet (5s: room for a busy machine).
	for _, i := range []int{2, 4} {
		require.Eventually(t, func() bool { return cl.Admin(i).Get(ctx, "{job}").Val() == ours },
			5*time.Second, 5*time.Millisecond, "master %d not freed", i)
	}
	for i, want := range []string{other, larger, ours, "", ours} {
		v, err := cl.Admin(i).Get(ctx, "{job}").Result()
		if want == "" {
			assert.ErrorIs(t, err, redis.Nil, "master %d: %q", i, v)
			continue
		}
		require.NoError(t, err, "master %d", i)
		assert.Equal(t, want, v, "master %d", i)
		pttl, err := cl.Admin(i).PTTL(ctx, "{job}").Result()
		require.NoError(t, err)
		limit := time.Minute // master 4: the lock's own TTL
		if i < len(ttls) {
			limit = ttls[i]
		}
		// Kept, not set anew: at most what it was, and not far below on a
		// busy machine.
		assert.True(t, pttl <= limit && pttl > limit-10*time.Second, "master %d: PTTL %v, was %v", i, pttl, limit)
	}
}

// TestFencingAcquireDecidedAfterAQuarterOfTheTTLFails: a fencing token is
// larger than every earlier one only if its round was decided within a
// quarter of the TTL (see "Fencing tokens" in README.md). A TTL below
// 4*MasterTimeout is refused before any call: one slow master would make
// every acquisition late. At 4*MasterTimeout a round is still late if its
// caller stalls past a quarter of the TTL once the calls are out (a long
// pause, an overloaded machine). Here the masters agree at once, and the
// decision comes 1s after the acquire began: a fencing acquire fails,
// undone, and says why; one without fencing succeeds with validity left.
// Margins: the round starts within 500ms of the acquire (it takes
// milliseconds), so the decision is past the quarter (500ms); the masters
// answer within the 500ms MasterTimeout; about 1s of validity is left.
func TestFencingAcquireDecidedAfterAQuarterOfTheTTLFails(t *testing.T) {
	const masterTimeout, ttl = 500 * time.Millisecond, 2 * time.Second // exactly 4*MasterTimeout
	const stall = time.Second                                          // from the acquire's call to its decision
	cl := integration.NewCluster(t, 5)
	fencing := newClient(t, cl, &redlock.Options{MasterTimeout: masterTimeout})
	plain := newClient(t, cl, &redlock.Options{MasterTimeout: masterTimeout, NoFencing: true})
	ctx := context.Background()
	for _, c := range []*redlock.Client{fencing, plain} { // scripts loaded, connections open
		l, err := c.Acquire(ctx, "warm", ttl)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}

	// Below 4*MasterTimeout: refused up front, with both values.
	before := evalCalls(t, cl)
	_, err := fencing.Acquire(ctx, "job", ttl-time.Millisecond)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, "TTL 1.999s: must be at least 4*MasterTimeout (2s) with fencing")
	assert.Equal(t, before, evalCalls(t, cl), "nothing sent")
	l, err := plain.Acquire(ctx, "job", ttl-time.Millisecond)
	require.NoError(t, err, "without fencing, a TTL longer than MasterTimeout will do")
	require.NoError(t, l.Release(ctx))
	waitReleased(t, cl, "job")

	_, err = fencing.Acquire(stalled{ctx, time.Now().Add(stall)}, "job", ttl)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.True(t, qe.Expired)
	assert.Equal(t, len(cl.Masters), qe.Agreed, "every master agreed within MasterTimeout")
	assert.Greater(t, qe.Elapsed, ttl/4)
	assert.Contains(t, err.Error(), "more than a quarter of the TTL: too late for a fencing token")
	waitReleased(t, cl, "job")

	l, err = plain.Acquire(stalled{ctx, time.Now().Add(stall)}, "job", ttl)
	require.NoError(t, err, "without fencing, a late round is granted while validity is left")
	require.NoError(t, l.Release(ctx))
}

// stalled is a caller's context whose goroutine stalls until until once
// the round's calls are queued: the decider waits in Done then.
type stalled struct {
	context.Context
	until time.Time
}

func (s stalled) Done() <-chan struct{} {
	time.Sleep(time.Until(s.until))
	return s.Context.Done()
}

// TestRepairNeverShortensACounter: a repair over a free lock keeps its
// counter, and its TTL where that is longer than the validity the repair
// sets: the counter must live as long as the proof of later tokens being
// larger needs.
func TestRepairNeverShortensACounter(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", 4*slack) // fencing's least TTL
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	counter := strconv.FormatUint(l.Token()+100, 10)
	require.NoError(t, cl.Admin(1).Set(ctx, "{job}", "f:"+counter, time.Minute).Err())

	require.NoError(t, l.Extend(ctx, 2*time.Second))
	require.Eventually(t, func() bool { return stored(t, cl, 1, "job").Owner == l.Value() },
		5*time.Second, time.Millisecond, "repaired on master 1")
	assert.Equal(t, counter, stored(t, cl, 1, "job").Token, "the counter is kept")
	pttl, err := cl.Admin(1).PTTL(ctx, "{job}").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 50*time.Second, "the counter's TTL is kept, not cut to the 2s of validity")
	require.NoError(t, l.Release(ctx))
}
