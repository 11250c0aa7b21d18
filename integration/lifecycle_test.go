package integration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rwmutex"
)

// wakeBound bounds the wait for a wake-up: a release reaches the waiter in
// milliseconds; the bound only keeps a failing test from hanging.
const wakeBound = 5 * time.Second

// waitSubscribers waits until every master counts n subscribers to the
// channel of the lock named key.
func waitSubscribers(t *testing.T, cl *integration.Cluster, key string, n int64) {
	t.Helper()
	channel := "{" + key + "}"
	var got []int64
	require.Eventually(t, func() bool {
		got = got[:0]
		for i := range cl.Masters {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := cl.Admin(i).PubSubNumSub(ctx, channel).Result()
			cancel()
			if err != nil {
				return false
			}
			got = append(got, m[channel])
		}
		for _, v := range got {
			if v != n {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every master counts %d subscribers to %s", n, channel)
}

// heldEverywhere calls lock until the lock named key is on every master: an
// acquire is decided by a quorum, and on a busy machine a call queued to a
// master that is behind is withdrawn. It unlocks and tries again, up to 20
// times.
func heldEverywhere(t *testing.T, cl *integration.Cluster, key string, lock, unlock func() error) {
	t.Helper()
	for range 20 {
		require.NoError(t, lock())
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if countEmpty(values(t, cl, key)) == 0 { // the calls still on their way arrive within the bound
				return
			}
		}
		require.NoError(t, unlock())
		waitReleased(t, cl, key)
	}
	t.Fatalf("the lock %s never got onto every master in 20 tries", key)
}

// wokeWithin reports whether k is woken within d.
func wokeWithin(k link.Waker, d time.Duration) bool {
	select {
	case <-k.Wake():
		return true
	case <-time.After(d):
		return false
	}
}

// refuse makes another owner's acquire of the lock named key be refused,
// as a waiter's is: the release that follows publishes (see scripts.lua).
func refuse(t *testing.T, c *redlock.Client, key string) {
	t.Helper()
	_, err := c.Acquire(context.Background(), key, 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
}

// hooks is what package redlock lends its other packages: the waker.
var hooks = link.Get[*redlock.Client, *redlock.Lock]()

// TestUncontendedReleasePublishesNothing: a release publishes only where an
// acquire was refused while the lock was held, and then on every master
// that refused one.
func TestUncontendedReleasePublishesNothing(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	k := hooks.NewWaker(c, "job", true, time.Time{})
	defer k.Close()
	waitSubscribers(t, cl, "job", 1)
	sub := cl.Admin(0).Subscribe(ctx, "{job}")
	defer sub.Close()
	_, err := sub.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)

	l, err := c.Acquire(ctx, "job", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	// The release has reached every master by the time the next
	// acquire does: only this one's copies may come. The next lock is on
	// every master, so that the refusals take none.
	heldEverywhere(t, cl, "job",
		func() (err error) { l, err = c.Acquire(ctx, "job", 5*time.Second); return err },
		func() error { return l.Release(ctx) })
	refuse(t, c, "job")
	refuse(t, c, "job")
	// A refusal may land after the round that it was part of returned.
	require.Eventually(t, func() bool {
		for i := range cl.Masters {
			if h := stored(t, cl, i, "job"); !h.Waited || h.Holds != 1 || h.Owner != l.Value() {
				return false
			}
		}
		return true
	}, wakeBound, time.Millisecond, "every master marks the lock waited for")
	require.NoError(t, l.Release(ctx))
	require.True(t, wokeWithin(k, wakeBound), "a release that was waited for wakes")
	rctx, cancel := context.WithTimeout(ctx, wakeBound)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	require.NoError(t, err)
	assert.NotEmpty(t, msg.Payload)
	select {
	case m := <-sub.Channel():
		t.Fatalf("a second message on master 0: %q; the first release published", m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestWakeOnEachReleaseBySameOwner: each release of an owner is a release of
// its own and wakes a waiter, however soon it follows the owner's previous
// one. The copies that the masters publish of one release wake no other
// one-waiter (they may wake the same one again). MasterTimeout is 1.25s,
// so that the releases surely come within one MasterTimeout of each other
// (they take milliseconds). Fencing allows no longer one with fast's 5s TTL.
func TestWakeOnEachReleaseBySameOwner(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: fast.TTL / 4})
	ctx := context.Background()
	reentrant, err := mutex.NewReentrant(c, "job", fast)
	require.NoError(t, err)
	rw, err := rwmutex.New(c, "doc", fastRW)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, key string
		all       bool // readers' waiters are woken by every release
		lock      func(owner string) error
		unlock    func(owner string) error
	}{
		{"reentrant owner", "job", false,
			func(o string) error {
				// On every master, so that refuse takes none: its undo
				// would publish a release of its own.
				heldEverywhere(t, cl, "job", func() error { return reentrant.Lock(ctx, o) }, func() error { return reentrant.Unlock(ctx, o) })
				refuse(t, c, "job") // else the release publishes nothing
				return nil
			},
			func(o string) error { return reentrant.Unlock(ctx, o) }},
		{"reader", "doc", true,
			func(o string) error { return rw.RLock(ctx, o) },
			func(o string) error { return rw.RUnlock(ctx, o) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two waiters: each release wakes both readers, and one
			// waiter of an exclusive lock, in turn.
			k := []link.Waker{hooks.NewWaker(c, tc.key, tc.all, time.Time{}), hooks.NewWaker(c, tc.key, tc.all, time.Time{})}
			defer k[0].Close()
			defer k[1].Close()
			waitSubscribers(t, cl, tc.key, 1)
			owner := redlock.NewOwner()
			for i := range 4 {
				require.NoError(t, tc.lock(owner))
				require.NoError(t, tc.unlock(owner))
				next, other := k[i%2], k[(i+1)%2]
				require.True(t, wokeWithin(next, wakeBound), "release %d of the same owner woke nobody", i+1)
				if tc.all {
					require.True(t, wokeWithin(other, wakeBound), "release %d woke one reader only", i+1)
					time.Sleep(300 * time.Millisecond) // the copies, which may wake them again
				} else {
					// Every master has published its copy once the lock is
					// gone everywhere; none may wake the other waiter. (A
					// late copy of the previous release would.)
					waitReleased(t, cl, tc.key)
					assert.False(t, wokeWithin(other, 300*time.Millisecond), "a copy of release %d woke another waiter", i+1)
				}
				drain(next)
				drain(other)
			}
		})
	}
}

// drain takes a pending wake-up off k, if any.
func drain(k link.Waker) {
	select {
	case <-k.Wake():
	default:
	}
}

// TestWakerCloseTwice: closing a Waker again, even from several goroutines
// at once, changes nothing: the subscription ends after its last Waker is
// closed (plus the 2s linger), and not while another Waker still uses it.
func TestWakerCloseTwice(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	c := newClient(t, cl, nil)
	ctx := context.Background()
	release := func() {
		t.Helper()
		l, err := c.Acquire(ctx, "job", 5*time.Second)
		require.NoError(t, err)
		refuse(t, c, "job")
		require.NoError(t, l.Release(ctx))
	}
	closeMany := func(k link.Waker) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(k.Close)
		}
		wg.Wait()
		k.Close()
	}

	// One Waker closed five times: the subscription ends after the linger.
	k := hooks.NewWaker(c, "job", false, time.Time{})
	waitSubscribers(t, cl, "job", 1)
	closeMany(k)
	waitSubscribers(t, cl, "job", 0)

	// A new Waker subscribes again and is woken.
	k = hooks.NewWaker(c, "job", false, time.Time{})
	waitSubscribers(t, cl, "job", 1)
	release()
	require.True(t, wokeWithin(k, wakeBound), "a new Waker is woken")

	// Closing one of two Wakers twice leaves the other one subscribed. The
	// 3s wait outlasts the 2s linger after which an unused subscription
	// ends; a late timer could only hide the defect, not fail the test.
	other := hooks.NewWaker(c, "job", false, time.Time{})
	closeMany(k)
	time.Sleep(3 * time.Second)
	waitSubscribers(t, cl, "job", 1)
	release()
	require.True(t, wokeWithin(other, wakeBound), "the remaining Waker is still woken")
	closeMany(other)
	waitSubscribers(t, cl, "job", 0)
}

// pttls returns the key's remaining TTL on every master (-2 where absent).
func pttls(t *testing.T, cl *integration.Cluster, key string) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(cl.Masters))
	for i := range cl.Masters {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := cl.Admin(i).PTTL(ctx, key).Result()
		cancel()
		require.NoError(t, err)
		out[i] = d
	}
	return out
}

