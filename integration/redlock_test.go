package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/mutex"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, toxiproxyLeaks...) }

// toxiproxyLeaks ignores goroutines that toxiproxy v2.5.0 leaks (not ours):
// when a toxic is removed while a connection closes, the noop toxic it
// starts blocks for ever sending to the closed link's output, and the
// link's reader blocks behind it, sending to a stub nobody drains.
var toxiproxyLeaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
	goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/stream.(*ChanWriter).Write"),
}

// newClient returns a redlock client on the cluster's masters, closed (after
// its background calls end) when the test ends. Without options its
// MasterTimeout is 200ms: CI runs test binaries side by side on two cores.
func newClient(t *testing.T, cl *integration.Cluster, opts *redlock.Options) *redlock.Client {
	t.Helper()
	if opts == nil {
		opts = &redlock.Options{MasterTimeout: 200 * time.Millisecond}
	}
	c, err := redlock.New(cl.Clients(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// values returns the owner of the lock named key on every master ("" where
// absent or down).
func values(t *testing.T, cl *integration.Cluster, key string) []string {
	t.Helper()
	out := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		if m.Running() {
			out[i] = stored(t, cl, i, key).Owner
		}
	}
	return out
}

// stored returns what master i stores of the holder of the lock named key
// (zero if there is none).
func stored(t *testing.T, cl *integration.Cluster, i int, key string) link.Holder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := cl.Admin(i).Get(ctx, "{"+key+"}").Result()
	if errors.Is(err, redis.Nil) {
		return link.Holder{}
	}
	require.NoError(t, err, "master %s", cl.Masters[i].Name())
	if isFree(v) {
		return link.Holder{}
	}
	h, ok := link.ParseHolder(v)
	require.True(t, ok, "master %s: not a lock value: %q", cl.Masters[i].Name(), v)
	return h
}

// store sets what master i stores of the holder of the lock named key,
// keeping its TTL.
func store(t *testing.T, cl *integration.Cluster, i int, key string, h link.Holder) {
	t.Helper()
	require.NoError(t, cl.Admin(i).SetArgs(context.Background(), "{"+key+"}", link.FormatHolder(h), redis.SetArgs{KeepTTL: true}).Err())
}

// waitHeldEverywhere waits until every master holds l: the calls that came
// after the quorum was decided go on in the background.
func waitHeldEverywhere(t *testing.T, cl *integration.Cluster, l *redlock.Lock) {
	t.Helper()
	want := repeat(l.Value(), len(cl.Masters))
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, values(t, cl, l.Key())) },
		5*time.Second, time.Millisecond, "every master holds our value")
}

func repeat(v string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// isFree reports whether v is the value a released lock leaves: its fencing
// counter (see scripts.lua).
func isFree(v string) bool {
	c, ok := strings.CutPrefix(v, "f:")
	return ok && c != "" && strings.Trim(c, "0123456789") == ""
}

// assertEmpty checks that no running master holds any key but fencing
// counters (released locks) and the markers of releases that found nothing
// (see scripts.lua), both of which must expire.
func assertEmpty(t *testing.T, cl *integration.Cluster) {
	t.Helper()
	for i, m := range cl.Masters {
		if m.Running() {
			assert.Empty(t, leftover(t, cl, i), "keys left on %s", m.Name())
		}
	}
}

// waitEmpty waits until assertEmpty would pass: a call that returned at a
// quorum may still be on its way to the other masters.
func waitEmpty(t *testing.T, cl *integration.Cluster) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		empty := true
		for i, m := range cl.Masters {
			empty = empty && (!m.Running() || len(leftover(t, cl, i)) == 0)
		}
		if empty {
			return
		}
	}
	assertEmpty(t, cl)
}

// leftover returns master i's keys that are neither fencing counters nor
// markers, and checks that those two kinds expire.
func leftover(t *testing.T, cl *integration.Cluster, i int) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := cl.Admin(i).Keys(ctx, "*").Result()
	require.NoError(t, err)
	var left []string
	for _, k := range keys {
		v, _ := cl.Admin(i).Get(ctx, k).Result() // "" for a key of another type
		switch {
		case isFree(v), strings.Contains(k, ":gone:"):
			ttl, err := cl.Admin(i).PTTL(ctx, k).Result()
			require.NoError(t, err)
			assert.True(t, ttl == -2 || ttl > 0, "%s on %s never expires", k, cl.Masters[i].Name())
		default:
			left = append(left, k)
		}
	}
	return left
}

