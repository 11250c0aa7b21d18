package mutex_test

import (
	"context"
	"errors"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// fairMasterTimeout bounds each master's answer. A race build on a busy
// machine missed 100ms: a Release of TestFairNeverTwoHolders got "no reply
// within the master timeout" from 3 of 5 masters at a load of 15-20.
const fairMasterTimeout = 200 * time.Millisecond

// fairCluster starts five masters and n clients on them.
func fairCluster(t *testing.T, n int) (*harness.Cluster, []*redlock.Client) {
	t.Helper()
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	clients := make([]*redlock.Client, n)
	for k := range clients {
		masters := make([]*redis.Client, len(c.Masters))
		for i, m := range c.Masters {
			masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
		}
		client, err := redlock.New(masters, &redlock.Options{MasterTimeout: fairMasterTimeout})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = client.Close()
			for _, m := range masters {
				_ = m.Close()
			}
		})
		clients[k] = client
	}
	return c, clients
}

func newFair(t *testing.T, c *redlock.Client, name string) *mutex.Fair {
	t.Helper()
	f, err := mutex.NewFair(c, name, &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: time.Second})
	require.NoError(t, err)
	return f
}

// queueKeys returns the keys of fair queues left on the running masters.
func queueKeys(t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	var left []string
	for i, m := range c.Masters {
		if !m.Running() {
			continue
		}
		keys, err := c.Admin(i).Keys(t.Context(), "*:q*").Result()
		require.NoError(t, err)
		left = append(left, keys...)
	}
	return left
}

// assertQueueGone checks that the queue's entries are gone from every
// running master once every waiter left. Its ticket counter outlives
// them by up to a waiter TTL, so it only has to expire.
func assertQueueGone(t *testing.T, c *harness.Cluster) {
	t.Helper()
	entries := func() []string {
		return slices.DeleteFunc(queueKeys(t, c), func(k string) bool { return strings.HasSuffix(k, ":qc") })
	}
	assert.Eventually(t, func() bool { return len(entries()) == 0 }, 3*time.Second, 20*time.Millisecond,
		"queue keys left: %v", entries())
	for i, m := range c.Masters {
		if !m.Running() {
			continue
		}
		keys, err := c.Admin(i).Keys(t.Context(), "*:qc").Result()
		require.NoError(t, err)
		for _, k := range keys {
			left, err := c.Admin(i).PTTL(t.Context(), k).Result()
			require.NoError(t, err)
			assert.NotEqual(t, time.Duration(-1), left, "the counter %s on master %d has no TTL", k, i) // -2: gone meanwhile
		}
	}
}

// Waiters that queued one after another get the lock in that order. It
// fails where the grant ignores the queue: the waiters would race.
func TestFairGrantsInTicketOrder(t *testing.T) {
	c, clients := fairCluster(t, 3)
	testFairOrder(t, c, clients, "order")
}

// A minority of masters down keeps the order: every quorum shares a master
// with the one that queued each waiter. It fails where the ticket is not
// the largest of a quorum (a first reply, say).
func TestFairMinorityDownKeepsOrder(t *testing.T) {
	c, clients := fairCluster(t, 3)
	for _, i := range []int{0, 3} {
		require.NoError(t, c.Masters[i].Kill(t.Context()))
	}
	testFairOrder(t, c, clients, "minority")
}

func testFairOrder(t *testing.T, c *harness.Cluster, clients []*redlock.Client, name string) {
	t.Helper()
	ctx := t.Context()
	holder, err := newFair(t, clients[0], name).Lock(ctx)
	require.NoError(t, err)
	const n = 9
	tickets := make([]*mutex.Ticket, n)
	for i := range tickets {
		tickets[i], err = newFair(t, clients[i%len(clients)], name).Enqueue(ctx)
		require.NoError(t, err)
		if i > 0 {
			require.Less(t, tickets[i-1].Number(), tickets[i].Number(), "a later arrival gets a larger ticket")
		}
	}
	var (
		mu     sync.Mutex
		order  []int
		inside atomic.Int32
		tokens []uint64
		wg     sync.WaitGroup
	)
	for i, tk := range tickets {
		wg.Go(func() {
			l, err := tk.Wait(ctx)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, int32(1), inside.Add(1), "two holders")
			mu.Lock()
			order, tokens = append(order, i), append(tokens, l.Token())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			assert.NoError(t, l.Release(context.Background()))
		})
	}
	time.Sleep(200 * time.Millisecond) // every waiter refused once, waiting
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, order)
	assert.True(t, slices.IsSorted(tokens), "tokens %v", tokens)
	assertQueueGone(t, c)
}

