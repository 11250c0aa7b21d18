package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

var (
	echoScript  = redis.NewScript("return tonumber(ARGV[1])")
	incrScript  = redis.NewScript("return redis.call('INCR', KEYS[1])")
	otherScript = redis.NewScript("return tonumber(ARGV[1]) + 0")
)

// testLimit bounds every batch in these tests; no test waits for it.
const testLimit = 10 * time.Second

// startMaster starts one master, with redis-server arguments args, and
// returns it, an admin client and a Pipeline over a client whose timeouts
// come from contexts only (its read and write timeouts are long), so a
// paused master holds a call until Resume or the call's deadline.
func startMaster(t *testing.T, args ...string) (harness.Master, *redis.Client, *Pipeline) {
	t.Helper()
	cluster := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: args})
	opt := harness.MasterOptions(cluster.Masters[0].Addr())
	opt.ReadTimeout, opt.WriteTimeout = testLimit, testLimit
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	p := New(client, testLimit, 1)
	require.NotNil(t, p.piper, "a *redis.Client pipelines")
	t.Cleanup(p.Close)
	m := cluster.Masters[0]
	// Runs before p.Close, so that Close never waits on a paused master.
	t.Cleanup(func() { _ = m.Resume(context.Background()) })
	return m, cluster.Admin(0), p
}

// poll waits until cond holds, for at most d.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("still not %s after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// snapshot returns p's stats and its queue's length.
func (p *Pipeline) snapshot() (stats, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.lanes {
		n += len(p.lanes[l].queue)
	}
	return p.stats, n
}

func queueLen(p *Pipeline) int { _, n := p.snapshot(); return n }

func statsOf(p *Pipeline) stats { s, _ := p.snapshot(); return s }

// occupy pauses m and sends a call that holds p busy until m resumes; it
// returns a channel that receives that call's error.
func occupy(t *testing.T, m harness.Master, p *Pipeline) <-chan error {
	t.Helper()
	require.NoError(t, m.Pause(t.Context()))
	alone := statsOf(p).alone
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testLimit)
		defer cancel()
		_, err := p.Run(ctx, otherScript, Keys{}, []any{0}, false)
		errc <- err
	}()
	poll(t, 5*time.Second, "sending the occupying call", func() bool { return statsOf(p).alone == alone+1 })
	return errc
}

// goroutines counts the goroutines of Pipelines: senders and workers.
func goroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pipeline.(*lane).sender(") || strings.Contains(g, "pipeline.(*workers).work(") {
			n++
		}
	}
	return n
}

// idle reports whether p has nothing queued nor in flight.
func idle(p *Pipeline) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.lanes {
		if p.lanes[l].busy {
			return false
		}
	}
	return true
}

// goWait runs a call of Go and waits for its answer or for ctx to end, as
// a round's decider does.
func goWait(ctx context.Context, p *Pipeline, s *redis.Script, keys Keys, o Options) (int64, error) {
	w := &waiter{reply: make(chan answer, 1)}
	p.Go(ctx, s, keys, nil, o, w)
	select {
	case a := <-w.reply:
		return a.val, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func getInt(t *testing.T, admin *redis.Client, key string) int64 {
	t.Helper()
	v, err := admin.Get(t.Context(), key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return v
}

// echoAll runs n echo calls on p from n goroutines, each call with its own
// argument base+i, and checks that each got its own argument back.
func echoAll(t *testing.T, p *Pipeline, n, base int, started func()) {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testLimit)
			defer cancel()
			got[i], errs[i] = p.Run(ctx, echoScript, Keys{}, []any{base + i}, false)
		})
	}
	if started != nil {
		started()
	}
	wg.Wait()
	for i := range n {
		if assert.NoError(t, errs[i], "call %d", i) {
			assert.Equal(t, int64(base+i), got[i], "call %d got another call's reply", i)
		}
	}
}

