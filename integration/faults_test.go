package integration_test

// Network faults (toxiproxy embedded in the test process, between the
// client and each master) and clock faults (libfaketime in the masters).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/integration/nemesis"
	"github.com/go-redlock/redlock/mutex"
)

// proxied puts a proxy in front of every master of cl, stopped when the
// test ends.
func proxied(t *testing.T, cl *integration.Cluster) *nemesis.Proxies {
	t.Helper()
	px, err := nemesis.NewProxies(cl.Addrs())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, px.Close()) })
	return px
}

// proxiedClient returns a redlock client that reaches the masters only
// through px, with its own connections; closed when the test ends. It
// loads the scripts on every reachable master, so that no call needs a
// second round trip for a missing script.
func proxiedClient(t *testing.T, px *nemesis.Proxies, opts *redlock.Options) *redlock.Client {
	t.Helper()
	c, err := redlock.New(px.NewClients(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.LoadScripts(ctx) // best effort: a master may be cut off already
	return c
}

// waitReleased waits until no master holds the lock named key: Release
// returns at the quorum, and the calls to slower masters go on (and
// publish where the lock was waited for).
func waitReleased(t *testing.T, cl *integration.Cluster, key string) {
	t.Helper()
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(repeat("", len(cl.Masters)), values(t, cl, key)) },
		10*time.Second, 5*time.Millisecond, "the release of %s reached every master", key)
}

// slack is a master timeout for tests that check where a lock landed after
// the quorum was reached: the calls that go on in the background must not
// miss it on a loaded machine.
const slack = time.Second

func TestLatencyBelowMasterTimeoutStillAcquires(t *testing.T) {
	const masterTimeout, latency = slack, 100 * time.Millisecond
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: masterTimeout})
	ctx := context.Background()

	for _, i := range []int{0, 1} {
		require.NoError(t, px.Latency(i, latency))
	}
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err, "two slow masters: the other three make the quorum")
	waitHeldEverywhere(t, cl, l) // the slow masters got the lock too, a little later
	require.NoError(t, l.Release(ctx))
	waitReleased(t, cl, "job")

	// With three slow masters the quorum needs one of them: the latency is
	// really there, and still below the master timeout.
	require.NoError(t, px.Latency(2, latency))
	start := time.Now()
	l, err = c.Acquire(ctx, "job", 10*time.Second)
	took := time.Since(start)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, took, latency, "the quorum waited for a slow master")
	require.NoError(t, l.Release(ctx))
}

func TestBlackHoleOnMajorityFailsWithinMasterTimeout(t *testing.T) {
	const masterTimeout = 200 * time.Millisecond
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: masterTimeout})
	ctx := context.Background()

	for i := range 3 {
		require.NoError(t, px.BlackHole(i))
	}
	start := time.Now()
	_, err := c.Acquire(ctx, "job", 10*time.Second)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.GreaterOrEqual(t, took, masterTimeout, "it waited for the black-holed masters up to the master timeout")
	assert.Less(t, took, masterTimeout+time.Second, "and not much longer")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Agreed, "the two reachable masters agreed, then were undone")
	for _, m := range qe.Masters[:3] {
		assert.False(t, m.Agreed)
		var ne net.Error // the client's own deadline may fire first
		assert.True(t, errors.Is(m.Err, redlock.ErrMasterTimeout) || errors.As(m.Err, &ne) && ne.Timeout(),
			"master %s: want a timeout, got %v", m.Master, m.Err)
	}

	require.NoError(t, c.Close()) // every background call has ended
	require.NoError(t, px.HealAll())
	assertEmpty(t, cl) // what was dropped is gone: nothing landed late

	c2 := proxiedClient(t, px, &redlock.Options{MasterTimeout: slack})
	l, err := c2.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err, "healed")
	waitHeldEverywhere(t, cl, l)
	require.NoError(t, l.Release(ctx))
}