// holdAs makes owner hold the lock named key on master i, as another client would.
func holdAs(t *testing.T, cl *integration.Cluster, i int, key, owner string) {
	t.Helper()
	ctx := context.Background()
	v := link.FormatHolder(link.Holder{Owner: owner, Nonce: "other-nonce", Holds: 1, Token: "1"})
	require.NoError(t, cl.Admin(i).Set(ctx, "{"+key+"}", v, time.Minute).Err())
}

func TestAcquireReleaseOnAllFive(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()

	l, err := c.Acquire(ctx, "job", 5*time.Second)
	require.NoError(t, err)
	assert.True(t, l.Held())
	waitHeldEverywhere(t, cl, l)

	_, err = c.Acquire(ctx, "job", 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "held")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestTwoDeadMastersStillAcquire(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	for _, m := range cl.Masters[:2] {
		require.NoError(t, m.Kill(ctx))
	}
	l, err := c.Acquire(ctx, "job", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	require.NoError(t, l.Release(ctx))
}

func TestThreeDeadMastersFailAndLeaveNothing(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	var dead []string
	for _, m := range cl.Masters[1:4] {
		require.NoError(t, m.Kill(ctx))
		dead = append(dead, m.Addr())
	}
	_, err := c.Acquire(ctx, "job", 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "acquire", qe.Op)
	assert.Equal(t, 3, qe.Quorum)
	// The dead masters fail at once, so the round may be decided before
	// the survivors answer: an agreement that comes after the decision is
	// undone and does not count (ErrNoReply).
	assert.LessOrEqual(t, qe.Agreed, 2, "at most the survivors agreed")
	var failed []string
	for _, m := range qe.Failed() {
		require.Error(t, m.Err, "a master that did not agree has an error")
		if !errors.Is(m.Err, redlock.ErrNoReply) {
			failed = append(failed, m.Master)
		}
	}
	assert.Equal(t, dead, failed, "the error names the three dead masters")
	for _, addr := range dead {
		assert.Contains(t, err.Error(), addr)
	}
	// A late agreement is undone in the background; Close waits for it.
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestPausedMasterDoesNotHoldAcquireBack(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	require.NoError(t, cl.Masters[0].Pause(ctx))
	t.Cleanup(func() { _ = cl.Masters[0].Resume(ctx) })

	// Clients that would wait 10s for a reply: only redlock's MasterTimeout
	// can keep the acquire short.
	slow := make([]*redis.Client, len(cl.Masters))
	for i, m := range cl.Masters {
		slow[i] = redis.NewClient(&redis.Options{Addr: m.Addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
		t.Cleanup(func() { slow[i].Close() })
	}
	const masterTimeout = 300 * time.Millisecond
	c, err := redlock.New(slow, &redlock.Options{MasterTimeout: masterTimeout})
	require.NoError(t, err)

	start := time.Now()
	l, err := c.Acquire(ctx, "job", 5*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), masterTimeout, "four masters answered: no wait for the paused one")
	require.NoError(t, l.Release(ctx))

	for _, m := range cl.Masters[1:3] {
		require.NoError(t, m.Pause(ctx))
	}
	start = time.Now()
	_, err = c.Acquire(ctx, "job", 5*time.Second)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrMasterTimeout)
	assert.GreaterOrEqual(t, took, masterTimeout)
	assert.Less(t, took, 3*masterTimeout, "bounded by MasterTimeout, not the 10s read timeout")

	for _, m := range cl.Masters[:3] {
		require.NoError(t, m.Resume(ctx))
	}
	require.NoError(t, c.Close()) // the late replies are in: their partial locks were undone
	assertEmpty(t, cl)
}

func TestCancelledAcquireLeavesNoKey(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	for _, m := range cl.Masters[:3] {
		require.NoError(t, m.Pause(ctx))
	}
	c := newClient(t, cl, &redlock.Options{MasterTimeout: 2 * time.Second})
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(actx, "job", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's context error is kept")
	assert.Less(t, time.Since(start), time.Second, "returns when the caller's context ends")

	for _, m := range cl.Masters[:3] {
		require.NoError(t, m.Resume(ctx))
	}
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestExtendAfterValidityFailsAndWritesNothing(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	const ttl = 800 * time.Millisecond // 4*MasterTimeout: fencing's least
	l, err := c.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	before := evalCalls(t, cl)
	time.Sleep(time.Until(l.Until()))
	assert.False(t, l.Held())

	err = l.Extend(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, before, evalCalls(t, cl), "no script ran on any master")
	for i := range cl.Masters {
		pttl, err := cl.Admin(i).PTTL(ctx, "{job}").Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl, "TTL not raised on %s", cl.Masters[i].Name())
	}
}

// TestFailedShorterExtendNeverShortens: an Extend to a shorter TTL fails
// (a majority is paused past MasterTimeout), but its calls go on and land
// once those masters resume. They must not shorten the lock there: it
// stays held, for as long as before, and nobody else gets it.
func TestFailedShorterExtendNeverShortens(t *testing.T) {
	// The paused masters resume right after the decision (200ms), well
	// within the calls' own bound (4 x MasterTimeout = 800ms).
	const short = 2 * time.Second
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	require.NoError(t, c.LoadScripts(ctx)) // a paused master's NOSCRIPT would stop the call
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	until := l.Until()
	calls := evalCalls(t, cl)

	for _, m := range cl.Masters[:3] {
		require.NoError(t, m.Pause(ctx))
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, m := range cl.Masters[:3] {
				assert.NoError(t, m.Resume(context.Background()))
			}
		}
	}
	t.Cleanup(resume)
	err = l.Extend(ctx, short)
	resume()
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "two of five masters agreed")
	require.ErrorIs(t, err, redlock.ErrNoQuorum, "the paused masters may hold it")
	require.NotErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, until, l.Until(), "a failed Extend moved Until")

	// The paused masters run the extend once resumed (bounded: 10s for
	// calls bounded by 800ms).
	require.Eventually(t, func() bool {
		now := evalCalls(t, cl)
		for i := range 3 {
			if now[i] <= calls[i] {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the extend reached the resumed masters")
	for i, d := range pttls(t, cl, "{job}") {
		assert.Greater(t, d, 50*time.Second, "master %d: the lock was shortened", i)
	}
	other := newClient(t, cl, nil)
	_, err = other.Acquire(ctx, "job", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "taken from a holder whose lock was cut short")
	assert.True(t, l.Held())
	require.NoError(t, l.Release(ctx))
}

// evalCalls counts the scripts and functions run on every running master
// so far.
func evalCalls(t *testing.T, cl *integration.Cluster) []int {
	t.Helper()
	out := make([]int, len(cl.Masters))
	for i, m := range cl.Masters {
		if !m.Running() {
			continue
		}
		info, err := cl.Admin(i).Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		out[i] = statCalls(info, "evalsha") + statCalls(info, "eval") + statCalls(info, "fcall")
	}
	return out
}

// statCalls reads the calls of one command from INFO commandstats.
func statCalls(info, cmd string) int {
	_, rest, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

func TestOtherValueCannotExtendOrRelease(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	// As if our keys had expired and another client had taken the lock.
	for i := range cl.Masters {
		holdAs(t, cl, i, "job", "other")
	}
	require.ErrorIs(t, l.Extend(ctx, 20*time.Second), redlock.ErrNotHeld)
	require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)
	assert.Equal(t, repeat("other", 5), values(t, cl, "job"), "the other holder's keys are untouched")
	for i := range cl.Masters {
		pttl, err := cl.Admin(i).PTTL(ctx, "{job}").Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 50*time.Second, "TTL untouched")
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	for range 3 {
		require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)
	}
	// Released even when it had expired on the masters already.
	l, err = c.Acquire(ctx, "job", 800*time.Millisecond) // 4*MasterTimeout: fencing's least
	require.NoError(t, err)
	time.Sleep(900 * time.Millisecond)
	err = l.Release(ctx)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "it was sent: the key had expired on the masters")
	assert.Zero(t, qe.Agreed)
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestFailedAcquireDoesNotBlockItsRetry(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	// Another holder on three masters: our attempt takes the other two.
	for i := range 3 {
		holdAs(t, cl, i, "job", "other")
	}
	_, err := c.Acquire(ctx, "job", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	// Released before Acquire returned where it saw the agreement; a master
	// that agreed after the decision may be released just after.
	want := []string{"other", "other", "other", "", ""}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, values(t, cl, "job")) },
		2*time.Second, time.Millisecond, "partial locks released")
	for i := range 3 {
		require.NoError(t, cl.Admin(i).Del(ctx, "{job}").Err())
	}
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err, "nothing of ours is left to block us")
	require.NoError(t, l.Release(ctx))
}

// TestContendingClientsNeverOverlap runs 8 clients, each with its own
// redlock client, for 200 critical sections each on one key. Inside, a
// detector counts overlaps and a read-modify-write counter loses updates if
// two sections ever overlap.
func TestContendingClientsNeverOverlap(t *testing.T) {
	const clients, sections = 8, 200
	cl := integration.NewCluster(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var inside, overlaps, counter, unlockErrs atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for w := range clients {
		// A generous MasterTimeout: CI runs this beside other test binaries.
		c := newClient(t, cl, &redlock.Options{MasterTimeout: 500 * time.Millisecond})
		m, err := mutex.New(c, "shared", &mutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
		require.NoError(t, err)
		g.Go(func() error {
			for i := range sections {
				if err := m.Lock(gctx); err != nil {
					return fmt.Errorf("client %d, section %d: %w", w, i, err)
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counter.Load()
				time.Sleep(50 * time.Microsecond) // widen the window a second holder would hit
				counter.Store(v + 1)
				inside.Add(-1)
				if err := m.Unlock(gctx); err != nil {
					// Under load a release can miss its quorum: the lock then
					// expires by its TTL. Safety is what the detector checks.
					if !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrNoQuorum) {
						return fmt.Errorf("client %d, section %d: unlock: %w", w, i, err)
					}
					unlockErrs.Add(1)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	t.Logf("%d releases missed their quorum", unlockErrs.Load())
	assert.Zero(t, overlaps.Load(), "overlapping critical sections")
	assert.Equal(t, int64(clients*sections), counter.Load(), "every section counted, no update lost")
}

// TestForeignKeysAreNeverTakenOver: a key under a lock's name that is not
// a lock value of this version (an older release's hash, a string of
// another form) is refused by acquire, read acquire and repair, and left
// as it was; the round fails where such keys make a quorum impossible.
func TestForeignKeysAreNeverTakenOver(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	require.NoError(t, cl.Admin(0).HSet(ctx, "{job}", "owner", "old-version", "holds", 1).Err())
	require.NoError(t, cl.Admin(1).Set(ctx, "{job}", "not a lock", 0).Err())
	require.NoError(t, cl.Admin(2).Set(ctx, "{job}", "1:1:0:abc", 0).Err()) // the form, but no holder in it

	_, err := c.AcquireAs(ctx, "job", "me", time.Minute)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Zero(t, qe.Agreed)
	for _, m := range qe.Masters {
		assert.ErrorIs(t, m.Err, redlock.ErrHeldElsewhere, "refused, not failed: %s", m.Master)
	}
	_, err = c.AcquireRead(ctx, "job", "reader", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorAs(t, err, &qe)
	assert.Zero(t, qe.Agreed)
	for i, m := range qe.Masters[1:] {
		assert.ErrorIs(t, m.Err, redlock.ErrHeldElsewhere, "master %d: a string not in redlock's form is refused", i+1)
	}

	typ, err := cl.Admin(0).Type(ctx, "{job}").Result()
	require.NoError(t, err)
	assert.Equal(t, "hash", typ)
	for i, want := range map[int]string{1: "not a lock", 2: "1:1:0:abc"} {
		v, err := cl.Admin(i).Get(ctx, "{job}").Result()
		require.NoError(t, err)
		assert.Equal(t, want, v, "master %d", i)
	}
	for i := range cl.Masters {
		n, err := cl.Admin(i).Exists(ctx, "{job}:r").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no reader on master %d", i)
	}
}
