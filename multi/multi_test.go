package multi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/go-redlock/redlock/multi"
	"github.com/go-redlock/redlock/mutex"
)

// TestMain starts the examples' masters as local redis-server processes,
// and fails the run if the tests leave goroutines behind.
func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

const masterTimeout = 200 * time.Millisecond // a race build on a busy machine misses 100ms

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
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

func newMulti(t *testing.T, c *redlock.Client, names []string, opts *multi.Options) *multi.Mutex {
	t.Helper()
	m, err := multi.New(c, names, opts)
	require.NoError(t, err)
	return m
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

// assertFree closes clients, which waits for their calls in flight and
// cleanups (a release a slow master answers after its round), then
// checks that on every running master each of keys is gone, or free
// ("f:<counter>"), and nothing else is there but release markers, which
// expire (an undo under contention leaves them).
func assertFree(t *testing.T, c *harness.Cluster, clients []*redlock.Client, keys ...string) {
	t.Helper()
	for _, client := range clients {
		_ = client.Close()
	}
	for i, left := range leftKeys(t, c) {
		for _, k := range left {
			if strings.Contains(k, "}:gone:") {
				ttl, err := c.Admin(i).PTTL(t.Context(), k).Result()
				require.NoError(t, err)
				// -2ns: it expired since KEYS; -1ns: it never would.
				assert.NotEqual(t, time.Duration(-1), ttl, "master %d: marker %s expires", i, k)
				continue
			}
			if !assert.Contains(t, keys, k, "master %d: a key besides the names'", i) {
				continue
			}
			v, err := c.Admin(i).Get(t.Context(), k).Result()
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(v, "f:"), "master %d: %s is %q, not free", i, k, v)
		}
	}
}

// assertReleased checks the error of a release under contention: nil, or
// too few answers in MasterTimeout on a busy machine (the lock expires,
// and Close retries the release where it got no answer).
func assertReleased(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNoQuorum) {
		assert.NoError(t, err)
	}
}

// One name held elsewhere: the multi-resource lock is refused, and no
// master holds any other of its names, nor a marker. Catches a script
// that sets the names one by one and stops at the held one.
func TestAllOrNothing(t *testing.T) {
	c, clients := own(t, 2)
	held, err := clients[0].Acquire(t.Context(), "b", time.Second)
	require.NoError(t, err)
	m := newMulti(t, clients[1], []string{"c", "a", "b"}, nil)
	_, err = m.TryAcquire(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorContains(t, err, `: "b" held by another owner`)
	assert.Equal(t, []string{"b"}, multi.Held(err))
	for i, keys := range leftKeys(t, c) {
		assert.Equal(t, []string{"{b}"}, keys, "master %d", i)
		v, err := c.Admin(i).Get(t.Context(), "{b}").Result()
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(v, "1:"), "master %d: {b} still the plain lock's: %q", i, v)
	}
	require.NoError(t, held.Release(t.Context()))
	l, err := m.TryAcquire(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, multi.Names(l))
	assert.Greater(t, l.Token(), held.Token(), "b's counter goes on")
	require.NoError(t, l.Release(t.Context()))
	assertFree(t, c, clients, "{a}", "{b}", "{c}")
}