// TestLostRepliesBlockOnlyUntilTTL: three masters apply the acquire but
// their replies are lost. The attempt fails, and its undo cannot reach
// them either: go-redis opens a new connection after a timeout, and its
// handshake (HELLO) needs a reply. So the stray keys stay, but only for
// their TTL; the two masters that answered were cleaned up at once.
func TestLostRepliesBlockOnlyUntilTTL(t *testing.T) {
	const masterTimeout, ttl = 200 * time.Millisecond, time.Second
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: masterTimeout})
	ctx := context.Background()

	for i := range 3 {
		require.NoError(t, px.DropReplies(i))
	}
	start := time.Now()
	_, err := c.Acquire(ctx, "job", ttl)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, c.Close())
	require.NoError(t, px.HealAll())

	v := values(t, cl, "job")
	assert.Equal(t, []string{"", ""}, v[3:], "the masters that answered were undone")
	for i := range 3 {
		if v[i] == "" {
			continue // the undo made it after all
		}
		pttl, err := cl.Admin(i).PTTL(ctx, "{job}").Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl, "a stray key on %s lives at most its TTL", cl.Masters[i].Name())
	}

	b := proxiedClient(t, px, &redlock.Options{MasterTimeout: slack})
	l, obtained := acquireUntil(t, b, "job", 10*time.Second, start.Add(ttl+3*time.Second))
	require.NotNil(t, l, "the stray keys must expire with their TTL")
	t.Logf("stray keys on %d masters; the lock was free again %v after the failed attempt", 3-countEmpty(v[:3]), obtained.Sub(start))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, b.Close()) // the release has reached every master
	assertEmpty(t, cl)
}

func countEmpty(v []string) int {
	n := 0
	for _, s := range v {
		if s == "" {
			n++
		}
	}
	return n
}

func TestResetPeerOnOneMasterIsSurvived(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: slack})
	ctx := context.Background()

	require.NoError(t, px.ResetPeer(0))
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	want := append([]string{""}, repeat(l.Value(), 4)...)
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, values(t, cl, "job")) },
		time.Second, 5*time.Millisecond, "the reset master never saw the request")
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, l.Release(ctx))
	waitReleased(t, cl, "job")

	// The resets may have made master 0 silent: acquires skip it until
	// one of them, sent once per MasterTimeout, is answered in time.
	require.NoError(t, px.Heal(0))
	for attempt := 0; ; attempt++ {
		l, err = c.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err)
		everywhere := false // polled: a miss here is not yet a failure
		for poll := 0; poll < 40 && !everywhere; poll++ {
			everywhere = assert.ObjectsAreEqual(repeat(l.Value(), 5), values(t, cl, "job"))
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, l.Release(ctx))
		waitReleased(t, cl, "job")
		if everywhere {
			return // the client reconnected to the healed master
		}
		require.Less(t, attempt, 20, "the healed master never held the lock again")
		time.Sleep(slack / 10)
	}
}

