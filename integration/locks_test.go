package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rwmutex"
)

var (
	fast   = &mutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond}
	fastRW = &rwmutex.Options{TTL: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond}
)

func TestReentrantLockThreeTimes(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	r, err := mutex.NewReentrant(c, "job", fast)
	require.NoError(t, err)
	oc := newClient(t, cl, nil)
	other, err := mutex.NewReentrant(oc, "job", fast)
	require.NoError(t, err)
	alice, bob := redlock.NewOwner(), redlock.NewOwner()

	for range 3 {
		require.NoError(t, r.Lock(ctx, alice))
	}
	token := r.Current(alice).Token()
	assert.Equal(t, 3, r.Current(alice).Holds())
	bobGot := make(chan error, 1)
	go func() { bobGot <- other.Lock(ctx, bob) }()
	require.ErrorIs(t, r.Unlock(ctx, bob), redlock.ErrNotHeld, "a non-owner cannot unlock")
	for i := range 3 {
		select {
		case err := <-bobGot:
			t.Fatalf("bob locked while alice held %d holds: %v", 3-i, err)
		case <-time.After(50 * time.Millisecond):
		}
		assert.Equal(t, token, r.Current(alice).Token(), "re-entering keeps the token")
		require.NoError(t, r.Unlock(ctx, alice))
	}
	assert.Nil(t, r.Current(alice))
	select {
	case err := <-bobGot:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("bob did not get the lock after alice's third unlock")
	}
	assert.Greater(t, other.Current(bob).Token(), token)
	require.NoError(t, other.Unlock(ctx, bob))
	// Both clients: a release returns at a quorum, and Close waits for the
	// calls to the other masters.
	require.NoError(t, c.Close())
	require.NoError(t, oc.Close())
	assertEmpty(t, cl)
}