// 64 goroutines calling at once, for several rounds: every reply is its
// own call's, whether the call went alone or in a batch.
func TestPipelineRepliesMatchCalls(t *testing.T) {
	_, _, p := startMaster(t)
	const callers, rounds = 64, 20
	var wg sync.WaitGroup
	var wrong, failed atomic.Int32
	for g := range callers {
		wg.Go(func() {
			for r := range rounds {
				want := g*1000 + r
				ctx, cancel := context.WithTimeout(context.Background(), testLimit)
				v, err := p.Run(ctx, echoScript, Keys{}, []any{strconv.Itoa(want)}, r%2 == 0)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case v != int64(want):
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failed.Load(), "calls that failed")
	assert.Zero(t, wrong.Load(), "calls that got another call's reply")
	s := statsOf(p)
	assert.Equal(t, callers*rounds, s.alone+s.batched, "every call sent once")
	t.Logf("%+v", s)
}

// Calls made while one is in flight go out together, in one batch, each
// getting its own reply.
func TestPipelineBatchesCallsMadeWhileBusy(t *testing.T) {
	m, _, p := startMaster(t)
	occupied := occupy(t, m, p)
	const n = 63
	echoAll(t, p, n, 100, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == n })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	s := statsOf(p)
	assert.Equal(t, 1, s.alone)
	assert.Equal(t, 1, s.batches, "%d queued calls fit in one batch", n)
	assert.Equal(t, n, s.batched)
}

// A lone call on an idle master goes out at once, alone, also right after
// a batch.
func TestPipelineLoneCallGoesOutAtOnce(t *testing.T) {
	m, _, p := startMaster(t)
	v, err := p.Run(t.Context(), echoScript, Keys{}, []any{7}, false)
	require.NoError(t, err)
	assert.Equal(t, int64(7), v)
	assert.Equal(t, stats{alone: 1}, statsOf(p))

	occupied := occupy(t, m, p)
	echoAll(t, p, 3, 0, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 3 })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	poll(t, 5*time.Second, "idle", func() bool { return idle(p) })
	before := statsOf(p)
	v, err = p.Run(t.Context(), echoScript, Keys{}, []any{8}, false)
	require.NoError(t, err)
	assert.Equal(t, int64(8), v)
	after := statsOf(p)
	assert.Equal(t, before.alone+1, after.alone, "the call after a batch went alone")
	assert.Equal(t, before.batches, after.batches)
}

// Callers that call again as soon as they are answered have their calls
// in the next batch, not one alone and the others in a batch after it.
// One P (GOMAXPROCS 1) makes the order of the goroutines the scheduler's
// alone: without the sender's yield, each round went out as one call
// alone and a batch of the other seven.
func TestPipelineAnsweredCallersJoinTheNextBatch(t *testing.T) {
	_, _, p := startMaster(t)
	p.slowYield = time.Hour // a busy machine's slow yield stops nothing here
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const callers, rounds = 8, 40
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range callers {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), testLimit)
				if _, err := p.Run(ctx, echoScript, Keys{}, []any{r}, false); err != nil {
					failed.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failed.Load(), "calls that failed")
	s := statsOf(p)
	assert.Equal(t, callers*rounds, s.alone+s.batched, "every call sent once")
	assert.LessOrEqual(t, s.alone, rounds/4, "calls sent alone, of %d rounds: %+v", rounds, s)
}

// Where a yield took long, other goroutines keep the processor busy, and
// each yield would queue the sender behind them once more: it stops
// yielding for a while. A goroutine that spins for the whole test (at
// most 5s) on one P (GOMAXPROCS 1) makes every yield wait for its time
// slice.
func TestPipelineStopsYieldingBehindBusyGoroutines(t *testing.T) {
	_, _, p := startMaster(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		for end := time.Now().Add(5 * time.Second); !stop.Load() && time.Now().Before(end); {
		}
	}()
	defer func() { stop.Store(true); <-spun }()
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), testLimit)
		_, err := p.Run(ctx, echoScript, Keys{}, []any{i}, false)
		cancel()
		require.NoError(t, err)
	}
	assert.Positive(t, p.yieldsSkipped.Load(), "yields skipped")
}

