package semaphore_test

import (
	"context"
	"fmt"
	"maps"
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
	"github.com/go-redlock/redlock/semaphore"
)

// commandStats returns the calls of each command that master i ran so far,
// from INFO commandstats. Commands a script runs count there too.
func commandStats(t *testing.T, c *harness.Cluster, i int) map[string]int {
	t.Helper()
	calls, err := c.CommandCalls(t.Context(), i)
	require.NoError(t, err)
	return calls
}

// callCounter is a go-redis hook that counts the commands a client sends,
// a script or function by its name (an EVALSHA by its SHA1).
type callCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (h *callCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cmd := range cmds {
		name := cmd.Name()
		switch args := cmd.Args(); {
		case name == "fcall" && len(args) > 1:
			fn := fmt.Sprint(args[1]) // redlock_<hash>_<script>
			if _, rest, ok := strings.Cut(strings.TrimPrefix(fn, "redlock_"), "_"); ok {
				fn = rest
			}
			name = "fcall " + fn
		case (name == "evalsha" || name == "eval") && len(args) > 1:
			name += " " + fmt.Sprint(args[1])[:8]
		}
		h.calls[name]++
	}
}

// countedClient is newClient whose masters' clients count their calls
// in h. Its MasterTimeout is 2s, not 100ms: under -race on a busy machine
// (load 13 to 22) rounds of 100ms, and even of 500ms, sometimes went
// undecided, failing a release with ErrNoQuorum. The TTLs counted here
// are at least 8s, which allows it.
func countedClient(t *testing.T, c *harness.Cluster, h *callCounter) *redlock.Client {
	t.Helper()
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
		masters[i].AddHook(harness.CountingHook(h.count))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

// perPair formats calls divided by pairs, largest first.
func perPair(calls map[string]int, pairs int) string {
	names := slices.Collect(maps.Keys(calls))
	slices.SortFunc(names, func(a, b string) int { return calls[b] - calls[a] })
	var b strings.Builder
	for _, n := range names {
		if calls[n] > 0 {
			fmt.Fprintf(&b, "\n  %-28s %7.2f", n, float64(calls[n])/float64(pairs))
		}
	}
	return b.String()
}

// Sixteen goroutines of one client take permits of capacity 4 on five
// masters, hold each 2ms and give it back, forty each. The commands the
// masters ran (INFO commandstats, those scripts run included) and the
// calls the client sent (scripts by name) are counted per acquire+release
// pair. A pair needs one round to acquire and one to release (ten
// scripts), a fence round where the tokens differ, and a round or two
// where it lost a race. The bound is a count, not a time, but a busy
// machine changes the mix of races: under -race at load 13 to 19 pairs
// took 172 to 218 commands (23 to 28 calls). The bound, 250, catches a
// return of waking every waiter on each copy of a release, or probing
// every slot: pairs took 220 to 235 then, on a quieter machine. At most
// capacity permits are held at any time, and nothing but expiring keys
// is left. TestFullSemaphoreRefusesInOneRound checks the exact cost of a
// refusal.
func TestCommandsPerPair(t *testing.T) {
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	h := &callCounter{calls: map[string]int{}}
	clients := make([]*redlock.Client, 1)
	for k := range clients {
		clients[k] = countedClient(t, c, h)
	}
	const capacity, goroutines, rounds, ttl = 4, 16, 40, 8 * time.Second
	// The client subscribes and loads its library first: set-up is not
	// the pairs' cost.
	for _, cl := range clients {
		l, err := newSemaphore(t, cl, "cmds", &semaphore.Options{TTL: ttl}).Acquire(t.Context(), capacity)
		require.NoError(t, err)
		require.NoError(t, l.Release(t.Context()))
	}
	time.Sleep(100 * time.Millisecond) // background loads and probes answer
	before := make([]map[string]int, len(c.Masters))
	for i := range c.Masters {
		before[i] = commandStats(t, c, i)
	}
	h.mu.Lock()
	clear(h.calls)
	h.mu.Unlock()

	var holders, most atomic.Int32
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for g := range goroutines {
		s := newSemaphore(t, clients[g%len(clients)], "cmds", &semaphore.Options{TTL: ttl})
		wg.Go(func() {
			for range rounds {
				l, err := s.Acquire(ctx, capacity)
				if !assert.NoError(t, err) {
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				assert.LessOrEqual(t, n, int32(capacity), "holders at once")
				time.Sleep(2 * time.Millisecond)
				holders.Add(-1)
				assert.NoError(t, l.Release(ctx))
			}
		})
	}
	wg.Wait()
	const pairs = goroutines * rounds

	server := map[string]int{}
	for i := range c.Masters {
		for name, n := range commandStats(t, c, i) {
			if name != "info" { // the test's own
				server[name] += n - before[i][name]
			}
		}
	}
	h.mu.Lock()
	sent := maps.Clone(h.calls)
	h.mu.Unlock()
	total := func(m map[string]int) int {
		n := 0
		for _, v := range m {
			n += v
		}
		return n
	}
	t.Logf("%d pairs, at most %d held at once", pairs, most.Load())
	t.Logf("server commands per pair: %.2f%s", float64(total(server))/pairs, perPair(server, pairs))
	t.Logf("calls sent per pair: %.2f%s", float64(total(sent))/pairs, perPair(sent, pairs))
	assert.LessOrEqual(t, float64(total(server))/pairs, 250.0, "server commands per pair")
	assertOnlyExpiring(t, c, clients, "{cmds}", ttl)
}

// TestFullSemaphoreRefusesInOneRound: where every permit is held, a try is
// refused by one round of five calls that writes nothing. Before, it asked
// every slot in turn (four rounds) and trimmed the permits each time.
func TestFullSemaphoreRefusesInOneRound(t *testing.T) {
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	h := &callCounter{calls: map[string]int{}}
	client := countedClient(t, c, h)
	const capacity, ttl = 4, 10 * time.Second
	s := newSemaphore(t, client, "full", &semaphore.Options{TTL: ttl})
	for range capacity {
		l, err := s.Acquire(t.Context(), capacity)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	time.Sleep(100 * time.Millisecond) // background loads and probes answer
	before := make([]map[string]int, len(c.Masters))
	for i := range c.Masters {
		before[i] = commandStats(t, c, i)
	}
	h.mu.Lock()
	clear(h.calls)
	h.mu.Unlock()

	_, err := s.TryAcquire(t.Context(), capacity)
	require.ErrorIs(t, err, redlock.ErrNotObtained)

	h.mu.Lock()
	sent := maps.Clone(h.calls)
	h.mu.Unlock()
	n := 0
	for _, v := range sent {
		n += v
	}
	assert.Equal(t, len(c.Masters), n, "one call to each master: %v", sent)
	for i := range c.Masters {
		for name, v := range commandStats(t, c, i) {
			switch d := v - before[i][name]; name {
			case "info", "evalsha", "fcall", "time", "zcount", "get", "mget", "exists", "zrangebyscore", "hget":
			default:
				assert.Zero(t, d, "master %d ran %s", i, name)
			}
		}
	}
}