// TestReentrantDivergedHoldCounts: masters that missed a reentrant call keep
// a wrong count. The rule (absolute counts, last release deletes) must
// neither drop the lock while the owner holds it nor keep it afterwards.
func TestReentrantDivergedHoldCounts(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	r, err := mutex.NewReentrant(c, "job", fast)
	require.NoError(t, err)
	owner := redlock.NewOwner()
	require.NoError(t, r.Lock(ctx, owner))
	require.NoError(t, r.Lock(ctx, owner))
	waitHeldEverywhere(t, cl, r.Current(owner))
	// Master 0 missed the second lock; master 1 saw a third one that failed elsewhere.
	for i, holds := range map[int]int{0: 1, 1: 3} {
		h := stored(t, cl, i, "job")
		h.Holds = holds
		store(t, cl, i, "job", h)
	}

	require.NoError(t, r.Unlock(ctx, owner))
	assert.Equal(t, repeat(owner, 5), values(t, cl, "job"), "still held on every master, master 0 included")
	// The unlock returned at a quorum; the others get it in the background.
	holds := func() []int {
		out := make([]int, len(cl.Masters))
		for i := range cl.Masters {
			out[i] = stored(t, cl, i, "job").Holds
		}
		return out
	}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual([]int{1, 1, 1, 1, 1}, holds()) },
		5*time.Second, time.Millisecond, "counts converge on every master")
	require.NoError(t, r.Unlock(ctx, owner))
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestReadersShareWritersExclude(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	m, err := rwmutex.New(c, "doc", fastRW)
	require.NoError(t, err)

	readers := make([]string, 8)
	g, gctx := errgroup.WithContext(ctx)
	for i := range readers {
		readers[i] = redlock.NewOwner()
		g.Go(func() error { return m.TryRLock(gctx, readers[i]) })
	}
	require.NoError(t, g.Wait(), "eight readers hold it at once")
	writer := redlock.NewOwner()
	require.ErrorIs(t, m.TryLock(ctx, writer), redlock.ErrNotObtained)
	for _, r := range readers {
		require.NoError(t, m.RUnlock(ctx, r))
	}
	require.NoError(t, m.TryLock(ctx, writer))
	assert.NotZero(t, m.Writer(writer).Token())
	require.ErrorIs(t, m.TryRLock(ctx, readers[0]), redlock.ErrNotObtained, "a writer excludes readers")
	require.ErrorIs(t, m.TryLock(ctx, readers[1]), redlock.ErrNotObtained, "and writers")
	require.NoError(t, m.Unlock(ctx, writer))
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

// TestWriterNotStarvedByReaders runs four readers, staggered, that each
// hold the lock 20ms and come back at once: the lock is never free of
// readers. A writer must still get in, after a bounded number of reader
// turns.
func TestWriterNotStarvedByReaders(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := rwmutex.New(c, "doc", fastRW)
	require.NoError(t, err)

	var turns, inside atomic.Int64
	var writerWaiting atomic.Bool
	var turnsWhileWaiting atomic.Int64
	stop := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	for i := range 4 {
		g.Go(func() error {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			for n := 0; n < 10000; n++ {
				select {
				case <-stop:
					return nil
				default:
				}
				owner := redlock.NewOwner()
				if err := m.RLock(gctx, owner); err != nil {
					return err
				}
				inside.Add(1)
				turns.Add(1)
				if writerWaiting.Load() {
					turnsWhileWaiting.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
				inside.Add(-1)
				if err := m.RUnlock(gctx, owner); err != nil {
					return err
				}
			}
			return errors.New("readers ran out of turns")
		})
	}
	require.Eventually(t, func() bool { return turns.Load() >= 20 }, 10*time.Second, time.Millisecond, "readers stream")
	writer := redlock.NewOwner()
	assert.Positive(t, inside.Load(), "readers hold the lock when the writer comes")
	writerWaiting.Store(true)
	start := time.Now()
	require.NoError(t, m.Lock(ctx, writer))
	writerWaiting.Store(false)
	waited := time.Since(start)
	assert.Zero(t, inside.Load(), "no reader inside with the writer")
	require.NoError(t, m.Unlock(ctx, writer))
	close(stop)
	require.NoError(t, g.Wait())
	t.Logf("writer waited %v; %d reader turns began meanwhile (of %d)", waited, turnsWhileWaiting.Load(), turns.Load())
	assert.LessOrEqual(t, turnsWhileWaiting.Load(), int64(8), "new readers wait for the writer")
}

func TestCrashedReaderExpires(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	// 800ms: 4*newClient's MasterTimeout, the least fencing allows.
	crashed, err := rwmutex.New(newClient(t, cl, nil), "doc", &rwmutex.Options{TTL: 800 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, crashed.RLock(ctx, redlock.NewOwner())) // and never unlocks

	m, err := rwmutex.New(newClient(t, cl, nil), "doc", fastRW)
	require.NoError(t, err)
	writer := redlock.NewOwner()
	require.ErrorIs(t, m.TryLock(ctx, writer), redlock.ErrNotObtained)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, m.Lock(wctx, writer), "the reader's hold expired on its own")
	require.NoError(t, m.Unlock(ctx, writer))
}

// TestExpiredReaderLeavesNothing: a reader that never releases expires
// while another reads. What it left (its entry in K:r and its nonce in
// K:rn, whose TTLs the other reader raised) goes with the next call that
// trims expired readers, so nothing is left once the other releases.
func TestExpiredReaderLeavesNothing(t *testing.T) {
	const short = 300 * time.Millisecond
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	_, err := c.AcquireRead(ctx, "doc", redlock.NewOwner(), short) // never released
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for i := range cl.Masters {
			if n, err := cl.Admin(i).ZCard(ctx, "{doc}:r").Result(); err != nil || n == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the first reader's calls landed everywhere")
	other, err := c.AcquireRead(ctx, "doc", redlock.NewOwner(), time.Minute)
	require.NoError(t, err)
	time.Sleep(short + 100*time.Millisecond) // the first reader's entries expired by then

	require.NoError(t, other.Release(ctx))
	require.Eventually(t, func() bool {
		for i := range cl.Masters {
			if n, err := cl.Admin(i).Exists(ctx, "{doc}:r").Result(); err != nil || n > 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the release reached every master")
	assertEmpty(t, cl)
}

func TestDowngradeAndRefusedUpgrade(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	m, err := rwmutex.New(c, "doc", fastRW)
	require.NoError(t, err)
	owner, other := redlock.NewOwner(), redlock.NewOwner()

	require.NoError(t, m.Lock(ctx, owner))
	require.NoError(t, m.RLock(ctx, owner), "a writer may also read")
	require.NoError(t, m.Unlock(ctx, owner), "downgrade: the read lock stays")
	require.NoError(t, m.TryRLock(ctx, other), "readers share again")
	require.ErrorIs(t, m.TryLock(ctx, redlock.NewOwner()), redlock.ErrNotObtained)

	start := time.Now()
	err = m.Lock(ctx, owner)
	require.ErrorIs(t, err, redlock.ErrUpgrade, "upgrade refused, not waited for")
	assert.Less(t, time.Since(start), time.Second)
	// The masters refuse it too, for a holder this process does not know of.
	_, err = c.AcquireWrite(ctx, "doc", other, time.Second)
	require.ErrorIs(t, err, redlock.ErrUpgrade)
	require.ErrorIs(t, err, redlock.ErrNotObtained)

	require.NoError(t, m.RUnlock(ctx, owner))
	require.NoError(t, m.RUnlock(ctx, other))
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

func TestAutoRenewKeepsLockThroughFiveTTLs(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	const ttl = 800 * time.Millisecond // 4*newClient's MasterTimeout: fencing's least
	m, err := mutex.New(c, "job", &mutex.Options{TTL: ttl, AutoRenew: true})
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	l := m.Current()
	other, err := mutex.New(newClient(t, cl, nil), "job", &mutex.Options{TTL: ttl})
	require.NoError(t, err)

	// A master failing meanwhile is a minority: renewal goes on.
	require.NoError(t, cl.Masters[4].Kill(ctx))
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		require.NoError(t, l.Err(), "still held")
		require.ErrorIs(t, other.TryLock(ctx), redlock.ErrNotObtained)
	}
	require.NoError(t, m.Unlock(ctx))
	require.ErrorIs(t, l.Err(), redlock.ErrReleased)

	// The release's and the other's late calls land within milliseconds;
	// renewals would come every ttl/3. Once no call came for ttl/3, none
	// may come for 2*ttl.
	before := evalCalls(t, cl)
	quiet := false
	for end := time.Now().Add(5 * time.Second); !quiet && time.Now().Before(end); {
		time.Sleep(ttl / 3)
		now := evalCalls(t, cl)
		quiet = slices.Equal(before, now)
		before = now
	}
	require.True(t, quiet, "calls kept coming for 5s after Unlock returned")
	time.Sleep(2 * ttl)
	assert.Equal(t, before, evalCalls(t, cl), "no renewal after Unlock returned")
}

func TestLostSignalWhenQuorumIsGone(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	const ttl = time.Second
	m, err := mutex.New(c, "job", &mutex.Options{TTL: ttl, AutoRenew: true})
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	l := m.Current()
	for _, master := range cl.Masters[:3] {
		require.NoError(t, master.Kill(ctx))
	}
	killed := time.Now()
	select {
	case <-l.Done():
	case <-time.After(5 * ttl):
		t.Fatal("lost-lock signal did not fire")
	}
	fired := time.Now()
	t.Logf("signal %v after the kill; validity ended %v after it", fired.Sub(killed), l.Until().Sub(killed))
	assert.False(t, fired.After(l.Until().Add(20*time.Millisecond)), "fired within the lock's validity")
	require.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	assert.ErrorIs(t, context.Cause(l.Context()), redlock.ErrNotHeld)
	require.ErrorIs(t, m.Unlock(ctx), redlock.ErrNotHeld)
}

// TestWakeOnRelease: a waiter whose fallback timer is far off gets the lock
// promptly after the release, with few commands.
func TestWakeOnRelease(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	holder, err := mutex.New(newClient(t, cl, nil), "job", fast)
	require.NoError(t, err)
	waiter, err := mutex.New(newClient(t, cl, nil), "job", &mutex.Options{MinRetryDelay: 20 * time.Second, MaxRetryDelay: 20 * time.Second})
	require.NoError(t, err)
	require.NoError(t, holder.Lock(ctx))
	waitHeldEverywhere(t, cl, holder.Current()) // the holder's own late calls are in
	before := sum(evalCalls(t, cl))

	got := make(chan time.Time, 1)
	go func() {
		if waiter.Lock(ctx) == nil {
			got <- time.Now()
		}
		close(got)
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is subscribed and idle
	idle := sum(evalCalls(t, cl)) - before
	released := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	at, ok := <-got
	require.True(t, ok, "waiter failed")
	t.Logf("acquired %v after the release; %d scripts ran while waiting", at.Sub(released), idle)
	assert.Less(t, at.Sub(released), 2*time.Second, "woken by the release, not by its 10s+ fallback timer")
	assert.LessOrEqual(t, idle, 2*5, "two attempts on five masters while waiting, no polling")
	require.NoError(t, waiter.Unlock(ctx))
}

// patientClients returns go-redis clients of addrs configured as
// integration.MasterOptions, but with readTimeout, closed when the test
// ends.
func patientClients(t *testing.T, addrs []string, readTimeout time.Duration) []*redis.Client {
	t.Helper()
	var masters []*redis.Client
	for _, addr := range addrs {
		o := integration.MasterOptions(addr)
		o.ReadTimeout = readTimeout
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		masters = append(masters, rc)
	}
	return masters
}

// noPubSub is a master's go-redis client that pipelines but cannot
// subscribe: a Client of such masters hears of no release from them.
type noPubSub struct {
	pipeliner
}

type pipeliner interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// TestWakeInProcess: a last release wakes a waiter of the same Client as
// soon as it is queued, without waiting for a master to publish it. Here
// the masters cannot publish to the client, and the waiter's fallback timer
// is 20s. The waiter's acquire goes out behind the release on each
// master's pipeline, so it is refused nowhere: after the release, the
// masters run it and one acquire, nothing more.
func TestWakeInProcess(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	masters := make([]noPubSub, len(cl.Masters))
	for i, m := range cl.Clients() {
		masters[i] = noPubSub{m}
	}
	c, err := redlock.New(masters, &redlock.Options{MasterTimeout: slack})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	// A call answered NOSCRIPT goes again after the calls behind it.
	require.NoError(t, c.LoadScripts(ctx))
	m, err := rwmutex.New(c, "job", &rwmutex.Options{MinRetryDelay: 20 * time.Second, MaxRetryDelay: 20 * time.Second, WriteWait: time.Minute})
	require.NoError(t, err)
	before := sum(evalCalls(t, cl))
	require.NoError(t, m.RLock(ctx, "reader"))
	require.Eventually(t, func() bool { return sum(evalCalls(t, cl))-before == 5 }, 10*time.Second, time.Millisecond,
		"the read lock reached every master")
	before += 5

	got := make(chan time.Time, 1)
	go func() {
		if m.Lock(ctx, "writer") == nil {
			got <- time.Now()
		}
		close(got)
	}()
	// The writer tries twice before it waits (the client never sees its
	// subscriptions confirmed); its waker exists before the second try.
	require.Eventually(t, func() bool { return sum(evalCalls(t, cl))-before == 2*5 }, 10*time.Second, time.Millisecond,
		"the writer's two attempts reached every master")
	released := time.Now()
	calls := sum(evalCalls(t, cl))
	require.NoError(t, m.RUnlock(ctx, "reader"))
	at, ok := <-got
	require.True(t, ok, "writer failed")
	t.Logf("acquired %v after the release", at.Sub(released))
	assert.Less(t, at.Sub(released), 5*time.Second, "woken by the release, not by its 10-20s fallback timer")
	waitHeldEverywhere(t, cl, m.Writer("writer"))
	assert.Equal(t, 2*5, sum(evalCalls(t, cl))-calls, "the release and one acquire on each master")
	require.NoError(t, m.Unlock(ctx, "writer"))
}

// TestTurnPassesWhenReleaseIsQueued: within a process, the next waiter's
// acquire goes out as soon as the holder's release is queued, and follows
// it to each master: it does not wait for the release's round. Three
// masters answer 1s late, so the release round is decided 1s after it
// starts; the two others run the release and the acquire long before that.
func TestTurnPassesWhenReleaseIsQueued(t *testing.T) {
	const latency = time.Second // the margin: the fast masters' two calls take milliseconds
	took := handOffWithSlowMasters(t, latency, redlock.Options{MasterTimeout: 4 * latency}, 30*time.Second, false)
	assert.Less(t, took, latency, "the waiter's acquire went out before the release's round was decided")
}

// TestTurnPassesAfterReleaseRoundOnSlowMasters: where the lock's acquire
// took more than a quarter of MasterTimeout, an acquire queued behind the
// release, which waits for the release's reply on each master first, could
// miss MasterTimeout: the turn passes only once the release round is
// decided, which needs a slow master.
func TestTurnPassesAfterReleaseRoundOnSlowMasters(t *testing.T) {
	const latency = time.Second
	took := handOffWithSlowMasters(t, latency, redlock.Options{MasterTimeout: 4 * latency}, 30*time.Second, true)
	assert.GreaterOrEqual(t, took, latency, "the waiter's acquire went out after the release's round")
}

// TestTurnPassesAfterReleaseRoundForShortTTL: the same where the acquire
// took under a quarter of MasterTimeout (5s) but more than an eighth of the
// TTL (7s): queued behind the release, the waiter's acquire would be
// decided after about twice the latency, past a quarter of the TTL
// (1.75s). A fenced lock's TTL, at least 4*MasterTimeout, is never that
// short, so the client has no fencing.
func TestTurnPassesAfterReleaseRoundForShortTTL(t *testing.T) {
	const latency = time.Second // the acquire takes it, between TTL/8 (0.875s) and MasterTimeout/4 (1.25s)
	took := handOffWithSlowMasters(t, latency, redlock.Options{MasterTimeout: 5 * latency, NoFencing: true}, 7*latency, true)
	assert.GreaterOrEqual(t, took, latency, "the waiter's acquire went out after the release's round")
}

// handOffWithSlowMasters hands a lock of ttl from one Mutex to another of
// the same client on five masters, three of which answer latency late (from
// before the lock is taken if slowAcquire, else from before its release),
// with the client options copts. It returns how long after the Unlock call
// the two fast masters had run the release and the waiter's acquire, and
// checks that the waiter's acquire was refused nowhere.
func handOffWithSlowMasters(t *testing.T, latency time.Duration, copts redlock.Options, ttl time.Duration, slowAcquire bool) time.Duration {
	t.Helper()
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	c, err := redlock.New(patientClients(t, px.Addrs(), copts.MasterTimeout), &copts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := context.Background()
	require.NoError(t, c.LoadScripts(ctx)) // a call answered NOSCRIPT goes again after the calls behind it
	// Connections dialled before the latency: setting one up takes round trips.
	l, err := c.Acquire(ctx, "warm-up", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	opts := &mutex.Options{TTL: ttl, MinRetryDelay: 20 * time.Second, MaxRetryDelay: 20 * time.Second}
	holder, err := mutex.New(c, "job", opts)
	require.NoError(t, err)
	waiter, err := mutex.New(c, "job", opts)
	require.NoError(t, err)
	slow := func() {
		for i := range 3 {
			require.NoError(t, px.Latency(i, latency))
		}
	}
	if slowAcquire {
		slow()
	}
	require.NoError(t, holder.Lock(ctx))
	waitHeldEverywhere(t, cl, holder.Current())
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }() // waits for its turn: no call
	if !slowAcquire {
		slow()
	}
	before := evalCalls(t, cl)

	unlocked := make(chan error, 1)
	start := time.Now()
	go func() { unlocked <- holder.Unlock(ctx) }()
	require.Eventually(t, func() bool {
		calls := evalCalls(t, cl)
		return calls[3]-before[3] >= 2 && calls[4]-before[4] >= 2
	}, 10*time.Second, time.Millisecond, "the fast masters ran the release and the waiter's acquire")
	took := time.Since(start)
	require.NoError(t, <-unlocked)
	require.NoError(t, <-got)
	waitHeldEverywhere(t, cl, waiter.Current()) // refused nowhere
	assert.Equal(t, 2*5, sum(evalCalls(t, cl))-sum(before), "the release and one acquire on each master")
	require.NoError(t, waiter.Unlock(ctx))
	return took
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// fencedResource accepts a write only with a token at least as large as
// any it has seen.
type fencedResource struct {
	mu       sync.Mutex
	maxToken uint64
	writes   int
	rejected int
}

func (r *fencedResource) write(token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.maxToken {
		r.rejected++
		return false
	}
	r.maxToken = token
	r.writes++
	return true
}

func TestFencingTokensStrictlyIncrease(t *testing.T) {
	const clients, acquisitions = 8, 500
	cl := integration.NewCluster(t, 5)
	// 4000 grants take about 2 minutes with the race detector on a machine
	// loaded 6x over its cores: a fixed bound would be a timing assumption.
	// go test's -timeout guards against a hang instead.
	ctx := t.Context()
	var res fencedResource
	var last, undecided atomic.Uint64
	g, gctx := errgroup.WithContext(ctx)
	for w := range clients {
		c := newClient(t, cl, &redlock.Options{MasterTimeout: 500 * time.Millisecond})
		m, err := mutex.New(c, "fenced", fast)
		require.NoError(t, err)
		g.Go(func() error {
			for i := range acquisitions {
				if err := m.Lock(gctx); err != nil {
					return fmt.Errorf("client %d, acquisition %d: %w", w, i, err)
				}
				token := m.Current().Token()
				if prev := last.Swap(token); token <= prev {
					return fmt.Errorf("token %d after %d", token, prev)
				}
				if !res.write(token) {
					return fmt.Errorf("token %d rejected", token)
				}
				// What this test checks is the tokens, not how fast masters
				// answer. A release that a slow master leaves undecided
				// (ErrNoQuorum) is retried by the library in the background;
				// at worst the lock runs out after its TTL. A lock found
				// expired (ErrNotHeld) is a failure: sections could overlap.
				err := m.Unlock(gctx)
				if errors.Is(err, redlock.ErrNoQuorum) && !errors.Is(err, redlock.ErrNotHeld) {
					undecided.Add(1)
					continue
				}
				if err != nil {
					return fmt.Errorf("client %d, release %d: %w", w, i, err)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	if n := undecided.Load(); n > 0 {
		t.Logf("%d releases left undecided by slow masters", n)
	}
	assert.Equal(t, clients*acquisitions, res.writes)
	assert.Zero(t, res.rejected)
}

// TestAnotherLockOfSameOwnerIsRefused: a second Lock of the owner that
// holds the lock (a retry loop's newer attempt, or a late call of an
// earlier one) is refused like any other: it neither takes the lock over
// nor, by undoing itself, deletes the holder's keys. Once the holder
// releases, the owner's next Lock is a fresh grant with a larger token.
func TestAnotherLockOfSameOwnerIsRefused(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	owner := redlock.NewOwner()
	held, err := c.AcquireAs(ctx, "job", owner, 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, held)

	_, err = c.AcquireAs(ctx, "job", owner, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "another Lock of the same owner")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Zero(t, qe.Agreed)
	waitHeldEverywhere(t, cl, held) // its undo deleted nothing
	require.NoError(t, held.Extend(ctx, 10*time.Second), "the holder still holds it everywhere")

	r, err := c.AcquireRead(ctx, "doc", owner, 10*time.Second)
	require.NoError(t, err)
	_, err = c.AcquireRead(ctx, "doc", owner, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "another read Lock of the same owner")
	require.NoError(t, r.Extend(ctx, 10*time.Second), "the reader still reads everywhere")
	require.NoError(t, r.Release(ctx))

	require.NoError(t, held.Release(ctx))
	fresh, err := c.AcquireAs(ctx, "job", owner, 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, fresh.Token(), held.Token())
	require.NoError(t, fresh.Release(ctx))
	require.NoError(t, c.Close())
	assertEmpty(t, cl)
}

// TestStaleReadEntryIsNoUpgrade: a read entry an RUnlock missed on one
// master does not make the owner's write attempts fail as upgrades.
func TestStaleReadEntryIsNoUpgrade(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	owner, writer := redlock.NewOwner(), redlock.NewOwner()
	far := float64(time.Now().Add(time.Minute).UnixMilli())
	require.NoError(t, cl.Admin(0).ZAdd(ctx, "{doc}:r", redis.Z{Score: far, Member: owner}).Err())

	w, err := c.AcquireWrite(ctx, "doc", writer, 10*time.Second)
	require.NoError(t, err, "four masters without readers are a quorum")
	_, err = c.AcquireWrite(ctx, "doc", owner, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NotErrorIs(t, err, redlock.ErrUpgrade, "held by a writer: worth waiting for")
	require.NoError(t, w.Release(ctx))
	l, err := c.AcquireWrite(ctx, "doc", owner, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestRWMutexValidatesRetryDelayAgainstWriteWait(t *testing.T) {
	cl := integration.NewCluster(t, 1)
	c := newClient(t, cl, nil)
	_, err := rwmutex.New(c, "doc", &rwmutex.Options{MaxRetryDelay: 600 * time.Millisecond})
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, "rwmutex.Options.MaxRetryDelay 600ms: must be less than half of WriteWait (1s)")
}
