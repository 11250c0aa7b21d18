package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/semaphore"
)

// TestMain starts the examples' masters as local redis-server processes.
func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

const masterTimeout = 100 * time.Millisecond

// own starts five masters for a test, and n clients on them.
func own(t *testing.T, n int) (*harness.Cluster, []*redlock.Client) {
	t.Helper()
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	clients := make([]*redlock.Client, n)
	for k := range clients {
		clients[k] = newClient(t, c)
	}
	return c, clients
}

func newClient(t *testing.T, c *harness.Cluster) *redlock.Client {
	t.Helper()
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: masterTimeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close() // a test may have closed it: its "crash"
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

func newSemaphore(t *testing.T, c *redlock.Client, name string, opts *semaphore.Options) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(c, name, opts)
	require.NoError(t, err)
	return s
}

// leftKeys returns the keys on each running master, sorted.
func leftKeys(t *testing.T, c *harness.Cluster) [][]string {
	t.Helper()
	var all [][]string
	for i, m := range c.Masters {
		if !m.Running() {
			all = append(all, nil)
			continue
		}
		keys, err := c.Admin(i).Keys(t.Context(), "*").Result()
		require.NoError(t, err)
		slices.Sort(keys)
		all = append(all, keys)
	}
	return all
}

// Eight goroutines over three clients take permits of capacity 3 in a
// loop. Inside each held section an atomic count of holders never passes
// 3. A permit acquired after another's Acquire returned has a larger
// token. Afterwards only the fencing counter is left on the masters.
func TestNeverMoreThanCapacity(t *testing.T) {
	c, clients := own(t, 3)
	const capacity, goroutines, rounds = 3, 8, 12
	type held struct {
		start, end time.Time // of the Acquire call
		token      uint64
	}
	var (
		holders, most atomic.Int32
		mu            sync.Mutex
		log           []held
		wg            sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for g := range goroutines {
		s := newSemaphore(t, clients[g%len(clients)], "pool", &semaphore.Options{TTL: 2 * time.Second})
		wg.Go(func() {
			for range rounds {
				start := time.Now()
				l, err := s.Acquire(ctx, capacity)
				if !assert.NoError(t, err) {
					return
				}
				end := time.Now()
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				assert.LessOrEqual(t, n, int32(capacity), "holders at once")
				assert.True(t, l.Held())
				time.Sleep(20 * time.Millisecond)
				holders.Add(-1)
				mu.Lock()
				log = append(log, held{start, end, l.Token()})
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, log, goroutines*rounds)
	assert.Equal(t, int32(capacity), most.Load(), "8 goroutines must have filled the 3 permits at some point")
	for _, a := range log {
		for _, b := range log {
			if a.end.Before(b.start) {
				require.Less(t, a.token, b.token, "a permit acquired after another's Acquire returned")
			}
		}
	}
	assertOnlyExpiring(t, c, clients, "{pool}", 2*time.Second)
}

// assertOnlyExpiring asserts that the masters keep nothing of the
// semaphore whose main key is k but its fencing counter and release
// markers (of permits a master had refused), each expiring within ttl.
// It first closes the clients: a release returns at a quorum, and Close
// waits for its calls to the other masters.
func assertOnlyExpiring(t *testing.T, c *harness.Cluster, clients []*redlock.Client, k string, ttl time.Duration) {
	t.Helper()
	for _, client := range clients {
		require.NoError(t, client.Close())
	}
	for i, keys := range leftKeys(t, c) {
		for _, key := range keys {
			assert.True(t, key == k+":s:t" || strings.HasPrefix(key, k+":s:gone:"), "master %d keeps %s", i, key)
			left, err := c.Admin(i).PTTL(t.Context(), key).Result()
			require.NoError(t, err)
			assert.True(t, left > 0 && left <= ttl, "master %d: %s expires in %v", i, key, left)
		}
	}
}

// A holder whose client closes without release (its renewal stops with
// it) frees its permit once the permit's TTL runs out.
func TestCrashedHolderFreesItsPermitAfterTTL(t *testing.T) {
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	crashing, other := newClient(t, c), newClient(t, c)
	const ttl = time.Second
	s := newSemaphore(t, crashing, "crash", &semaphore.Options{TTL: ttl, AutoRenew: true})
	l, err := s.TryAcquire(t.Context(), 1)
	require.NoError(t, err)
	time.Sleep(ttl) // renewed meanwhile: still held
	require.True(t, l.Held())
	crashed, until := time.Now(), l.Until() // held on a quorum until then at least
	require.NoError(t, crashing.Close())    // leaves its permits to expire

	s2 := newSemaphore(t, other, "crash", &semaphore.Options{TTL: ttl})
	_, err = s2.TryAcquire(t.Context(), 1)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "the crashed holder's permit is live until its TTL")
	ctx, cancel := context.WithTimeout(t.Context(), 10*ttl)
	defer cancel()
	l2, err := s2.Acquire(ctx, 1)
	require.NoError(t, err)
	// The last renewal set at most ttl, and the permit held until Until.
	assert.False(t, time.Now().Before(until), "freed before the crashed holder's validity ran out")
	assert.Less(t, time.Since(crashed), ttl+5*time.Second, "freed after the TTL, with a margin for a busy machine")
	assert.NoError(t, l2.Release(t.Context()))
}

// A fourth waiter is woken by a release, well before its fallback timer.
// The timer's first delay is at least 5s (half of MinRetryDelay), after
// the waiter's last attempt. The waiter must get the permit within 2s of
// the release: a round takes milliseconds.
func TestReleaseWakesWaiter(t *testing.T) {
	_, clients := own(t, 2)
	const poll = 10 * time.Second
	opts := &semaphore.Options{TTL: 5 * time.Second, MinRetryDelay: poll, MaxRetryDelay: poll}
	holder := newSemaphore(t, clients[0], "wake", opts)
	var held []*redlock.Lock
	for range 3 {
		l, err := holder.TryAcquire(t.Context(), 3)
		require.NoError(t, err)
		held = append(held, l)
	}
	waiter := newSemaphore(t, clients[1], "wake", opts)
	type result struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*poll)
	defer cancel()
	go func() {
		l, err := waiter.Acquire(ctx, 3)
		got <- result{l, err, time.Now()}
	}()
	time.Sleep(time.Second) // the waiter subscribes, is refused, and waits
	select {
	case r := <-got:
		t.Fatalf("the waiter got a 4th permit: %v, %v", r.l, r.err)
	default:
	}
	released := time.Now()
	require.NoError(t, held[0].Release(t.Context()))
	r := <-got
	require.NoError(t, r.err)
	assert.Less(t, r.at.Sub(released), 2*time.Second, "woken by the release, not by its %v fallback timer", poll)
	for _, l := range append(held[1:], r.l) {
		assert.NoError(t, l.Release(t.Context()))
	}
}

// With two of five masters down, permits are still admitted, counted
// and released.
func TestMinorityDown(t *testing.T) {
	c, clients := own(t, 1)
	for _, i := range []int{1, 3} {
		require.NoError(t, c.Masters[i].Kill(t.Context()))
	}
	s := newSemaphore(t, clients[0], "minority", &semaphore.Options{TTL: 2 * time.Second})
	a, err := s.TryAcquire(t.Context(), 2)
	require.NoError(t, err)
	b, err := s.TryAcquire(t.Context(), 2)
	require.NoError(t, err)
	assert.Less(t, a.Token(), b.Token())
	_, err = s.TryAcquire(t.Context(), 2)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, a.Release(t.Context()))
	cnt, err := s.TryAcquire(t.Context(), 2)
	require.NoError(t, err)
	require.NoError(t, b.Release(t.Context()))
	require.NoError(t, cnt.Release(t.Context()))
	assertOnlyExpiring(t, c, clients, "{minority}", 2*time.Second)
}

// A lower capacity never evicts holders: new permits wait until fewer
// than it are held. A permit is never re-entered.
func TestLoweredCapacityEvictsNobody(t *testing.T) {
	_, clients := own(t, 1)
	s := newSemaphore(t, clients[0], "lower", &semaphore.Options{TTL: 2 * time.Second})
	var held []*redlock.Lock
	for range 3 {
		l, err := s.TryAcquire(t.Context(), 3)
		require.NoError(t, err)
		held = append(held, l)
	}
	_, err := s.TryAcquire(t.Context(), 2)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	for _, l := range held {
		require.NoError(t, l.Extend(t.Context(), 2*time.Second), "a holder keeps its permit")
	}
	require.ErrorIs(t, held[0].Reenter(t.Context()), redlock.ErrInvalidArgument)
	require.True(t, held[0].Held())
	require.NoError(t, held[0].Release(t.Context()))
	_, err = s.TryAcquire(t.Context(), 2)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "two held: capacity 2 is full")
	require.NoError(t, held[1].Release(t.Context()))
	l, err := s.TryAcquire(t.Context(), 2)
	require.NoError(t, err)
	for _, l := range []*redlock.Lock{held[2], l} {
		require.NoError(t, l.Release(t.Context()))
	}
}

