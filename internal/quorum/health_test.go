package quorum

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// testHealth returns the health of five masters, three of which make a
// quorum.
func testHealth() *health { return newHealth(5, 3, time.Millisecond) }

// within fails the test unless done is closed within a generous bound.
// The bound only keeps a broken test from hanging.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

// A master is silent after SilentAfter misses in a row. An answer in
// between starts the count again.
func TestSilentAfterMissesInARow(t *testing.T) {
	h := testHealth()
	for range SilentAfter - 1 {
		h.missed(1, time.Now())
	}
	h.heard(1)
	for range SilentAfter - 1 {
		h.missed(1, time.Now())
	}
	assert.False(t, h.isSilent(1), "an answer came between the misses")
	h.missed(1, time.Now())
	assert.True(t, h.isSilent(1))
	assert.Equal(t, uint64(1<<1), h.silentSet())
	h.missed(1, time.Now()) // silent already: nothing changes
	assert.Equal(t, uint64(1<<1), h.silentSet())
}

// At most masters - quorum masters are silent at once. So a round still
// waits for enough masters to make a quorum when all are slow.
func TestAtMostMastersMinusQuorumSilent(t *testing.T) {
	h := testHealth()
	for i := range 5 {
		for range SilentAfter {
			h.missed(i, time.Now())
		}
	}
	assert.Equal(t, uint64(0b11), h.silentSet(), "the first two only: 5 masters, quorum 3")
	h.heard(0)
	assert.Equal(t, uint64(0b10), h.silentSet())
	h.missed(4, time.Now()) // its misses went on: it takes the free place
	assert.Equal(t, uint64(0b10010), h.silentSet())

	one := newHealth(3, 3, time.Millisecond)
	for range 2 * SilentAfter {
		one.missed(0, time.Now())
	}
	assert.Zero(t, one.silentSet(), "a quorum of all masters: none may be silent")
}

// proto is an error reply of the server.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}

// recv receives from c within a generous bound.
func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
		panic("unreachable")
	}
}

// fakeMaster is a redis.Scripter whose script calls reply reply, or wait
// while stalled until their context ends. Its SCRIPT EXISTS fails, as a
// ClusterClient's does with one shard down: nothing may depend on it.
type fakeMaster struct {
	reply   int64
	calls   atomic.Int32 // script calls received
	mu      sync.Mutex
	stalled chan struct{} // closed when the stall ends; nil: not stalled
}

func (f *fakeMaster) stall() {
	f.mu.Lock()
	f.stalled = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeMaster) resume() {
	f.mu.Lock()
	close(f.stalled)
	f.stalled = nil
	f.mu.Unlock()
}

// stall stalls f, and returns resume, which ends the stall once. The
// test's cleanup ends it otherwise, before the pipelines close.
func stall(t *testing.T, f *fakeMaster) (resume func()) {
	f.stall()
	var once sync.Once
	resume = func() { once.Do(f.resume) }
	t.Cleanup(resume)
	return resume
}

// wait waits while f is stalled, or until ctx ends.
func (f *fakeMaster) wait(ctx context.Context) error {
	f.mu.Lock()
	stalled := f.stalled
	f.mu.Unlock()
	if stalled == nil {
		return nil
	}
	select {
	case <-stalled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeMaster) run(ctx context.Context) *redis.Cmd {
	f.calls.Add(1)
	cmd := redis.NewCmd(ctx)
	if err := f.wait(ctx); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	cmd.SetVal(f.reply)
	return cmd
}

func (f *fakeMaster) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.run(ctx)
}

func (f *fakeMaster) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.run(ctx)
}

func (f *fakeMaster) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.run(ctx)
}

func (f *fakeMaster) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.run(ctx)
}

func (f *fakeMaster) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(nil, errors.New("dial tcp 10.0.0.9:6379: connect: connection refused"))
}