// A refusal names the names found held, each master the first of its
// own, in its part of the error: b on one master, d on the others. Each
// master's part says "redlock:" once. A round is decided once three of
// the five masters refused: the others may not have answered yet, nor,
// on a busy machine, within MasterTimeout or the connection's read
// timeout (then fewer refused, and the round is no contention). So it tries until masters of both names
// answered, at most 50 times.
func TestRefusalNamesHeld(t *testing.T) {
	c, clients := own(t, 2)
	ctx := t.Context()
	held, err := clients[0].Acquire(ctx, "d", 10*time.Second)
	require.NoError(t, err)
	// Three agreements decided it: the others' may still be landing, and
	// a master without d would take the multi-resource lock.
	require.Eventually(t, func() bool {
		for i := range c.Masters {
			if n, err := c.Admin(i).Exists(ctx, "{d}").Result(); err != nil || n == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "d is not held on every master")
	require.NoError(t, c.Admin(0).Set(ctx, "{b}", "1:0:0:2:n9o9", 10*time.Second).Err())
	m := newMulti(t, clients[1], []string{"d", "c", "b", "a"}, nil)
	for range 50 {
		_, err = m.TryAcquire(ctx)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		var named []string
		for i, r := range qe.Masters {
			want := "d"
			if i == 0 {
				want = "b"
			}
			var ne net.Error
			if errors.Is(r.Err, redlock.ErrNoReply) || errors.Is(r.Err, redlock.ErrMasterTimeout) || errors.As(r.Err, &ne) && ne.Timeout() {
				continue // no answer in time
			}
			require.ErrorIs(t, r.Err, redlock.ErrHeldElsewhere, "master %d", i)
			assert.Equal(t, fmt.Sprintf("redlock: %q held by another owner", want), r.Err.Error(), "master %d", i)
			assert.Contains(t, err.Error(), fmt.Sprintf("%s: %q held by another owner", r.Master, want), "master %d", i)
			named = append(named, want)
		}
		slices.Sort(named)
		assert.Equal(t, slices.Compact(named), multi.Held(err))
		assert.Equal(t, 1, strings.Count(err.Error(), "redlock:"), err.Error())
		if len(named) >= 3 { // the refusals alone leave no quorum
			assert.Equal(t, "contended", redlock.Outcome(err))
		}
		if len(multi.Held(err)) == 2 {
			break
		}
	}
	assert.Equal(t, []string{"b", "d"}, multi.Held(err), "in 50 attempts, master 0 never answered before the decision")
	// As Acquire wraps its last attempt's when ctx ends.
	assert.Equal(t, multi.Held(err), multi.Held(fmt.Errorf("%w; gave up waiting: %w", err, context.DeadlineExceeded)))
	assert.Nil(t, multi.Held(nil))
	assert.Nil(t, multi.Held(errors.New("x")))

	require.NoError(t, held.Release(ctx))
	require.NoError(t, c.Admin(0).Del(ctx, "{b}").Err())
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	assertFree(t, c, clients, "{a}", "{b}", "{c}", "{d}")
}

// Multi-resource locks on random pairs of four names and plain Mutexes
// on single names, over three clients: no name is ever held by two
// sections at once, each name's tokens only grow in the order the
// sections were taken, and nothing is left held. Catches a mode whose
// keys differ from the plain lock's (the two would not exclude each
// other), and a release that frees only some names.
func TestNeverOverlapsMutex(t *testing.T) {
	c, clients := own(t, 3)
	names := []string{"n0", "n1", "n2", "n3"}
	var inside [4]atomic.Int32
	var overlaps atomic.Int32
	var mu sync.Mutex
	last := map[string]uint64{}
	enter := func(ix []int, token uint64) {
		mu.Lock()
		for _, i := range ix {
			if inside[i].Add(1) > 1 {
				overlaps.Add(1)
			}
			if token <= last[names[i]] {
				t.Errorf("%s: token %d after %d", names[i], token, last[names[i]])
			}
			last[names[i]] = token
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		for _, i := range ix {
			inside[i].Add(-1)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	opts := &multi.Options{TTL: 2 * time.Second}
	var wg sync.WaitGroup
	const rounds = 15
	for g := range 6 {
		client := clients[g%len(clients)]
		wg.Go(func() {
			for r := range rounds {
				a, b := (g+r)%4, (g+2*r+1)%4
				if a == b {
					b = (b + 1) % 4
				}
				m := newMulti(t, client, []string{names[a], names[b]}, opts)
				l, err := m.Acquire(ctx)
				if !assert.NoError(t, err) {
					return
				}
				enter([]int{a, b}, l.Token())
				assertReleased(t, l.Release(t.Context()))
			}
		})
	}
	for g := range 4 {
		client := clients[g%len(clients)]
		mx, err := mutex.New(client, names[g], &mutex.Options{TTL: 2 * time.Second})
		require.NoError(t, err)
		wg.Go(func() {
			for range rounds {
				if !assert.NoError(t, mx.Lock(ctx)) {
					return
				}
				enter([]int{g}, mx.Current().Token())
				assertReleased(t, mx.Unlock(t.Context()))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "sections that shared a name overlapped")
	assertFree(t, c, clients, "{n0}", "{n1}", "{n2}", "{n3}")
}

// Tokens of a name grow across both kinds of lock: a Mutex on a, then
// {a, b}, then a Mutex on b and one on a again. Catches a multi acquire
// that restarts a name's counter, or a release that drops it.
func TestTokensGrowAcrossKinds(t *testing.T) {
	_, clients := own(t, 1)
	c := clients[0]
	ctx := t.Context()
	a1, err := c.Acquire(ctx, "a", time.Second)
	require.NoError(t, err)
	require.NoError(t, a1.Release(ctx))
	m := newMulti(t, c, []string{"b", "a"}, nil)
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	assert.Greater(t, l.Token(), a1.Token())
	require.NoError(t, l.Release(ctx))
	b2, err := c.Acquire(ctx, "b", time.Second)
	require.NoError(t, err)
	a2, err := c.Acquire(ctx, "a", time.Second)
	require.NoError(t, err)
	assert.Greater(t, b2.Token(), l.Token())
	assert.Greater(t, a2.Token(), l.Token())
	require.NoError(t, b2.Release(ctx))
	require.NoError(t, a2.Release(ctx))
}

// result is what a waiting call got, and when.
type result struct {
	l   *redlock.Lock
	err error
	at  time.Time
}

// The release of {a, b} wakes a Mutex waiter on a and one on b, of
// another client, and a release of a plain lock on b wakes a waiting
// multi-resource lock: each well before its fallback timer, whose first
// delay is at least 5s. A round takes milliseconds; the bound is 2s.
// Catches a release that publishes on its first name only, and a multi
// waiter that watches one name.
func TestReleaseWakesEachName(t *testing.T) {
	_, clients := own(t, 2)
	const poll = 10 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 3*poll)
	defer cancel()
	m := newMulti(t, clients[0], []string{"a", "b"}, &multi.Options{MinRetryDelay: poll, MaxRetryDelay: poll})
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	got := make(chan result, 2)
	var mutexes []*mutex.Mutex
	for _, name := range []string{"a", "b"} {
		mx, err := mutex.New(clients[1], name, &mutex.Options{MinRetryDelay: poll, MaxRetryDelay: poll})
		require.NoError(t, err)
		mutexes = append(mutexes, mx)
		go func() {
			err := mx.Lock(ctx)
			got <- result{mx.Current(), err, time.Now()}
		}()
	}
	time.Sleep(time.Second) // the waiters are refused, subscribe and wait
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	for range 2 {
		r := <-got
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(released), 2*time.Second, "woken by the release, not by the %v timer", poll)
	}
	// Now the Mutexes hold a and b: a multi waiter waits for both.
	waiting := make(chan result, 1)
	go func() {
		l, err := m.Acquire(ctx)
		waiting <- result{l, err, time.Now()}
	}()
	time.Sleep(time.Second)
	require.NoError(t, mutexes[0].Unlock(ctx))
	time.Sleep(200 * time.Millisecond) // b is still held: the waiter is refused again
	released = time.Now()
	require.NoError(t, mutexes[1].Unlock(ctx))
	r := <-waiting
	require.NoError(t, r.err)
	assert.Less(t, r.at.Sub(released), 2*time.Second, "woken by b's release, not by the %v timer", poll)
	require.NoError(t, r.l.Release(ctx))
}

// Extend lengthens every name; on a master where one name was lost, it
// lengthens none. AutoRenew keeps the lock past its TTL, beside plain
// locks renewed in the same batches. Catches an extend that lengthens
// names one by one, and a renewer that batches a multi-resource lock
// with others by its first key only.
func TestExtendTogether(t *testing.T) {
	c, clients := own(t, 1)
	client := clients[0]
	ctx := t.Context()
	const ttl = 4 * masterTimeout // the least a fenced lock takes
	m := newMulti(t, client, []string{"x", "y", "z"}, &multi.Options{TTL: ttl})
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Admin(0).Del(ctx, "{y}").Err()) // master 0 lost y
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	// The extend is decided once a quorum agreed: a fourth master's call
	// may still be on its way, or withdrawn.
	extended := 0
	for i := range c.Masters {
		both := true
		for _, k := range []string{"{x}", "{z}"} {
			left, err := c.Admin(i).PTTL(ctx, k).Result()
			require.NoError(t, err)
			if i == 0 {
				assert.LessOrEqual(t, left, ttl, "master %d, %s: extended without y", i, k)
			}
			both = both && left > ttl
		}
		if i > 0 && both {
			extended++
		}
	}
	assert.GreaterOrEqual(t, extended, len(c.Masters)/2+1, "masters that extended x and z")
	require.NoError(t, l.Release(ctx))

	plain, err := client.Acquire(ctx, "p", ttl)
	require.NoError(t, err)
	plain.AutoRenew()
	var held []*redlock.Lock
	for _, names := range [][]string{{"x", "y"}, {"z", "w"}} {
		l, err := newMulti(t, client, names, &multi.Options{TTL: ttl, AutoRenew: true}).TryAcquire(ctx)
		require.NoError(t, err)
		held = append(held, l)
	}
	time.Sleep(4 * ttl)
	for _, l := range append(held, plain) {
		assert.True(t, l.Held(), "%v renewed", l)
		require.NoError(t, l.Release(ctx))
	}
	assertFree(t, c, clients, "{p}", "{w}", "{x}", "{y}", "{z}")
}

// With two of five masters down, a multi-resource lock is taken,
// extended, excludes a Mutex of one of its names, and is released.
func TestMinorityDown(t *testing.T) {
	c, clients := own(t, 1)
	for _, i := range []int{1, 3} {
		require.NoError(t, c.Masters[i].Kill(t.Context()))
	}
	ctx := t.Context()
	l, err := newMulti(t, clients[0], []string{"a", "b"}, nil).TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	_, err = clients[0].Acquire(ctx, "b", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, l.Release(ctx))
	b, err := clients[0].Acquire(ctx, "b", time.Second)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx))
	assertFree(t, c, clients, "{a}", "{b}")
}

// Callers list the same names in opposite and rotated orders. Each makes
// progress: every one finishes its rounds within the bound. Catches any
// scheme that holds some names while it waits for others.
func TestDeadlockFree(t *testing.T) {
	c, clients := own(t, 2)
	orders := [][]string{{"p", "q", "r"}, {"r", "q", "p"}, {"q", "r", "p"}, {"q", "p"}, {"p", "r"}, {"r", "p"}}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var done atomic.Int32
	var wg sync.WaitGroup
	const rounds = 10
	for g, names := range orders {
		m := newMulti(t, clients[g%2], names, &multi.Options{TTL: 2 * time.Second})
		wg.Go(func() {
			for range rounds {
				l, err := m.Acquire(ctx)
				if !assert.NoError(t, err, "%v", names) {
					return
				}
				assertReleased(t, l.Release(t.Context()))
			}
			done.Add(1)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(len(orders)), done.Load(), "every caller finished")
	assertFree(t, c, clients, "{p}", "{q}", "{r}")
}

// Bad input is refused before any I/O, with an error wrapping
// redlock.ErrInvalidArgument, and leaves nothing on the masters.
func TestBadInput(t *testing.T) {
	c, clients := own(t, 1)
	client := clients[0]
	for _, bad := range []struct {
		why   string
		names []string
		opts  *multi.Options
	}{
		{"no name", nil, nil},
		{"empty list", []string{}, nil},
		{"empty name", []string{"a", ""}, nil},
		{"duplicate", []string{"a", "b", "a"}, nil},
		{"TTL below the master timeout", []string{"a"}, &multi.Options{TTL: masterTimeout / 2}},
		{"retry delays", []string{"a"}, &multi.Options{MinRetryDelay: time.Second, MaxRetryDelay: time.Millisecond}},
	} {
		_, err := multi.New(client, bad.names, bad.opts)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, bad.why)
	}
	_, err := multi.New(nil, []string{"a"}, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = multi.New(client, []string{"a", "b", "a"}, nil)
	assert.ErrorContains(t, err, `"a" given twice`)

	m := newMulti(t, client, []string{"a", "b"}, nil)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	calls := map[string]func(context.Context) (*redlock.Lock, error){
		"Acquire": m.Acquire, "TryAcquire": m.TryAcquire,
		"Do": func(ctx context.Context) (*redlock.Lock, error) {
			return nil, m.Do(ctx, func(context.Context, *redlock.Lock) error { return nil })
		},
	}
	for name, call := range calls {
		_, err := call(nil) //nolint:staticcheck // a nil context is the bad input
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		_, err = call(cancelled)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		assert.ErrorIs(t, err, context.Canceled, name)
	}
	assert.ErrorIs(t, m.Do(t.Context(), nil), redlock.ErrInvalidArgument)
	var zero multi.Mutex
	for name, call := range map[string]func(context.Context) (*redlock.Lock, error){"Acquire": zero.Acquire, "TryAcquire": zero.TryAcquire} {
		_, err := call(t.Context())
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
	}
	assert.Nil(t, multi.Names(nil))
	for i, keys := range leftKeys(t, c) {
		assert.Empty(t, keys, "master %d", i)
	}

	l, err := m.TryAcquire(t.Context())
	require.NoError(t, err)
	assert.ErrorIs(t, l.Reenter(t.Context()), redlock.ErrInvalidArgument, "holds once")
	plain, err := client.Acquire(t.Context(), "a", time.Second)
	if err == nil {
		_ = plain.Release(t.Context())
	}
	assert.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Nil(t, multi.Names(plain))
	require.NoError(t, l.Release(t.Context()))
}

// On a Redis Cluster master, names in two slots are refused at New with
// an error naming both and their slots; names under one hash tag are
// taken, exclude a plain lock of one of them, and are released.
func TestClusterSlots(t *testing.T) {
	rc := harness.NewRedisCluster(t, harness.RedisClusterOptions{})
	cc := rc.NewClient()
	t.Cleanup(func() { _ = cc.Close() })
	client, err := redlock.New([]*redis.ClusterClient{cc}, &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	_, err = multi.New(client, []string{"a", "b"}, nil)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Regexp(t, `"a" \(slot \d+\) and "b" \(slot \d+\)`, err.Error())

	ctx := t.Context()
	names := []string{"{acct:7}:to", "{acct:7}:from"}
	m := newMulti(t, client, names, nil)
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	_, err = client.Acquire(ctx, "{acct:7}:to", 4*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, l.Release(ctx))
	p, err := client.Acquire(ctx, "{acct:7}:to", 4*time.Second)
	require.NoError(t, err)
	assert.Greater(t, p.Token(), l.Token())
	require.NoError(t, p.Release(ctx))
}

// Names returns a copy: changing it changes no Lock.
func TestNamesCopy(t *testing.T) {
	_, clients := own(t, 1)
	m := newMulti(t, clients[0], []string{"b", "a"}, nil)
	assert.Equal(t, []string{"a", "b"}, m.Names())
	l, err := m.TryAcquire(t.Context())
	require.NoError(t, err)
	n := multi.Names(l)
	n[0] = "zzz"
	assert.Equal(t, []string{"a", "b"}, multi.Names(l))
	assert.Equal(t, "a,b", l.Key())
	require.NoError(t, l.Release(t.Context()))
}

// A name may hold a comma: its Lock's Key quotes it, so that the Lock of
// the one name "a,b" and the Lock of names a and b, both held at once,
// report different keys. Names tells the names as they are.
func TestKeyOfANameWithAComma(t *testing.T) {
	_, clients := own(t, 1)
	ctx := t.Context()
	one, err := newMulti(t, clients[0], []string{"a,b"}, nil).TryAcquire(ctx)
	require.NoError(t, err)
	two, err := newMulti(t, clients[0], []string{"b", "a"}, nil).TryAcquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, `"a,b"`, one.Key())
	assert.Equal(t, "a,b", two.Key())
	assert.Equal(t, []string{"a,b"}, multi.Names(one))
	assert.Equal(t, []string{"a", "b"}, multi.Names(two))
	_, err = newMulti(t, clients[0], []string{"c", "a,b"}, nil).TryAcquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), `acquire "\"a,b\",c": `)
	require.NoError(t, one.Release(ctx))
	require.NoError(t, two.Release(ctx))
}

// A name lost on a quorum of masters (deleted there) loses the whole
// Lock: Extend fails with ErrNotHeld, Done closes and Err says why. The
// other names are left to expire, never re-created.
func TestLossOfOneName(t *testing.T) {
	c, clients := own(t, 1)
	ctx := t.Context()
	l, err := newMulti(t, clients[0], []string{"a", "b"}, nil).TryAcquire(ctx)
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, c.Admin(i).Del(ctx, "{b}").Err())
	}
	require.ErrorIs(t, l.Extend(ctx, 5*time.Second), redlock.ErrNotHeld)
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("Done did not close")
	}
	require.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	for i := range 3 {
		n, err := c.Admin(i).Exists(ctx, "{b}").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "master %d: b re-created", i)
	}
	_ = l.Release(ctx)
}

// On a redis.Ring master, which routes a call by its first key's hash
// tag, names under two tags are refused at New, naming both; names
// under one tag are taken on one shard and released.
func TestRingTags(t *testing.T) {
	c := harness.NewProcessCluster(t, 2, harness.ProcessOptions{})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s0": c.Masters[0].Addr(), "s1": c.Masters[1].Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	client, err := redlock.New([]*redis.Ring{ring}, &redlock.Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	_, err = multi.New(client, []string{"a", "b"}, nil)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, `names "a" and "b" hash to different tags`)
	l, err := newMulti(t, client, []string{"{t}b", "{t}a"}, nil).TryAcquire(t.Context())
	require.NoError(t, err)
	_, err = client.Acquire(t.Context(), "{t}b", 4*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, l.Release(t.Context()))
}