// A paused master: callers return at their own deadline; the queue holds
// at most maxQueued calls that may be shed, refuses more at once,
// never refuses mustSend or kept calls, and after Resume sends the mustSend
// and kept calls but none of the others whose caller left while it was
// queued.
func TestPipelinePausedMaster(t *testing.T) {
	m, admin, p := startMaster(t)
	occupied := occupy(t, m, p)

	type result struct {
		err  error
		late time.Duration // returned how long after its deadline
	}
	call := func(timeout time.Duration, key string, mustSend bool) result {
		deadline := time.Now().Add(timeout)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		var err error
		if key == "kept" {
			_, err = goWait(ctx, p, incrScript, NewKeys(key), Options{MustSend: true})
		} else {
			_, err = p.Run(ctx, incrScript, NewKeys(key), nil, mustSend)
		}
		return result{err, time.Since(deadline)}
	}

	// The loose calls' deadline leaves 3s to queue them all: enough on a
	// busy machine with the race detector; queueing is what is polled.
	loose := make([]result, maxQueued)
	var wg sync.WaitGroup
	for i := range loose {
		wg.Go(func() { loose[i] = call(3*time.Second, "loose", false) })
	}
	poll(t, 3*time.Second, "queue full", func() bool { return queueLen(p) == maxQueued })

	start := time.Now()
	_, err := p.Run(t.Context(), incrScript, NewKeys("loose"), nil, false)
	assert.ErrorIs(t, err, ErrQueueFull)
	assert.ErrorIs(t, err, ErrNotSent)
	assert.Less(t, time.Since(start), time.Second, "a full queue refuses at once")
	assert.Equal(t, 1, statsOf(p).shed)

	const musts, kepts = 20, 5
	must, kept := make([]result, musts), make([]result, kepts)
	for i := range must {
		wg.Go(func() { must[i] = call(300*time.Millisecond, "must", true) })
	}
	for i := range kept {
		wg.Go(func() { kept[i] = call(300*time.Millisecond, "kept", false) })
	}
	poll(t, 3*time.Second, "mustSend and kept calls queued past the bound", func() bool {
		return queueLen(p) == maxQueued+musts+kepts
	})
	wg.Wait()

	// Every caller returned at its deadline: not before, and within 1s
	// after it (the margin covers scheduling on a busy machine).
	for i, r := range loose {
		assert.ErrorIs(t, r.err, ErrNotSent, "loose call %d", i)
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "loose call %d", i)
		assert.GreaterOrEqual(t, r.late, time.Duration(0), "loose call %d", i)
		assert.Less(t, r.late, time.Second, "loose call %d", i)
	}
	for i, r := range kept {
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "kept call %d", i)
		assert.NotErrorIs(t, r.err, ErrNotSent, "kept call %d", i)
		assert.GreaterOrEqual(t, r.late, time.Duration(0), "kept call %d", i)
		assert.Less(t, r.late, time.Second, "kept call %d", i)
	}
	for i, r := range must {
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "mustSend call %d", i)
		assert.NotErrorIs(t, r.err, ErrNotSent, "mustSend call %d", i)
		assert.GreaterOrEqual(t, r.late, time.Duration(0), "mustSend call %d", i)
		assert.Less(t, r.late, time.Second, "mustSend call %d", i)
	}
	assert.Equal(t, musts+kepts, queueLen(p), "loose calls left the queue, mustSend and kept ones stay")

	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-occupied)
	poll(t, 5*time.Second, "mustSend calls applied", func() bool { return getInt(t, admin, "must") == musts })
	poll(t, 5*time.Second, "idle", func() bool { return idle(p) })
	assert.Zero(t, getInt(t, admin, "loose"), "calls whose caller left while queued were sent")
	poll(t, 5*time.Second, "kept calls applied", func() bool { return getInt(t, admin, "kept") == kepts })
	s := statsOf(p)
	assert.Equal(t, musts+kepts, s.batched)
	assert.Equal(t, 1, s.batches)
}