// Contending waiters of several clients never hold the lock together,
// and a plain Mutex of the name is excluded too. It fails where the
// fair acquire grants on the queue alone.
func TestFairNeverTwoHolders(t *testing.T) {
	c, clients := fairCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var inside atomic.Int32
	var wg sync.WaitGroup
	hold := func(release func(context.Context) error) {
		assert.Equal(t, int32(1), inside.Add(1), "two holders")
		time.Sleep(2 * time.Millisecond)
		inside.Add(-1)
		assert.NoError(t, release(context.Background()))
	}
	for k := range 12 {
		wg.Go(func() {
			f := newFair(t, clients[k%3], "never-two")
			for range 5 {
				l, err := f.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				hold(l.Release)
			}
		})
	}
	wg.Go(func() { // a plain Mutex barges in, but never while another holds
		m, err := mutex.New(clients[0], "never-two", &mutex.Options{TTL: 2 * time.Second})
		require.NoError(t, err)
		for range 5 {
			if assert.NoError(t, m.Lock(ctx)) {
				hold(m.Unlock)
			}
		}
	})
	wg.Wait()
	assertQueueGone(t, c)
}

// A waiter that dies holds the next one back for at most its waiter TTL.
// It fails where an expired waiter still blocks the queue.
func TestFairDeadWaiterDelaysNextByItsTTL(t *testing.T) {
	_, clients := fairCluster(t, 2)
	ctx := t.Context()
	f := newFair(t, clients[0], "dead")
	holder, err := f.Lock(ctx)
	require.NoError(t, err)
	dead, err := f.Enqueue(ctx)
	require.NoError(t, err)
	next, err := newFair(t, clients[1], "dead").Enqueue(ctx)
	require.NoError(t, err)
	mutex.Abandon(dead) // renews no more; its entry expires within 1s
	got := make(chan time.Time, 1)
	go func() {
		l, err := next.Wait(ctx)
		if assert.NoError(t, err) {
			got <- time.Now()
			assert.NoError(t, l.Release(context.Background()))
		}
		close(got)
	}()
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	// Bound: the dead waiter's TTL (1s) from its last renewal, which was
	// before the release. Margin: 1s for a busy machine.
	select {
	case at := <-got:
		assert.Less(t, at.Sub(released), 2*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the next waiter never got the lock")
	}
	<-got // its Release, before Cleanup closes the client: closed once done
}

// Cancel leaves the queue at once: the waiter behind is next without
// waiting for the TTL. Position counts live tickets ahead, not the holder.
// It fails where Cancel only stops renewing.
func TestFairCancelAndPosition(t *testing.T) {
	c, clients := fairCluster(t, 1)
	ctx := t.Context()
	f := newFair(t, clients[0], "cancel")
	holder, err := f.Lock(ctx)
	require.NoError(t, err)
	var tks []*mutex.Ticket
	for range 3 {
		tk, err := f.Enqueue(ctx)
		require.NoError(t, err)
		tks = append(tks, tk)
	}
	for i, tk := range tks {
		p, err := tk.Position(ctx)
		require.NoError(t, err)
		assert.Equal(t, i, p)
	}
	tks[0].Cancel()
	p, err := tks[1].Position(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, p, "the cancelled ticket left at once")
	_, err = tks[0].Position(ctx)
	assert.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, holder.Release(ctx))
	l, err := tks[1].Wait(ctx)
	require.NoError(t, err)
	assertNext(t, tks[2])
	require.NoError(t, l.Release(ctx))
	l, err = tks[2].Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	tks[2].Cancel() // after the grant: nothing
	assertQueueGone(t, c)
}

// assertNext checks that tk's Position comes to 0 while the lock is held:
// the holder is not counted. The grant's round was decided on a quorum:
// its calls to other masters may land after the Position round, or never
// (withdrawn), and the holder's entry there expires with its waiter TTL.
// Bound: that TTL (1s); margin 1s.
func assertNext(t *testing.T, tk *mutex.Ticket) {
	t.Helper()
	assert.Eventually(t, func() bool {
		p, err := tk.Position(t.Context())
		return err == nil && p == 0
	}, 2*time.Second, 20*time.Millisecond, "the holder is counted")
}