// Bad input is refused before any I/O, with an error wrapping
// redlock.ErrInvalidArgument, and leaves nothing on the masters.
func TestBadInput(t *testing.T) {
	c, clients := own(t, 1)
	client := clients[0]
	_, err := semaphore.New(nil, "x", nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = semaphore.New(client, "", nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = semaphore.New(client, "x", &semaphore.Options{TTL: masterTimeout / 2})
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "a TTL below the master timeout")
	_, err = semaphore.New(client, "x", &semaphore.Options{MinRetryDelay: time.Second, MaxRetryDelay: time.Millisecond})
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)

	s := newSemaphore(t, client, "bad", nil)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for name, call := range map[string]func(context.Context, int) (*redlock.Lock, error){"Acquire": s.Acquire, "TryAcquire": s.TryAcquire} {
		for _, capacity := range []int{0, -1} {
			_, err := call(t.Context(), capacity)
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "%s, capacity %d", name, capacity)
		}
		_, err := call(nil, 1) //nolint:staticcheck // a nil context is the bad input
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		_, err = call(cancelled, 1)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		assert.ErrorIs(t, err, context.Canceled, name)
	}
	var zero semaphore.Semaphore
	_, err = zero.TryAcquire(t.Context(), 1)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	for i, keys := range leftKeys(t, c) {
		assert.Empty(t, keys, "master %d", i)
	}
}