// The sender drops a call that may be shed and whose context ended while
// it was queued, answering it as not sent; a MustSend call in the same
// state is sent.
func TestPipelineSenderDropsEndedCalls(t *testing.T) {
	m, admin, p := startMaster(t)
	occupied := occupy(t, m, p)
	ctx, cancel := context.WithCancel(context.Background())
	dropped := &waiter{reply: make(chan answer, 1)}
	sent := &waiter{reply: make(chan answer, 1)}
	p.Go(ctx, incrScript, NewKeys("dropped"), nil, Options{}, dropped)
	p.Go(ctx, incrScript, NewKeys("sent"), nil, Options{MustSend: true}, sent)
	require.Equal(t, 2, queueLen(p))
	cancel()
	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-occupied)

	a := <-dropped.reply
	assert.ErrorIs(t, a.err, ErrNotSent)
	assert.ErrorIs(t, a.err, context.Canceled)
	a = <-sent.reply
	assert.NoError(t, a.err)
	assert.Equal(t, int64(1), a.val)
	assert.Zero(t, getInt(t, admin, "dropped"))
	assert.Equal(t, int64(1), getInt(t, admin, "sent"))
	s := statsOf(p)
	assert.Equal(t, 1, s.dropped)
	assert.Equal(t, 2, s.alone, "the occupying call, then the one left")
	assert.Zero(t, p.loose)
}

// On an idle master, a call whose context has already ended is not sent,
// unless it is mustSend: that one is sent after all.
func TestPipelineEndedContextOnIdleMaster(t *testing.T) {
	_, admin, p := startMaster(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Run(ended, incrScript, NewKeys("loose"), nil, false)
	assert.ErrorIs(t, err, ErrNotSent)
	assert.ErrorIs(t, err, context.Canceled)

	v, err := p.Run(ended, incrScript, NewKeys("must"), nil, true)
	if err != nil { // the reply may also have come first
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrNotSent)
	} else {
		assert.Equal(t, int64(1), v)
	}
	poll(t, 5*time.Second, "mustSend call applied", func() bool { return getInt(t, admin, "must") == 1 })
	poll(t, 5*time.Second, "idle", func() bool { return idle(p) })
	assert.Zero(t, getInt(t, admin, "loose"))
	s := statsOf(p)
	assert.Equal(t, 1, s.alone, "the mustSend call")
	assert.Zero(t, s.batched)
}

// After SCRIPT FLUSH, a batch whose calls all meet NOSCRIPT is sent again as
// EVAL in one more write, and every call gets its own reply.
func TestPipelineNoScriptInBatch(t *testing.T) {
	m, admin, p := startMaster(t)
	_, err := p.Run(t.Context(), echoScript, Keys{}, []any{1}, false)
	require.NoError(t, err)
	require.NoError(t, admin.ScriptFlush(t.Context()).Err())
	exists, err := admin.ScriptExists(t.Context(), echoScript.Hash()).Result()
	require.NoError(t, err)
	require.Equal(t, []bool{false}, exists)

	occupied := occupy(t, m, p)
	const n = 10
	echoAll(t, p, n, 500, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == n })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	s := statsOf(p)
	assert.Equal(t, 1, s.batches)
	assert.Equal(t, 1, s.resent, "one EVAL write for the whole batch")
}

// Close waits for the queued calls (they are still sent), leaves no
// goroutine behind, and later calls are refused as not sent.
func TestPipelineCloseWaitsAndLeavesNothing(t *testing.T) {
	m, admin, p := startMaster(t)
	occupied := occupy(t, m, p)
	const n = 5
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, _ = p.Run(ctx, incrScript, NewKeys("k"), nil, true)
		})
	}
	poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == n })
	wg.Wait() // the callers left; their calls are queued

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	// Not a timing bound: Close must not return while calls are queued on
	// a paused master; 100ms would show a Close that does not wait.
	select {
	case <-closed:
		t.Fatal("Close returned while calls were queued")
	case <-time.After(100 * time.Millisecond):
	}
	_, err := p.Run(t.Context(), echoScript, Keys{}, []any{1}, true)
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, ErrNotSent)

	require.NoError(t, m.Resume(t.Context()))
	select {
	case <-closed:
	case <-time.After(testLimit):
		t.Fatal("Close did not return after Resume")
	}
	require.NoError(t, <-occupied)
	// Close returns when the sender has called senderWG.Done: its
	// goroutine ends right after, so give it a moment.
	poll(t, time.Second, "sender gone after Close", func() bool { return goroutines() == 0 })
	assert.Equal(t, int64(n), getInt(t, admin, "k"), "calls queued before Close were sent")
}