// TestCutMinorityKeepsMutualExclusion runs contending clients while the
// network repeatedly cuts them off from two of the five masters, and
// checks the recorded history: no overlap, no lost update.
func TestCutMinorityKeepsMutualExclusion(t *testing.T) {
	const clients, sections, cuts = 4, 40, 8
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rec := nemesis.NewRecorder()
	res := nemesis.NewResource(rec)
	var lockFails atomic.Int64
	load, lctx := errgroup.WithContext(ctx)
	for w := range clients {
		c := proxiedClient(t, px, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
		m, err := mutex.New(c, "shared", &mutex.Options{TTL: 2 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
		require.NoError(t, err)
		load.Go(func() error {
			for range sections {
				actx, cancel := context.WithTimeout(lctx, 5*time.Second)
				err := m.Lock(actx)
				cancel()
				if err != nil {
					if lctx.Err() != nil {
						return lctx.Err()
					}
					lockFails.Add(1)
					continue
				}
				s := nemesis.Section{Client: w, Enter: rec.Now()}
				v, at, _ := res.Read(nemesis.Fence{})
				s.ReadOK, s.Read, s.ReadAt = true, v, at
				time.Sleep(time.Millisecond)
				at, _ = res.Write(nemesis.Fence{}, v+1)
				s.Committed, s.Written, s.WriteAt = true, v+1, at
				s.Exit = rec.Now()
				rec.Record(s)
				if err := m.Unlock(lctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrNoQuorum) {
					return fmt.Errorf("client %d: unlock: %w", w, err)
				}
			}
			return nil
		})
	}
	var nemesisG errgroup.Group
	stop := make(chan struct{})
	nemesisG.Go(func() error {
		defer func() { _ = px.HealAll() }()
		for n := range cuts {
			for _, i := range []int{n % 5, (n + 2) % 5} {
				if err := px.Cut(i); err != nil {
					return err
				}
			}
			select {
			case <-stop:
				return nil
			case <-time.After(300 * time.Millisecond):
			}
			if err := px.HealAll(); err != nil {
				return err
			}
			select {
			case <-stop:
				return nil
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
	loadErr := load.Wait()
	close(stop)
	require.NoError(t, nemesisG.Wait())
	require.NoError(t, loadErr)

	r := nemesis.Check(rec.Sections(), res.Value())
	t.Logf("%d lock calls failed; %v", lockFails.Load(), r)
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Greater(t, r.Committed, clients*sections/2, "most sections got the lock")

	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: slack})
	l, err := c.Acquire(ctx, "after", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l) // every master is reachable again
	require.NoError(t, l.Release(ctx))
}

// faketimeOrSkip returns the libfaketime environment, skipping the test if
// the library is missing (failing it if REDLOCK_REQUIRE_INTEGRATION=1).
func faketimeOrSkip(t *testing.T) nemesis.Faketime {
	t.Helper()
	ft, err := nemesis.FindFaketime()
	if err != nil {
		if os.Getenv(integration.EnvRequire) == "1" {
			t.Fatalf("%v (%s=1)", err, integration.EnvRequire)
		}
		t.Skip(err)
	}
	return ft
}

// clockAhead returns how far master i's clock is ahead of ours.
func clockAhead(t *testing.T, cl *integration.Cluster, i int) time.Duration {
	t.Helper()
	before := time.Now()
	server, err := cl.Admin(i).Time(context.Background()).Result()
	require.NoError(t, err)
	after := time.Now()
	return server.Sub(before.Add(after.Sub(before) / 2))
}

// acquireUntil retries Acquire every 2ms until it succeeds or deadline
// passes; it returns the lock (nil if none) and when it was obtained.
func acquireUntil(t *testing.T, c *redlock.Client, key string, ttl time.Duration, deadline time.Time) (*redlock.Lock, time.Time) {
	t.Helper()
	for time.Now().Before(deadline) {
		l, err := c.Acquire(context.Background(), key, ttl)
		if err == nil {
			return l, time.Now()
		}
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		time.Sleep(2 * time.Millisecond)
	}
	return nil, time.Time{}
}

// TestClockFastWithinDriftStaysSafe: the clocks of a majority (so of one
// master too) run 0.5% fast, within the 1% drift allowance. Their keys
// expire a little early, but never before the holder's validity ends: a
// second client gets the lock only after that.
func TestClockFastWithinDriftStaysSafe(t *testing.T) {
	ft := faketimeOrSkip(t)
	cl := integration.NewProcessCluster(t, 5, integration.ProcessOptions{EnvFor: func(i int) []string {
		if i < 3 {
			return ft.Rate(1.005)
		}
		return nil
	}})
	a := newClient(t, cl, &redlock.Options{MasterTimeout: 300 * time.Millisecond})
	b := newClient(t, cl, &redlock.Options{MasterTimeout: 300 * time.Millisecond})

	const ttl = 1200 * time.Millisecond // 4*MasterTimeout: the least fencing allows
	la, err := a.Acquire(context.Background(), "job", ttl)
	require.NoError(t, err)
	lb, obtained := acquireUntil(t, b, "job", ttl, la.Until().Add(2*time.Second))
	require.NotNil(t, lb, "b never got the lock")
	assert.True(t, obtained.After(la.Until()), "b got the lock %v before a's validity ended", la.Until().Sub(obtained))
	require.NoError(t, lb.Release(context.Background()))

	ahead := clockAhead(t, cl, 0) - clockAhead(t, cl, 4)
	t.Logf("b got the lock %v after a's validity ended; m0's clock is %v ahead of m4's", obtained.Sub(la.Until()), ahead)
	assert.Greater(t, ahead, 3*time.Millisecond, "libfaketime is not in effect")
}

// TestClockFarTooFastOnMajorityBreaksTheLock shows the violation Redlock's
// clock assumption excludes: on a majority the clock runs twice as fast,
// the keys vanish after half the TTL, and a second client takes the lock
// while the first still holds it by its own validity.
func TestClockFarTooFastOnMajorityBreaksTheLock(t *testing.T) {
	ft := faketimeOrSkip(t)
	cl := integration.NewProcessCluster(t, 5, integration.ProcessOptions{EnvFor: func(i int) []string {
		if i < 3 {
			return ft.Rate(2)
		}
		return nil
	}})
	// 500ms: the longest MasterTimeout fencing allows for a 2s TTL. The
	// rounds take milliseconds; nothing here waits for late calls.
	a := newClient(t, cl, &redlock.Options{MasterTimeout: 500 * time.Millisecond})
	b := newClient(t, cl, &redlock.Options{MasterTimeout: 500 * time.Millisecond})

	const ttl = 2 * time.Second
	start := time.Now()
	la, err := a.Acquire(context.Background(), "job", ttl)
	require.NoError(t, err)
	lb, obtained := acquireUntil(t, b, "job", ttl, la.Until())
	require.NotNil(t, lb, "expected b to get the lock while a holds it: the fast clocks expired a's keys")
	t.Logf("b got the lock %v after a, %v before a's validity ended", obtained.Sub(start), la.Until().Sub(obtained))
	assert.True(t, obtained.Before(la.Until()), "held twice")
	assert.Greater(t, obtained.Sub(start), ttl/2-100*time.Millisecond, "not before the fast clocks ran out half the TTL")
	for i, v := range values(t, cl, "job")[:3] {
		assert.NotEqual(t, la.Value(), v, "a's key expired early on fast master %d", i)
	}
}

// TestClockJumpOnMinorityIsSurvived jumps the clocks of two masters forward
// by more than the TTL while a lock is held on all five: the lock vanishes
// there, but the other three still hold it, so nobody else gets it, and
// the holder's extend sets it there again (quorum repair).
func TestClockJumpOnMinorityIsSurvived(t *testing.T) {
	l, cl, b := lockThenJump(t, 2, false)
	ctx := context.Background()
	_, err := b.Acquire(ctx, "job", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "three masters still hold the lock")
	assert.True(t, l.Held())
	// b's acquire took the two free masters; its undo frees them again in
	// the background (a repair never overwrites another's key).
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual([]string{"", ""}, values(t, cl, "job")[:2]) },
		5*time.Second, time.Millisecond, "b's failed acquire undone")
	require.NoError(t, l.Extend(ctx, 10*time.Second), "a quorum still holds it")
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(repeat(l.Value(), 5), values(t, cl, "job")) },
		5*time.Second, time.Millisecond, "the extend repaired the masters that lost the key")
	require.NoError(t, l.Release(ctx))
}

// TestClockJumpOnMajorityBreaksTheLock is the same jump on three masters:
// the lock is gone from a majority and a second client takes it while the
// first still holds it by its validity.
func TestClockJumpOnMajorityBreaksTheLock(t *testing.T) {
	l, _, b := lockThenJump(t, 3, false)
	lb, err := b.Acquire(context.Background(), "job", 10*time.Second)
	require.NoError(t, err, "the jump freed a majority")
	assert.True(t, l.Held(), "held twice")
	require.NoError(t, lb.Release(context.Background()))
}

// TestClockJumpOnMinorityOfABareQuorumBreaksTheLock: a minority's jump is
// survived only if the holder keeps a quorum elsewhere. Here the lock was
// taken while a previous holder's keys were still on masters 3 and 4 (its
// release had not reached them yet), so on 0, 1 and 2 only: the jump on 0
// and 1 leaves it on one master, and a second client takes it while the
// first still holds it. A jump beyond the drift allowance breaks the clock
// assumption even on a minority.
func TestClockJumpOnMinorityOfABareQuorumBreaksTheLock(t *testing.T) {
	l, _, b := lockThenJump(t, 2, true)
	lb, err := b.Acquire(context.Background(), "job", 10*time.Second)
	require.NoError(t, err, "the jump freed a majority")
	assert.True(t, l.Held(), "held twice")
	require.NoError(t, lb.Release(context.Background()))
}

// lockThenJump starts five masters, the first n of them on a clock file,
// takes a 10s lock (with bare, on masters 0-2 only: another owner holds it
// on 3 and 4 until just after), jumps the clock file 30s forward and waits
// until the lock is gone from those n masters. It returns the lock, the
// cluster and a second client.
func lockThenJump(t *testing.T, n int, bare bool) (*redlock.Lock, *integration.Cluster, *redlock.Client) {
	t.Helper()
	ft := faketimeOrSkip(t)
	clock, err := nemesis.NewClockFile(t.TempDir())
	require.NoError(t, err)
	cl := integration.NewProcessCluster(t, 5, integration.ProcessOptions{EnvFor: func(i int) []string {
		if i < n {
			return ft.Jumpable(clock)
		}
		return nil
	}})
	a := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	b := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	held := 5
	if bare {
		held = 3
		holdAs(t, cl, 3, "job", "previous")
		holdAs(t, cl, 4, "job", "previous")
	}
	l, err := a.Acquire(context.Background(), "job", 10*time.Second)
	require.NoError(t, err)
	want := repeat(l.Value(), held)
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, values(t, cl, "job")[:held]) },
		time.Second, time.Millisecond, "held where it could be")
	if bare { // the previous holder's release arrives
		lose(t, cl, 3, "job")
		lose(t, cl, 4, "job")
	}

	require.NoError(t, clock.Set(30*time.Second))
	require.Eventually(t, func() bool {
		v := values(t, cl, "job")
		for i := range n {
			if v[i] != "" {
				return false
			}
		}
		return true
	}, 2*time.Second, 5*time.Millisecond, "the lock did not expire on the jumped masters")
	ahead := clockAhead(t, cl, 0)
	assert.Greater(t, ahead, 29*time.Second, "m0's clock jumped")
	assert.Equal(t, repeat(l.Value(), held-n), values(t, cl, "job")[n:held], "the others still hold it")
	return l, cl, b
}