// Bad input is refused before any I/O, with nothing left on the masters.
func TestFairBadInput(t *testing.T) {
	c, clients := fairCluster(t, 1)
	client := clients[0]
	for name, opts := range map[string]*mutex.FairOptions{
		"waiter TTL below the master timeout": {WaiterTTL: fairMasterTimeout},
		"negative waiter TTL":                 {WaiterTTL: -time.Second},
		"TTL below the master timeout":        {TTL: fairMasterTimeout / 2},
	} {
		_, err := mutex.NewFair(client, "bad", opts)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
	}
	_, err := mutex.NewFair(client, "", nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = mutex.NewFair(nil, "bad", nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	f := newFair(t, client, "bad")
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	//nolint:staticcheck // a nil context on purpose
	for _, ctx := range []context.Context{nil, ended} {
		_, err = f.Lock(ctx)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = f.Enqueue(ctx)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	}
	var zero mutex.Fair
	_, err = zero.Lock(t.Context())
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "zero Fair")
	var zt mutex.Ticket
	_, err = zt.Wait(t.Context())
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = zt.Position(t.Context())
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	zt.Cancel()
	assert.Equal(t, []int{0, 0, 0, 0, 0}, c.KeyCounts(t.Context()))
}

// A waiter whose context ends leaves the queue: Lock cancels its ticket.
func TestFairLockGivesUp(t *testing.T) {
	c, clients := fairCluster(t, 1)
	f := newFair(t, clients[0], "gives-up")
	holder, err := f.Lock(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = f.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, slices.DeleteFunc(queueKeys(t, c), func(k string) bool { return !strings.HasSuffix(k, ":q") }))
	require.NoError(t, holder.Release(t.Context()))
}

// A later ticket is refused while an earlier one is live, even where it
// tries first and the lock is free. It fails where the masters do not
// check the queue: the order would rest on the waiters' discipline.
func TestFairLaterTicketWaitsForEarlier(t *testing.T) {
	c, clients := fairCluster(t, 2)
	first, err := newFair(t, clients[0], "later").Enqueue(t.Context())
	require.NoError(t, err)
	later, err := newFair(t, clients[1], "later").Enqueue(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = later.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	l, err := first.Wait(t.Context())
	require.NoError(t, err)
	assertNext(t, later)
	require.NoError(t, l.Release(t.Context()))
	l, err = later.Wait(t.Context())
	require.NoError(t, err)
	require.NoError(t, l.Release(t.Context()))
	assertQueueGone(t, c)
}

// A grant leaves the holder's entry on a master that refused it; the
// release drops it there, so that it holds the next waiter back no longer.
// With a master down, the refusing master is in every quorum. It fails
// where the release keeps that entry: Position says 1, and the next Wait
// waits for the holder's waiter TTL (5s; 2s margin).
func TestFairReleaseDropsHoldersLeftEntry(t *testing.T) {
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := t.Context()
	fairs := make([]*mutex.Fair, 2)
	for k := range fairs {
		client, err := redlock.New(c.Clients(), &redlock.Options{MasterTimeout: fairMasterTimeout})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		fairs[k], err = mutex.NewFair(client, "left", &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: 5 * time.Second})
		require.NoError(t, err)
	}
	first, err := fairs[0].Enqueue(ctx)
	require.NoError(t, err)
	next, err := fairs[1].Enqueue(ctx)
	require.NoError(t, err)
	// Master 0 refuses the grant: another holder's lock is there.
	require.NoError(t, c.Admin(0).Set(ctx, "{left}", "1:5:0:5:nonceother", time.Minute).Err())
	l, err := first.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Masters[2].Kill(ctx))
	require.NoError(t, c.Admin(0).Del(ctx, "{left}").Err())
	_ = l.Release(ctx) // one master of three agrees: ErrNotHeld
	p, err := next.Position(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, p, "the holder's entry is gone")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err = next.Wait(wctx)
	require.NoError(t, err, "held back by the holder's entry")
	require.NoError(t, l.Release(ctx))
}

// A ticket found lost by a renewal decided after its lease (a waiter
// paused past its waiter TTL) leaves the queue: that renewal queued it
// anew, ahead of the tickets behind it. It fails where a lost ticket's
// Cancel does nothing: the next ticket's Position says 1 for a second.
func TestFairLostTicketLeaves(t *testing.T) {
	_, clients := fairCluster(t, 1)
	ctx := t.Context()
	f := newFair(t, clients[0], "lost")
	lost, err := f.Enqueue(ctx)
	require.NoError(t, err)
	next, err := f.Enqueue(ctx)
	require.NoError(t, err)
	mutex.StopRenewal(lost)
	time.Sleep(1200 * time.Millisecond) // its waiter TTL (1s) ran out; 200ms margin
	_, err = lost.Position(ctx)
	require.ErrorIs(t, err, mutex.ErrTicketLost)
	lost.Cancel() // as Lock does after a lost Wait
	p, err := next.Position(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, p, "the lost ticket left")
	next.Cancel()
}