func (f *fakeMaster) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// A split vote (two agree, two refuse) with a fifth master stalled waits
// for it until the deadline: the stalled master may still agree. After
// SilentAfter such rounds the master is silent. Rounds then decide
// without it, before the deadline, and do not send it the calls that may
// be shed (no canary is due within the hour). It never counts as
// agreeing. Once its calls are answered, in time, rounds count it again.
// The test counts; it times nothing. The master timeout is an hour: a
// round that waited for the stalled master would hang the test until the
// caller's context ends it.
func TestRoundDoesNotWaitForSilentMaster(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := testEngine(t, fakes)
	e.health.every = time.Hour
	spec := &Spec{
		Script: redis.NewScript("return 1"),
		Keys:   pipeline.NewKeys("k"),
		Send:   Send{Withdraw: true},
	}
	resume := stall(t, fakes[0])

	// The deadline is an hour away. The test brings it forward, once the
	// four other masters answered: expireAll stands for it.
	for i := range SilentAfter {
		counted := &countAnswers{want: 4, done: make(chan struct{})}
		spec.Policy = counted
		type result struct {
			res Outcome
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := e.Do(context.Background(), spec)
			done <- result{res, err}
		}()
		within(t, counted.done, "the four other masters answer")
		expireAll(&e.decisions)
		got := recv(t, done)
		require.NoError(t, got.err)
		res := got.res
		assert.True(t, res.TimedOut, "round %d waited for the stalled master", i)
		assert.False(t, res.OK)
		assert.False(t, res.Master(0).Heard)
		assert.False(t, res.Master(0).Silent, "round %d: not silent yet", i)
	}
	spec.Policy = nil
	require.True(t, e.health.isSilent(0), "silent after %d rounds without an answer", SilentAfter)
	sent := fakes[0].calls.Load()

	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := e.Do(ctx, spec)
		require.NoError(t, ctx.Err(), "the round waited for the silent master")
		cancel()
		require.NoError(t, err)
		assert.False(t, res.TimedOut)
		assert.False(t, res.OK, "two agreements and a silent master are no quorum")
		r := res.Master(0)
		assert.True(t, r.Silent)
		assert.False(t, r.Agreed)
		assert.ErrorIs(t, r.Err, ErrSilent)
		assert.ErrorIs(t, r.Err, pipeline.ErrNotSent)
	}
	assert.Equal(t, sent, fakes[0].calls.Load(), "acquires were sent to the silent master")

	// A call its pipeline skips is answered 0 without asking the master:
	// that is no answer from it.
	skipped := &Spec{Script: spec.Script, Keys: spec.Keys, Send: Send{Must: true, Skip: skipMaster(0)}}
	_, err := e.Do(context.Background(), skipped)
	require.NoError(t, err)
	assert.True(t, e.health.isSilent(0), "a skipped call made the silent master healthy")
	assert.Equal(t, sent, fakes[0].calls.Load())

	resume()
	// The stalled calls are answered now, before their rounds' deadline.
	for start := time.Now(); e.health.isSilent(0); time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 10*time.Second, "no answer brought the master back")
	}
	res, err := e.Do(context.Background(), spec)
	require.NoError(t, err)
	assert.True(t, res.OK, "the master is back and agrees")
	assert.True(t, res.Master(0).Agreed, "no quorum without it")
}

// skipMaster is a pipeline.Skipper that skips the call to one master.
type skipMaster int

func (m skipMaster) Skip(i int) bool { return i == int(m) }

// countAnswers is a Policy that closes done once want masters answered.
type countAnswers struct {
	NoHooks
	want int
	n    atomic.Int32
	done chan struct{}
}

func (c *countAnswers) Answered(context.Context, int, Answer) {
	if int(c.n.Add(1)) == c.want {
		close(c.done)
	}
}

