package pipeline

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// gatedScripter is a client that cannot pipeline: its script calls answer
// 1 at once, or, while gated, once the gate opens. It counts the calls
// that reached it.
type gatedScripter struct {
	redis.Scripter // only EvalSha and Eval are called

	mu      sync.Mutex
	gate    chan struct{}
	entered int
}

func (g *gatedScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	g.mu.Lock()
	g.entered++
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return redis.NewCmdResult(int64(1), nil)
}

func (g *gatedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return g.EvalSha(ctx, script, keys, args...)
}

func (g *gatedScripter) close(gate chan struct{}) {
	g.mu.Lock()
	g.gate = gate
	g.mu.Unlock()
}

func (g *gatedScripter) reached() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entered
}

// fanOut runs rounds of n calls at once, each round waiting for its calls.
func fanOut(t *testing.T, p *Pipeline, rounds, n int) {
	t.Helper()
	for range rounds {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, err := p.Run(t.Context(), echoScript, Keys{}, []any{1}, false)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
}

// A worker that has sent a call sends later ones: 100 rounds of 5 calls
// start a few workers, not 500, and Close ends every one. Calls made at
// once run at once, each on a worker.
func TestWorkersAreReused(t *testing.T) {
	g := &gatedScripter{}
	p := New(g, testLimit, 1)
	require.Nil(t, p.piper)
	fanOut(t, p, 100, 5)
	started := p.workers.started.Load()
	// Usually 5 to 10. A machine that stalls the workers while the test
	// goes on starts more; a worker per call would start 500.
	assert.LessOrEqual(t, started, int64(250), "workers started for 500 calls")

	gate := make(chan struct{})
	g.close(gate)
	var wg sync.WaitGroup
	wg.Go(func() { fanOut(t, p, 1, 5) })
	require.Eventually(t, func() bool { return g.reached() == 500+5 },
		5*time.Second, time.Millisecond, "5 calls made at once not all under way")
	close(gate)
	wg.Wait()
	p.Close()
	// Close returns once every worker is done: its goroutine ends right
	// after, so give it a moment.
	require.Eventually(t, func() bool { return goroutines() == 0 },
		time.Second, time.Millisecond, "workers left after Close")
	p.Close()
}

// Workers beyond maxIdle end instead of waiting.
func TestWorkersWaitingAreBounded(t *testing.T) {
	p := New(&gatedScripter{}, testLimit, 1)
	t.Cleanup(p.Close)
	p.workers.maxIdle = 2
	fanOut(t, p, 5, 8)
	// The bound leaves room for a busy machine.
	require.Eventually(t, func() bool { return goroutines() <= 2 },
		5*time.Second, 5*time.Millisecond, "more than 2 workers alive after 5s")
	assert.LessOrEqual(t, p.workers.idle.Load(), int32(2))
}

// runLabelled runs a call under the pprof label request=name and returns a
// channel that receives its error.
func runLabelled(p *Pipeline, name string) <-chan error {
	errc := make(chan error, 1)
	go pprof.Do(context.Background(), pprof.Labels("request", name), func(ctx context.Context) {
		_, err := p.Run(ctx, echoScript, Keys{}, []any{1}, false)
		errc <- err
	})
	return errc
}

// A worker sends each call under the labels of the goroutine that made it,
// as a goroutine started for the call would: CPU profiles stay per request.
func TestWorkersRunUnderTheCallersLabels(t *testing.T) {
	g := &gatedScripter{}
	p := New(g, testLimit, 1)
	t.Cleanup(p.Close)
	require.NoError(t, <-runLabelled(p, "first"))
	require.Eventually(t, func() bool { return p.workers.idle.Load() == 1 },
		5*time.Second, time.Millisecond, "no worker waiting after 5s")

	gate := make(chan struct{})
	g.close(gate)
	second := runLabelled(p, "second")
	require.Eventually(t, func() bool { return g.reached() == 2 },
		5*time.Second, time.Millisecond, "the second call never reached the master")
	labels := harness.GoroutineLabels(t, "gatedScripter).EvalSha")
	close(gate)
	require.NoError(t, <-second)
	assert.Equal(t, int64(1), p.workers.started.Load(), "the waiting worker sent the second call")
	assert.Equal(t, []string{`# labels: {"request":"second"}`}, labels)
}

// The sender sends a call alone under the labels of the goroutine that
// made it, whoever started the sender.
func TestSenderRunsUnderTheCallersLabels(t *testing.T) {
	m, _, p := startMaster(t)
	require.NoError(t, <-runLabelled(p, "first"))
	require.NoError(t, m.Pause(t.Context()))
	second := runLabelled(p, "second")
	poll(t, 5*time.Second, "sending the second call", func() bool { return statsOf(p).alone == 2 })
	labels := harness.GoroutineLabels(t, "pipeline.(*lane).sender+")
	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-second)
	assert.Equal(t, []string{`# labels: {"request":"second"}`}, labels)
}

// A master that cannot pipeline and does not answer holds at most
// maxQueued calls that may be shed, each on a worker: later ones are
// refused at once with ErrQueueFull, and a call that must be sent is
// still sent. Once the master answers, calls are taken again.
func TestWorkersAreBoundedForASlowMaster(t *testing.T) {
	g := &gatedScripter{}
	p := New(g, testLimit, 1)
	t.Cleanup(p.Close)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before p.Close, which waits for the workers
	g.close(gate)
	errs := make(chan error, maxQueued+1)
	for range maxQueued {
		go func() {
			_, err := p.Run(context.Background(), echoScript, Keys{}, []any{1}, false)
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return g.reached() == maxQueued },
		10*time.Second, time.Millisecond, "the calls on their way")
	// Refused at once; sent, it would wait for the gate until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Run(ctx, echoScript, Keys{}, []any{1}, false)
	require.ErrorIs(t, err, ErrQueueFull)
	assert.ErrorIs(t, err, ErrNotSent)
	go func() {
		_, err := p.Run(context.Background(), echoScript, Keys{}, []any{1}, true)
		errs <- err
	}()
	require.Eventually(t, func() bool { return g.reached() == maxQueued+1 },
		10*time.Second, time.Millisecond, "the call that must be sent was not")
	assert.Equal(t, int64(maxQueued+1), p.workers.started.Load())
	open()
	for range maxQueued + 1 {
		require.NoError(t, <-errs)
	}
	g.close(nil)
	_, err = p.Run(context.Background(), echoScript, Keys{}, []any{1}, false)
	require.NoError(t, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Zero(t, p.loose)
}

// A cluster client or a ring sends through workers too, but its calls go
// to several servers, each answering on its own: one shard that hangs
// must not shed the calls to the others (review), so no bound applies.
func TestShardedClientsAreNotBounded(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, DialerRetries: 1})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, DialerRetries: 1})
	for name, client := range map[string]redis.Scripter{"ring": ring, "cluster": cluster} {
		p := New(client, testLimit, 1)
		p.mu.Lock()
		p.loose = maxQueued // as if that many calls were under way
		p.mu.Unlock()
		_, err := p.Run(t.Context(), echoScript, NewKeys("k"), []any{1}, false)
		require.Error(t, err, name) // nothing listens there
		assert.NotErrorIs(t, err, ErrQueueFull, name)
		p.Close()
		require.NoError(t, client.(interface{ Close() error }).Close())
	}
}