// A client without Pipeline() runs each call with Script.Run.
func TestPipelineWithoutPipelining(t *testing.T) {
	_, _, pp := startMaster(t)
	p := New(struct{ redis.Scripter }{pp.client}, testLimit, 1)
	require.Nil(t, p.piper)
	echoAll(t, p, 16, 0, nil)
	v, err := p.Run(t.Context(), echoScript, Keys{}, []any{5}, true)
	require.NoError(t, err)
	assert.Equal(t, int64(5), v, "a mustSend call")
	assert.Equal(t, stats{}, statsOf(p))
	p.Close()
	_, err = p.Run(t.Context(), echoScript, Keys{}, []any{1}, false)
	assert.ErrorIs(t, err, ErrClosed)
}

// Ordered: only a client that pipelines through a lane keeps the calls of
// one key in order; a ring's and a cluster client's go through workers.
func TestOrdered(t *testing.T) {
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	for _, c := range []struct {
		client  redis.Scripter
		ordered bool
	}{
		{one, true},
		{struct{ redis.Scripter }{one}, false},
		{ring, false},
		{cluster, false},
	} {
		p := New(c.client, testLimit, 1)
		assert.Equal(t, c.ordered, p.Ordered(), "%T", c.client)
		p.Close()
	}
	for _, c := range []interface{ Close() error }{one, ring, cluster} {
		require.NoError(t, c.Close())
	}
}

// BenchmarkPipeline compares plain Script.Run with the pipeline, each op
// running one script call on every master in parallel (as a round does),
// from 1, 16 and 64 goroutines.
func BenchmarkPipeline(b *testing.B) {
	for _, masters := range []int{1, 5} {
		cluster := harness.NewProcessCluster(b, masters, harness.ProcessOptions{})
		clients := cluster.Clients()
		for _, g := range []int{1, 16, 64} {
			for _, mode := range []string{"plain", "pipeline"} {
				b.Run(fmt.Sprintf("masters=%d/goroutines=%d/%s", masters, g, mode), func(b *testing.B) {
					runners := make([]func(context.Context, Keys, []any) (int64, error), masters)
					var pipes []*Pipeline
					for i, cl := range clients {
						if mode == "plain" {
							runners[i] = func(ctx context.Context, keys Keys, args []any) (int64, error) {
								return benchScript.Run(ctx, cl, keys.Names, args...).Int64()
							}
							continue
						}
						p := New(cl, time.Second, 1)
						defer p.Close()
						pipes = append(pipes, p)
						runners[i] = func(ctx context.Context, keys Keys, args []any) (int64, error) {
							return p.Run(ctx, benchScript, keys, args, false)
						}
					}
					benchRounds(b, g, runners)
					if len(pipes) > 0 {
						var sum stats
						for _, p := range pipes {
							s := statsOf(p)
							sum.alone += s.alone
							sum.batches += s.batches
							sum.batched += s.batched
						}
						b.ReportMetric(float64(sum.batched)/float64(max(sum.batches, 1)), "calls/batch")
						b.ReportMetric(float64(sum.alone)/float64(sum.alone+sum.batched), "alone/call")
					}
				})
			}
		}
	}
}

var benchScript = redis.NewScript("redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return 1")