// TestCloseEndsLiveLocks: Client.Close stops auto-renewal and closes the
// Done of every live lock with ErrClosed; no lock reports itself held after
// it, and nothing the renewal started keeps running.
func TestCloseEndsLiveLocks(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const ttl = 2 * time.Second // renewed about every 0.7s
	// The others must still be valid at Close, however slow the machine.
	const long = time.Minute

	renewed, err := c.Acquire(ctx, "renewed", ttl)
	require.NoError(t, err)
	plain, err := c.Acquire(ctx, "plain", long) // no Done, no renewal
	require.NoError(t, err)
	watched, err := c.Acquire(ctx, "watched", long)
	require.NoError(t, err)
	watchedDone := watched.Done()
	before := goleak.IgnoreCurrent()
	renewed.AutoRenew()
	first := renewed.Until()
	require.Eventually(t, func() bool { return renewed.Until().After(first) }, 10*time.Second, 10*time.Millisecond,
		"auto-renewal extends the lock")

	require.NoError(t, c.Close())
	for _, l := range []*redlock.Lock{renewed, plain, watched} {
		select {
		case <-l.Done():
		default:
			t.Errorf("%v: Done still open after Close", l)
		}
		assert.ErrorIs(t, l.Err(), redlock.ErrClosed, "%v", l)
		assert.ErrorIs(t, context.Cause(l.Context()), redlock.ErrClosed, "%v", l)
		assert.False(t, l.Held(), "%v: Held after Close", l)
		assert.ErrorIs(t, l.Extend(ctx, ttl), redlock.ErrClosed, "%v", l)
		assert.ErrorIs(t, l.Reenter(ctx), redlock.ErrClosed, "%v", l)
		assert.ErrorIs(t, l.Release(ctx), redlock.ErrClosed, "%v", l)
		assert.ErrorIs(t, l.Err(), redlock.ErrClosed, "%v: after the Release", l)
	}
	select {
	case <-watchedDone:
	default:
		t.Error("the Done taken before Close is still open")
	}
	renewed.AutoRenew() // starts nothing on a closed client
	goleak.VerifyNone(t, before)

	// No renewal reaches the masters after Close: the TTL only goes down
	// until the key expires (within its TTL; 5s more for a busy machine).
	last := pttls(t, cl, "{renewed}")
	for deadline := time.Now().Add(ttl + 5*time.Second); ; {
		now := pttls(t, cl, "{renewed}")
		gone := true
		for i := range now {
			require.LessOrEqual(t, now[i], last[i], "master %d: the renewed lock's TTL went up after Close", i)
			gone = gone && now[i] == -2 // PTTL of a missing key
		}
		if gone {
			break
		}
		require.True(t, time.Now().Before(deadline), "the renewed lock did not expire after Close: TTLs %v", now)
		last = now
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostLockNotHeld: once Done is closed because renewal failed, Held
// reports false at once, not until the validity runs out; and a renewal
// that every master refuses loses the lock at once.
func TestLostLockNotHeld(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	// MasterTimeout 1s, TTL 4s: the first renewal, after a third of the
	// TTL, finds the key gone on every master, which then cannot make a
	// quorum: the lock is lost with about 2.6s of validity left (retrying
	// until a retry could not end within the validity lost it with 1.7s
	// left). Held must then be false although Until is still ahead.
	c := newClient(t, cl, &redlock.Options{MasterTimeout: time.Second})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", 4*time.Second)
	require.NoError(t, err)
	l.AutoRenew()
	waitHeldEverywhere(t, cl, l)
	for i := range cl.Masters {
		require.NoError(t, cl.Admin(i).Del(ctx, "{job}").Err())
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lost lock's Done is still open")
	}
	ahead := time.Until(l.Until())
	assert.False(t, l.Held(), "Held once Done is closed (Until %v ahead)", ahead)
	// Unless this goroutine was descheduled for 0.6s, the margin, Until is
	// still 2s ahead, so Held's false comes from the loss, not the clock.
	assert.Greater(t, ahead, 2*time.Second, "lost at the first renewal that every master refused")
	require.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Extend(ctx, 4*time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Err(), redlock.ErrNotHeld, "Err keeps the reason the lock was lost")
}

// TestSettledWaiterDoesNotTryTwice: a Mutex.Lock that finds the lock held
// tries again at once only when its client did not watch the lock's
// releases yet; once it does, one refused attempt is all before the
// release wakes it. The fallback timer (2.5s at the earliest) is far from
// the 300ms the test waits for a second attempt, so only an immediate one
// can be counted. Each holder is a client of its own, closed after its
// release: Close waits until every master has the release, so that no copy
// of it comes during the next wait (such a copy rightly wakes the waiter);
// the same for the waiter's own release.
func TestSettledWaiterDoesNotTryTwice(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	rounds := &integration.AcquireRounds{}
	c := newClient(t, cl, &redlock.Options{MasterTimeout: 200 * time.Millisecond, Observer: rounds})
	slow := &mutex.Options{TTL: 10 * time.Second, MinRetryDelay: 5 * time.Second, MaxRetryDelay: 5 * time.Second}
	w, err := mutex.New(c, "job", slow)
	require.NoError(t, err)
	ctx := context.Background()

	for i, wantRefused := range []int64{2, 1} { // the first wait starts the watch
		holder, err := redlock.New(cl.Clients(), &redlock.Options{MasterTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		h, err := mutex.New(holder, "job", slow)
		require.NoError(t, err)
		// On every master, so that the waiter's attempt takes none (its
		// undo would publish where the holder's call came later).
		heldEverywhere(t, cl, "job", func() error { return h.Lock(ctx) }, func() error { return h.Unlock(ctx) })
		rounds.N.Store(0)
		got := make(chan error, 1)
		go func() { got <- w.Lock(ctx) }()
		require.Eventually(t, func() bool { return rounds.N.Load() >= wantRefused }, 5*time.Second, time.Millisecond)
		time.Sleep(300 * time.Millisecond) // room for a second attempt that should not come
		assert.Equal(t, wantRefused, rounds.N.Load(), "wait %d: refused attempts before the release", i)
		require.NoError(t, h.Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(2 * time.Second):
			t.Fatalf("wait %d: the release did not wake the waiter before its fallback timer", i)
		}
		require.NoError(t, holder.Close())
		require.NoError(t, w.Unlock(ctx))
		// And this release on every master before the next holder comes:
		// one that a master refused meanwhile would publish.
		waitReleased(t, cl, "job")
	}
}