// A permit is a Lock: AutoRenew keeps it past its TTL, its Done closes
// and Err says why when it is lost, and a release of a lost permit
// reports ErrNotHeld.
func TestPermitIsALock(t *testing.T) {
	c, clients := own(t, 1)
	const ttl = 500 * time.Millisecond
	s := newSemaphore(t, clients[0], "lease", &semaphore.Options{TTL: ttl, AutoRenew: true})
	// Three permits, renewed in one batch per master.
	var permits []*redlock.Lock
	for range 3 {
		l, err := s.Acquire(t.Context(), 3)
		require.NoError(t, err)
		permits = append(permits, l)
	}
	time.Sleep(3 * ttl)
	for _, l := range permits {
		require.True(t, l.Held(), "renewed in the background")
	}
	l := permits[0]
	for _, p := range permits[1:] {
		require.NoError(t, p.Release(t.Context()))
	}
	for i := range c.Masters { // every master loses it: as if restarted empty
		require.NoError(t, c.Admin(i).Del(t.Context(), "{lease}:s").Err())
	}
	select {
	case <-l.Done():
	case <-time.After(10 * ttl):
		t.Fatal("the lost permit's Done did not close")
	}
	assert.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	err := l.Release(t.Context())
	assert.True(t, errors.Is(err, redlock.ErrNotHeld) || strings.Contains(fmt.Sprint(err), "lost"), "%v", err)
}

// An attempt that reaches no quorum tries no other slot: every slot
// would fail the same way. TryAcquire is one round, even for a capacity
// of a million (a round per slot takes hours with three masters down).
func TestNoQuorumTriesOneSlot(t *testing.T) {
	c, clients := own(t, 1)
	for _, i := range []int{0, 2, 4} {
		require.NoError(t, c.Masters[i].Kill(t.Context()))
	}
	s := newSemaphore(t, clients[0], "noquorum", &semaphore.Options{TTL: 2 * time.Second})
	// The bound is far above one round (a refused dial, or MasterTimeout).
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := s.TryAcquire(ctx, 1_000_000)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "TryAcquire went on past one round")
}

// With two of five masters down, one refusal decides a round: the other
// two masters cannot make a quorum without it. A try that picks the held
// slot must still follow the free slot that refusal names. Twenty tries
// with one of two permits held each find the free one; before, about
// half picked the held slot and failed.
func TestTryFindsTheFreePermitWithMinorityDown(t *testing.T) {
	c, clients := own(t, 1)
	for _, i := range []int{1, 3} {
		require.NoError(t, c.Masters[i].Kill(t.Context()))
	}
	s := newSemaphore(t, clients[0], "free", &semaphore.Options{TTL: 5 * time.Second})
	held, err := s.TryAcquire(t.Context(), 2)
	require.NoError(t, err)
	for i := range 20 {
		l, err := s.TryAcquire(t.Context(), 2)
		require.NoError(t, err, "try %d: one of two permits is free", i)
		require.NoError(t, l.Release(t.Context()))
	}
	require.NoError(t, held.Release(t.Context()))
	assertOnlyExpiring(t, c, clients, "{free}", 5*time.Second)
}