// benchRounds runs b.N rounds from g goroutines; a round calls every runner
// in parallel and waits for all.
func benchRounds(b *testing.B, g int, runners []func(context.Context, Keys, []any) (int64, error)) {
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			keys := NewKeys("bench:" + strconv.Itoa(w))
			args := []any{"value-" + strconv.Itoa(w)}
			var round sync.WaitGroup
			for next.Add(1) <= int64(b.N) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				for _, run := range runners[1:] {
					round.Go(func() {
						if _, err := run(ctx, keys, args); err != nil {
							failed.Add(1)
						}
					})
				}
				if _, err := runners[0](ctx, keys, args); err != nil {
					failed.Add(1)
				}
				round.Wait()
				cancel()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Errorf("%d calls failed", n)
	}
}

// With two lanes, each key's calls go through one lane, in the order they
// were made, while the lanes send their batches at once: calls queued
// behind a paused master reach it in order once it resumes, key by key.
func TestPipelineLanesKeepEachKeysOrder(t *testing.T) {
	m, admin, one := startMaster(t)
	p := New(one.client, testLimit, 2)
	t.Cleanup(p.Close)
	t.Cleanup(func() { _ = m.Resume(context.Background()) }) // before p.Close
	push := redis.NewScript("return redis.call('RPUSH', KEYS[1], ARGV[1])")
	keys := make([]Keys, 8)
	used := map[*lane]bool{}
	for i := range keys {
		keys[i] = NewKeys("list" + strconv.Itoa(i))
		used[p.laneOf(keys[i])] = true
	}
	require.Len(t, used, 2, "the keys spread over both lanes")

	require.NoError(t, m.Pause(t.Context()))
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n*len(keys))
	for j := range n {
		for i := range keys {
			wg.Add(1)
			p.Go(t.Context(), push, keys[i], []any{j}, Options{}, completion(func(_ int64, err error) {
				errs <- err
				wg.Done()
			}))
		}
	}
	// Both lanes have a call or a batch in flight to the paused master at
	// once (how many calls each took before the pause held it varies).
	poll(t, 5*time.Second, "sending on both lanes", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.lanes[0].sending && p.lanes[1].sending
	})
	require.NoError(t, m.Resume(t.Context()))
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := make([]string, n)
	for j := range want {
		want[j] = strconv.Itoa(j)
	}
	for i := range keys {
		got, err := admin.LRange(t.Context(), keys[i].Names[0], 0, -1).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "key %d", i)
	}
}

// completion is a func as a Completion.
type completion func(int64, error)

func (f completion) Complete(v int64, err error) { f(v, err) }

// A client that pipelines without being a go-redis type (a wrapper, say)
// batches too: its queued calls get their commands.
func TestPipelineWrappedClientBatches(t *testing.T) {
	m, _, one := startMaster(t)
	p := New(struct{ *redis.Client }{one.client.(*redis.Client)}, testLimit, 1)
	require.NotNil(t, p.piper)
	require.Nil(t, p.proc)
	t.Cleanup(p.Close)
	t.Cleanup(func() { _ = m.Resume(context.Background()) }) // before p.Close
	occupied := occupy(t, m, p)
	echoAll(t, p, 5, 10, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 5 })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	s := statsOf(p)
	assert.Equal(t, 1, s.batches)
	assert.Equal(t, 5, s.batched)
}

// A lane is behind only while it has in flight what it sent long enough
// ago: a lane woken for a call that its sender has not taken yet is not,
// however long the sender takes to run.
func TestPipelineLaneBehindOnlyWhileSending(t *testing.T) {
	p := New(&gatedScripter{}, testLimit, 1)
	ln, g := &p.lanes[0], new(Group)
	g.behind.Store(int64(time.Millisecond))
	p.mu.Lock()
	defer p.mu.Unlock()
	ln.busy, ln.busySince = true, time.Now().Add(-time.Hour)
	assert.False(t, ln.behindLocked(g), "woken, nothing sent")
	ln.sending = true
	assert.True(t, ln.behindLocked(g), "sent an hour ago")
	ln.busySince = time.Now()
	assert.False(t, ln.behindLocked(g), "sent just now")
}