// outOfMemory makes every master of cl refuse writes that need memory
// (maxmemory with noeviction) until the test ends or the returned func
// lifts it.
func outOfMemory(t *testing.T, cl *integration.Cluster) (lift func()) {
	t.Helper()
	ctx := context.Background()
	set := func(v string) {
		for i := range cl.Masters {
			require.NoError(t, cl.Admin(i).ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
			require.NoError(t, cl.Admin(i).ConfigSet(ctx, "maxmemory", v).Err())
		}
	}
	set("1")
	var once sync.Once
	lift = func() { once.Do(func() { set("0") }) }
	t.Cleanup(lift)
	return lift
}

// TestReleaseOnMastersOutOfMemory: masters out of memory refuse SET, but
// not GET, DEL nor PEXPIRE. An extend passes. A release deletes a lock that
// keeps no fencing counter; where deleting would lose a counter (a fenced
// lock, or one without fencing over a counter that a fenced client left),
// each master replies its refusal instead, and the release, retried in the
// background, frees the lock once memory is back, counter kept.
func TestReleaseOnMastersOutOfMemory(t *testing.T) {
	for _, tc := range []struct {
		name                string
		fenced, overCounter bool
	}{
		{"no fencing", false, false},
		{"fenced", true, false},
		{"no fencing over a fenced client's counter", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := integration.NewCluster(t, 3)
			ctx := context.Background()
			if tc.overCounter {
				l, err := newClient(t, cl, &redlock.Options{MasterTimeout: slack}).Acquire(ctx, "job", time.Minute)
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
				// The release returns at a quorum: a master behind it would
				// refuse the next acquire, and later its release.
				waitReleased(t, cl, "job")
			}
			c := newClient(t, cl, &redlock.Options{MasterTimeout: slack, NoFencing: !tc.fenced})
			l, err := c.Acquire(ctx, "job", time.Minute)
			require.NoError(t, err)
			lift := outOfMemory(t, cl)
			require.NoError(t, l.Extend(ctx, time.Minute), "an extend passes on a master out of memory")

			err = l.Release(ctx)
			if !tc.fenced && !tc.overCounter {
				require.NoError(t, err)
				// The quorum decided: a slower master may still be deleting it
				// (5s: room for a busy machine).
				for i := range cl.Masters {
					require.Eventually(t, func() bool { return cl.Admin(i).Exists(ctx, "{job}").Val() == 0 },
						5*time.Second, 5*time.Millisecond, "master %d still holds the lock", i)
				}
				return
			}
			require.ErrorIs(t, err, redlock.ErrNoQuorum, "error replies prove nothing: the lock is still there")
			// The third master may not be heard before the decision.
			assert.Regexp(t, ` needed, (3 failed|2 failed, 1 gave no answer); the lock may still be held \(`, err.Error())
			assert.ErrorContains(t, err, "OOM")
			lift()
			for i := range cl.Masters {
				require.Eventually(t, func() bool { return isFree(cl.Admin(i).Get(ctx, "{job}").Val()) },
					10*time.Second, 10*time.Millisecond, "master %d: the release is retried once memory is back, counter kept", i)
			}
		})
	}
}
