package mutex_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// roundCounter is an Observer that counts the decided rounds of each
// operation ("acquire", "queue" for a renewal, ...).
type roundCounter struct {
	mu sync.Mutex
	by map[string]int
}

func (r *roundCounter) ObserveRound(_ context.Context, rd redlock.Round) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]int{}
	}
	r.by[rd.Op]++
}

func (r *roundCounter) ObserveEvent(context.Context, redlock.Event) {}

func (r *roundCounter) count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[op]
}

// settled waits until the acquire rounds r counts stop changing for three
// polls 100ms apart, and there are at least least of them. Bound: 20s.
func (r *roundCounter) settled(t *testing.T, least int) {
	t.Helper()
	last, same := -1, 0
	require.Eventually(t, func() bool {
		n := r.count("acquire")
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
		return n >= least && same >= 3
	}, 20*time.Second, 100*time.Millisecond, "the acquire rounds never settled at %d or more", least)
}

// scriptCalls returns the scripts (FCALL, EVALSHA, EVAL) master i ran so
// far, from INFO commandstats.
func scriptCalls(t *testing.T, c *harness.Cluster, i int) int {
	t.Helper()
	info, err := c.Admin(i).Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	n := 0
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || (name != "fcall" && name != "evalsha" && name != "eval") {
			continue
		}
		calls, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err, line)
		n += calls
	}
	return n
}

// clientOn returns a client of the masters is of c (all where none is
// given), with a MasterTimeout of 1s: rounds of a hundred waiters under
// -race on a busy machine must not time out.
func clientOn(t *testing.T, c *harness.Cluster, obs redlock.Observer, is ...int) *redlock.Client {
	t.Helper()
	if len(is) == 0 {
		for i := range c.Masters {
			is = append(is, i)
		}
	}
	masters := make([]*redis.Client, len(is))
	for k, i := range is {
		masters[k] = redis.NewClient(harness.MasterOptions(c.Masters[i].Addr()))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: time.Second, Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

// A Mutex's release wakes the first of a hundred fair waiters of one
// client, not all of them, though none has renewed yet: each learned from
// its refused try whether a ticket is ahead. The scripts each master runs
// from the release until the first waiter holds the lock and the others
// are idle are counted: the release and the first waiter's acquire, 2.
// The bound, 10, leaves room for a try that came late. It fails where a
// waiter that has not renewed tries at every release: 200 per master. No renewal falls in the test: the
// waiters renew a third of their waiter TTL (60s) after they queued, and
// the test checks it.
func TestFairMutexReleaseWakesOneOfManyWaiters(t *testing.T) {
	const waiters, name = 100, "herd"
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	rounds := &roundCounter{}
	client := clientOn(t, c, rounds)
	m, err := mutex.New(clientOn(t, c, nil), name, &mutex.Options{TTL: time.Minute})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, m.Lock(ctx))
	f, err := mutex.NewFair(client, name, &mutex.FairOptions{TTL: 10 * time.Second, WaiterTTL: time.Minute})
	require.NoError(t, err)
	tickets := make([]*mutex.Ticket, waiters)
	for i := range tickets {
		tickets[i], err = f.Enqueue(ctx)
		require.NoError(t, err)
	}
	type grant struct {
		i int
		l *redlock.Lock
	}
	got := make(chan grant, waiters) // held: a release would wake the next
	defer func() {
		for _, tk := range tickets {
			tk.Cancel()
		}
		for {
			select {
			case g := <-got:
				assert.NoError(t, g.l.Release(context.Background()))
			default:
				return
			}
		}
	}()
	for i, tk := range tickets {
		go func() {
			if l, err := tk.Wait(ctx); err == nil {
				got <- grant{i, l}
			}
		}()
	}
	key := "{" + name + "}"
	require.Eventually(t, func() bool {
		for i := range c.Masters {
			n, err := c.Admin(i).PubSubNumSub(ctx, key, key+":q").Result()
			if err != nil || n[key] < 1 || n[key+":q"] < 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "the waiters never subscribed on every master")
	rounds.settled(t, waiters) // every waiter tried, and was refused
	before := make([]int, len(c.Masters))
	for i := range before {
		before[i] = scriptCalls(t, c, i)
	}
	require.NoError(t, m.Unlock(ctx))
	select {
	case g := <-got:
		got <- g // released at the end
		assert.Equal(t, 0, g.i, "the first ticket gets the lock")
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter got the lock")
	}
	rounds.settled(t, 0)
	for i := range before {
		n := scriptCalls(t, c, i) - before[i]
		t.Logf("master %d ran %d scripts from the release on", i, n)
		assert.LessOrEqual(t, n, 10, "master %d: scripts from the Mutex's release on", i)
	}
	require.Zero(t, rounds.count("queue"), "a renewal fell in the test: it counts nothing")
}