// awaitRefusedAndSubscribed waits until an acquire was refused on every
// master while the lock of name was held (the holder's value is marked
// waited for, so that its release publishes), and until subs clients
// subscribe to both of the name's channels on every master. Bound: 2s, for
// a try and a dial on a busy machine.
func awaitRefusedAndSubscribed(t *testing.T, c *harness.Cluster, name string, subs int64) {
	t.Helper()
	key := "{" + name + "}"
	waited := regexp.MustCompile(`^\d+:\d+:1:`)
	require.Eventually(t, func() bool {
		for i := range c.Masters {
			v, err := c.Admin(i).Get(t.Context(), key).Result()
			if err != nil || !waited.MatchString(v) {
				return false
			}
		}
		return subscribed(t, c, name, subs)
	}, 2*time.Second, 5*time.Millisecond, "no refused try, or no subscription, on every master")
}

// subscribed reports whether every master has at least subs subscribers
// of the lock's channel and of its queue's.
func subscribed(t *testing.T, c *harness.Cluster, name string, subs int64) bool {
	key := "{" + name + "}"
	for i := range c.Masters {
		n, err := c.Admin(i).PubSubNumSub(t.Context(), key, key+":q").Result()
		if err != nil || n[key] < subs || n[key+":q"] < subs {
			return false
		}
	}
	return true
}

// awaitGrant waits for the lock that got sends, and returns how long after
// since it was granted.
func awaitGrant(t *testing.T, got <-chan time.Time, since time.Time) time.Duration {
	t.Helper()
	select {
	case at, ok := <-got:
		require.True(t, ok, "the waiter failed")
		t.Logf("granted %v after", at.Sub(since))
		<-got // its Release, before Cleanup closes the client: closed once done
		return at.Sub(since)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
	return 0
}

// waitIn runs tk.Wait in the background; the returned channel gets when
// it was granted (the lock is then released), or is closed on failure.
func waitIn(t *testing.T, tk *mutex.Ticket) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		defer close(got)
		l, err := tk.Wait(t.Context())
		if assert.NoError(t, err) {
			got <- time.Now()
			assert.NoError(t, l.Release(context.Background()))
		}
	}()
	return got
}

// A Mutex's release of the name wakes the fair waiter queued behind it: a
// fair lock and a Mutex of one name exclude each other. It fails where
// only fair releases wake fair waiters: the waiter tries at its renewal, a
// third of its waiter TTL (3s) after it queued, about 1s later. Bound: a
// publication and one round; margin to 200ms for a busy machine.
func TestFairWaiterWokenByMutexRelease(t *testing.T) {
	c, clients := fairCluster(t, 2)
	ctx := t.Context()
	m, err := mutex.New(clients[0], "plain", &mutex.Options{TTL: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	f, err := mutex.NewFair(clients[1], "plain", &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: 3 * time.Second})
	require.NoError(t, err)
	tk, err := f.Enqueue(ctx)
	require.NoError(t, err)
	got := waitIn(t, tk)
	awaitRefusedAndSubscribed(t, c, "plain", 1)
	released := time.Now()
	require.NoError(t, m.Unlock(ctx))
	assert.Less(t, awaitGrant(t, got, released), 200*time.Millisecond)
	assertQueueGone(t, c)
}

// A waiter that a master published as next, and that a Mutex then kept
// out, tries at the Mutex's release, though its last renewal found a
// ticket ahead: that ticket left since. Waiter b renews behind a (its
// Position is 1); a Mutex takes the lock, which does not queue; a cancels,
// so b is published as next, tries, and is refused by the Mutex. It fails
// where a release wakes only a waiter whose last renewal found no one
// ahead: b tries at its renewal, a third of its waiter TTL (30s) after it
// queued, about 10s later. Bound: a publication and one round; margin to
// 500ms for a busy machine.
func TestFairNextWaiterWokenByMutexRelease(t *testing.T) {
	c, clients := fairCluster(t, 2)
	ctx := t.Context()
	const name = "nextplain"
	m, err := mutex.New(clients[0], name, &mutex.Options{TTL: 10 * time.Second})
	require.NoError(t, err)
	f, err := mutex.NewFair(clients[1], name, &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: 30 * time.Second})
	require.NoError(t, err)
	a, err := f.Enqueue(ctx)
	require.NoError(t, err)
	b, err := f.Enqueue(ctx)
	require.NoError(t, err)
	p, err := b.Position(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, p)
	require.NoError(t, m.Lock(ctx))
	got := waitIn(t, b)
	require.Eventually(t, func() bool { return subscribed(t, c, name, 1) },
		2*time.Second, 5*time.Millisecond, "b never subscribed on every master")
	a.Cancel()
	awaitRefusedAndSubscribed(t, c, name, 1)
	released := time.Now()
	require.NoError(t, m.Unlock(ctx))
	assert.Less(t, awaitGrant(t, got, released), 500*time.Millisecond)
	assertQueueGone(t, c)
}