// expireAll expires every entry pending in t now, as if its time had
// come.
func expireAll(t *timeouts) {
	t.mu.Lock()
	var due []expirer
	for _, p := range t.queue[t.first:] {
		if p.e != nil {
			due = append(due, p.e)
		}
	}
	t.mu.Unlock()
	for _, e := range due {
		e.expire()
	}
}

// testEngine returns an Engine of fakes, three of which make a quorum.
// Its master timeout is an hour: a round that waits for a stalled master
// hangs until the test expires it (expireAll). Its Stop and the
// pipelines' Close run at cleanup.
func testEngine(t *testing.T, fakes []*fakeMaster) *Engine {
	masters := make([]Master, len(fakes))
	for i, f := range fakes {
		masters[i] = Master{Client: f, Pipe: pipeline.New(f, time.Hour, 1)}
	}
	e := New(Config{Quorum: 3, MasterTimeout: time.Hour, Work: newWork()}, masters)
	e.health.every = time.Millisecond
	t.Cleanup(func() {
		for _, m := range masters {
			m.Pipe.Close()
		}
		e.Stop()
	})
	return e
}

// The misses of rounds that began before the last miss counted are one
// stall: they count once.
func TestMissesOfOneStallCountOnce(t *testing.T) {
	h := testHealth()
	began := time.Now()
	for range SilentAfter {
		h.missed(0, began)
	}
	assert.Equal(t, int32(1), h.misses[0].Load(), "rounds in flight during one stall")
	assert.False(t, h.isSilent(0))
	for range SilentAfter - 1 {
		h.missed(0, time.Now()) // each began after the last miss
	}
	assert.True(t, h.isSilent(0), "silent after %d stalls", SilentAfter)
}

// SilentAfter concurrent rounds that one stall of master 0 hits miss it
// once. Before the fix each counted: the master was silent at once.
func TestConcurrentRoundsInOneStallMissOnce(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := testEngine(t, fakes)
	fakes[0].stall()
	defer fakes[0].resume()
	var wg sync.WaitGroup
	var dones []chan struct{}
	for k := range SilentAfter {
		c := &countAnswers{want: 4, done: make(chan struct{})}
		dones = append(dones, c.done)
		spec := &Spec{
			Script: redis.NewScript("return 1"),
			Keys:   pipeline.NewKeys(string(rune('a' + k))),
			Send:   Send{Withdraw: true},
			Policy: c,
		}
		wg.Go(func() {
			res, err := e.Do(context.Background(), spec)
			assert.NoError(t, err)
			assert.True(t, res.TimedOut, "the round waited for master 0")
		})
	}
	for _, d := range dones {
		within(t, d, "the four other masters answer")
	}
	expireAll(&e.decisions) // one deadline for all: one stall
	wg.Wait()
	assert.Equal(t, int32(1), e.health.misses[0].Load())
	assert.False(t, e.health.isSilent(0), "one stall made master 0 silent")
}

// silence makes master i of e silent, with no call of its in flight.
func silence(t *testing.T, e *Engine, i int) {
	t.Helper()
	for range SilentAfter {
		e.health.missed(i, time.Now())
	}
	require.True(t, e.health.isSilent(i))
}

// splitVote returns the spec of a round that masters 1 and 2 agree to,
// and 3 and 4 refuse (see the fakes of the tests). Its policy closes
// done once want masters answered, or were answered unsent.
func splitVote(key string, want int) (*Spec, *countAnswers) {
	c := &countAnswers{want: want, done: make(chan struct{})}
	return &Spec{
		Script: redis.NewScript("return 1"),
		Keys:   pipeline.NewKeys(key),
		Send:   Send{Withdraw: true},
		Policy: c,
	}, c
}