// A release published before the waiter's subscriptions are confirmed is
// missed: the waiter tries once more when they are. The waiter's client
// dials nothing from before its first try until after the release, so its
// subscriptions are confirmed only then. It fails where Wait does not try
// again: the waiter tries at its renewal, a third of its waiter TTL (6s)
// after it queued, about 2s later. Bound: a dial and one round; margin to
// 500ms for a busy machine.
func TestFairWaitTriesOnceSubscribed(t *testing.T) {
	c, clients := fairCluster(t, 1)
	ctx := t.Context()
	var hold atomic.Bool
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		opt := harness.MasterOptions(m.Addr())
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if hold.Load() {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		masters[i] = redis.NewClient(opt)
	}
	waiter, err := redlock.New(masters, &redlock.Options{MasterTimeout: fairMasterTimeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		open()
		_ = waiter.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	opts := &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: 6 * time.Second}
	hf, err := mutex.NewFair(clients[0], "unsubscribed", opts)
	require.NoError(t, err)
	holder, err := hf.Lock(ctx)
	require.NoError(t, err)
	f, err := mutex.NewFair(waiter, "unsubscribed", opts)
	require.NoError(t, err)
	tk, err := f.Enqueue(ctx) // dials the connections its tries use
	require.NoError(t, err)
	hold.Store(true)
	got := waitIn(t, tk)
	awaitRefusedAndSubscribed(t, c, "unsubscribed", 0)
	require.NoError(t, holder.Release(ctx))
	time.Sleep(50 * time.Millisecond) // the publications went out, to no one of the waiter's
	at := time.Now()
	open()
	assert.Less(t, awaitGrant(t, got, at), 500*time.Millisecond)
	assertQueueGone(t, c)
}

// A master that restarted empty lost its counter: it must not count
// toward a ticket until every ticket it held has been renewed elsewhere,
// its quarantine. Ticket 1 is queued on m0-m2 alone; m0 and m1 restart
// empty and m2 dies, so that no master that counts holds it. A later
// Enqueue then reaches only m0, m1 (quarantined) and m3, m4. It fails
// where the enqueue counts a master in quarantine: the later waiter gets
// ticket 1 too, and may go first. The first waiter's renewal, which would
// queue it on m0, m1, m3, m4 again, comes 10s after it queued, a third of
// its waiter TTL; the steps take well under a second.
func TestFairRestartedMasterKeepsArrivalOrder(t *testing.T) {
	c, clients := fairCluster(t, 2)
	ctx := t.Context()
	opts := &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: 30 * time.Second}
	for _, i := range []int{3, 4} {
		require.NoError(t, c.Masters[i].Kill(ctx))
	}
	// The later waiter's client learns the servers of m0-m2, so that it
	// sees their restart.
	late, err := mutex.NewFair(clients[1], "restart", opts)
	require.NoError(t, err)
	warm, err := late.Enqueue(ctx)
	require.NoError(t, err)
	warm.Cancel()
	first, err := mutex.NewFair(clients[0], "restart", opts)
	require.NoError(t, err)
	ticket, err := first.Enqueue(ctx)
	require.NoError(t, err)
	defer ticket.Cancel()
	for _, i := range []int{0, 1, 3, 4} {
		require.NoError(t, c.Masters[i].Restart(ctx))
	}
	require.NoError(t, c.Masters[2].Kill(ctx))
	// The first call after a restart may find its connection dead.
	for range 10 {
		later, err := late.Enqueue(ctx)
		if err == nil {
			later.Cancel()
			require.Greater(t, later.Number(), ticket.Number(), "a later arrival got ticket %d, not above the first one's", later.Number())
			return
		}
		if errors.Is(err, redlock.ErrQuarantined) {
			require.ErrorIs(t, err, redlock.ErrNotObtained)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the later Enqueue never reached the restarted masters")
}