// A silent master whose SCRIPT EXISTS always fails comes back: a canary,
// an ordinary call, hears it. Before canaries, only a probe (SCRIPT
// EXISTS) or a release did: a ClusterClient with one shard down, or a
// Scripter without SCRIPT EXISTS, stayed silent for good.
func TestSilentMasterBackByCanary(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := testEngine(t, fakes)
	silence(t, e, 0)
	// A canary goes at most every millisecond. The bound only keeps a
	// broken test from hanging.
	for start := time.Now(); e.health.isSilent(0); {
		require.Less(t, time.Since(start), 10*time.Second, "no canary brought the master back")
		spec, answers := splitVote("k", 5)
		_, err := e.Do(context.Background(), spec)
		require.NoError(t, err)
		within(t, answers.done, "every master answers, or is answered unsent")
	}
	assert.NotZero(t, fakes[0].calls.Load())
	spec, _ := splitVote("k", 5)
	res, err := e.Do(context.Background(), spec)
	require.NoError(t, err)
	assert.True(t, res.OK, "the master is back and agrees")
	assert.True(t, res.Master(0).Agreed)
}

// A silent master gets one canary per interval, however many rounds run
// at once. The round does not wait for it. A canary answered before its
// round's deadline makes the master healthy again. The interval is an
// hour: the test makes the canary due by hand, and times nothing.
func TestSilentMasterGetsOneCanaryPerInterval(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := testEngine(t, fakes)
	e.health.every = time.Hour
	resume := stall(t, fakes[0])
	silence(t, e, 0)

	// rounds runs n split votes at once. It returns how many sent their
	// call to master 0: it was not answered unsent (ErrSilent).
	rounds := func(n int) (sent int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for k := range n {
			wg.Go(func() {
				spec, _ := splitVote(string(rune('a'+k)), 5)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err := e.Do(ctx, spec)
				assert.NoError(t, ctx.Err(), "the round waited for the silent master")
				assert.NoError(t, err)
				assert.False(t, res.OK)
				r := res.Master(0)
				assert.True(t, r.Silent)
				if !errors.Is(r.Err, ErrSilent) {
					assert.False(t, r.Heard, "the stalled master answered: %v", r.Err)
					mu.Lock()
					sent++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return sent
	}
	assert.Zero(t, rounds(20), "a canary went before its time")
	assert.Zero(t, fakes[0].calls.Load())

	e.health.next[0].Store(0) // the canary is due
	require.Equal(t, 1, rounds(20), "one canary per interval")
	assert.Zero(t, rounds(20), "the next canary is due an hour later")
	for start := time.Now(); fakes[0].calls.Load() == 0; time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 10*time.Second, "the canary never reached the master")
	}
	assert.Equal(t, int32(1), fakes[0].calls.Load())
	assert.True(t, e.health.isSilent(0), "a canary in flight is no answer")

	resume() // the canary is answered within its round's hour
	for start := time.Now(); e.health.isSilent(0); time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 10*time.Second, "the canary's answer did not bring the master back")
	}
}

// A call that must be sent still goes to a silent master: a release must
// reach every master that may hold the lock. Its answer in time makes
// the master healthy again.
func TestMustCallReachesSilentMaster(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := testEngine(t, fakes)
	e.health.every = time.Hour // no canary
	silence(t, e, 0)
	answers := &countAnswers{want: 5, done: make(chan struct{})}
	spec := &Spec{
		Script: redis.NewScript("return 1"),
		Keys:   pipeline.NewKeys("k"),
		Send:   Send{Must: true},
		Policy: answers,
	}
	_, err := e.Do(context.Background(), spec)
	require.NoError(t, err)
	within(t, answers.done, "every master answers")
	assert.Equal(t, int32(1), fakes[0].calls.Load(), "the release was not sent to the silent master")
	assert.False(t, e.health.isSilent(0), "its answer did not bring the master back")
}

// Any reply is an answer from the master, even an error reply. A timeout
// or a refused dial is none.
func TestAnswered(t *testing.T) {
	assert.True(t, answered(nil))
	assert.True(t, answered(proto("ERR some error reply")))
	assert.False(t, answered(context.DeadlineExceeded))
	assert.False(t, answered(ErrSilent))
}
