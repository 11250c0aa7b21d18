package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/quorum"
)

// flakyMaster is a fakeMaster whose next release calls fail without
// reaching it, as when a request is lost or times out before it is sent.
type flakyMaster struct {
	*fakeMaster
	fails atomic.Int32 // release calls still to fail
	reply bool         // they fail with an error reply, not a timeout
}

// errorReply is an error reply of a server, as go-redis reports one.
type errorReply string

func (e errorReply) Error() string { return string(e) }
func (errorReply) RedisError()     {}

func (f *flakyMaster) failure() *redis.Cmd {
	if f.reply {
		return redis.NewCmdResult(nil, errorReply("READONLY You can't write against a read only replica."))
	}
	return redis.NewCmdResult(nil, context.DeadlineExceeded)
}

func (f *flakyMaster) lost(name string) bool {
	return name == "release" && f.fails.Add(-1) >= 0
}

func (f *flakyMaster) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.lost(scriptName(sha)) {
		return f.failure()
	}
	return f.fakeMaster.EvalSha(ctx, sha, keys, args...)
}

func (f *flakyMaster) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if f.lost(scriptName(redis.NewScript(src).Hash())) {
		return f.failure()
	}
	return f.fakeMaster.Eval(ctx, src, keys, args...)
}

// withFlaky returns fs as Scripters, master i made flaky.
func withFlaky(fs []*fakeMaster, i int) ([]redis.Scripter, *flakyMaster) {
	out := make([]redis.Scripter, len(fs))
	for j, f := range fs {
		out[j] = f
	}
	fl := &flakyMaster{fakeMaster: fs[i]}
	out[i] = fl
	return out, fl
}

func held(f *fakeMaster) bool {
	_, ok := f.get("{k}")
	return ok
}

func TestUndoIsRetriedWithEvalUntilTheMasterAnswers(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[:3] {
		f.set("{k}", "someone-else")
	}
	masters, fl := withFlaky(fs, 3)
	fl.fails.Store(3) // the first undo and two retries
	c, err := New(masters, &Options{MasterTimeout: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	_, err = c.Acquire(context.Background(), "k", time.Hour)
	require.ErrorIs(t, err, ErrNotObtained)
	require.Eventually(t, func() bool { return !held(fs[3]) && !held(fs[4]) }, 5*time.Second, time.Millisecond, "undo retried")
	assert.Equal(t, []string{"acquire", "EVAL", "release"}, fs[3].callNames(),
		"the lost EVALSHA was retried as EVAL: the master may have lost its script cache")
	assert.Equal(t, []string{"acquire", "release"}, fs[4].callNames())
}

// fakeAnswerTimeout is the MasterTimeout of the tests whose rounds must
// be decided by fakes that answer: an in-process fake answers at once, but
// a race build on a busy machine missed 10ms (the Release of
// TestLastReleaseIsRetriedWhereItGotNoAnswer: "master0: no reply within
// the master timeout"). A cleanup's retries come 0.5-1 MasterTimeout apart.
const fakeAnswerTimeout = 200 * time.Millisecond

func TestLastReleaseIsRetriedWhereItGotNoAnswer(t *testing.T) {
	fs := fakes(3)
	masters, fl := withFlaky(fs, 2)
	c, err := New(masters, &Options{MasterTimeout: fakeAnswerTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	l, err := c.Acquire(context.Background(), "k", time.Hour)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return held(fs[0]) && held(fs[1]) && held(fs[2]) }, 5*time.Second, time.Millisecond,
		"the calls after the decision go on")

	fl.fails.Store(2)
	require.NoError(t, l.Release(context.Background()), "two of three deleted it")
	require.Eventually(t, func() bool { return !held(fs[2]) }, 5*time.Second, time.Millisecond, "release retried")
}

func TestCloseRetriesPendingCleanupAtOnce(t *testing.T) {
	fs := fakes(3)
	fs[0].set("{k}", "someone-else")
	fs[1].set("{k}", "someone-else")
	masters, fl := withFlaky(fs, 2)
	fl.fails.Store(1)
	// The first retry would come after 0.5-1h.
	c, err := New(masters, &Options{MasterTimeout: time.Hour})
	require.NoError(t, err)
	_, err = c.Acquire(context.Background(), "k", 4*time.Hour)
	require.ErrorIs(t, err, ErrNotObtained)
	require.Eventually(t, func() bool { return fl.fails.Load() == 0 }, 5*time.Second, time.Millisecond, "the first undo was lost")
	require.True(t, held(fs[2]))

	start := time.Now()
	require.NoError(t, c.Close())
	assert.Less(t, time.Since(start), time.Minute, "Close waited for the retry's timer")
	assert.False(t, held(fs[2]), "Close retried the pending undo")
}

func TestCloseGivesUpOnUnreachableMaster(t *testing.T) {
	const masterTimeout = 20 * time.Millisecond
	fs := fakes(3)
	fs[0].set("{k}", "someone-else")
	fs[1].set("{k}", "someone-else")
	masters, fl := withFlaky(fs, 2)
	fl.fails.Store(1 << 30)
	c, err := New(masters, &Options{MasterTimeout: masterTimeout})
	require.NoError(t, err)
	_, err = c.Acquire(context.Background(), "k", time.Hour)
	require.ErrorIs(t, err, ErrNotObtained)

	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	// Close waits 4*MasterTimeout (80ms), then cancels; the fake answers at
	// once. 1s leaves a wide margin for a loaded machine.
	assert.GreaterOrEqual(t, took, lateCallFactor*masterTimeout, "Close gave the retries their grace")
	assert.Less(t, took, time.Second)
	assert.True(t, held(fs[2]), "never reached")
	// TestMain checks that no retry goroutine is left.
}

// TestCleanupIsRetriedUntilTheKeyExpires: a master loses the last release
// many times over (it is down); the release is retried until the master
// answers, however many tries that takes, as long as the key may exist.
// 100 tries 0.1-0.2s apart take about 15s: bound 40s.
func TestCleanupIsRetriedUntilTheKeyExpires(t *testing.T) {
	_, fl := releaseLostOn(t, time.Hour, false)
	require.Eventually(t, func() bool { return fl.fails.Load() < 1<<30-100 }, 40*time.Second, time.Millisecond,
		"100 tries, far more than any fixed number")
	fl.fails.Store(0)
	require.Eventually(t, func() bool { return !held(fl.fakeMaster) }, 5*time.Second, time.Millisecond,
		"the release got through")
}

// TestReleaseIsRetriedForTheLongestTTLSent: an Extend to a longer TTL
// fails but reaches one master, whose key may then live that long. The last
// release, lost there, is retried past the Lock's own TTL.
func TestReleaseIsRetriedForTheLongestTTLSent(t *testing.T) {
	t.Cleanup(func(d time.Duration) func() { return func() { quorum.MaxCleanupDelay = d } }(quorum.MaxCleanupDelay))
	quorum.MaxCleanupDelay = 10 * time.Millisecond
	const ttl = time.Second // Extend must come within it; 4*MasterTimeout at least
	fs := fakes(3)
	masters, fl := withFlaky(fs, 2)
	c, err := New(masters, &Options{MasterTimeout: fakeAnswerTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) }) // before quorum.MaxCleanupDelay is restored
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", ttl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return held(fs[0]) && held(fs[1]) && held(fs[2]) }, 5*time.Second, time.Millisecond,
		"the calls after the decision go on")

	setErr := func(err error) {
		for _, f := range fs[:2] {
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
		}
	}
	setErr(assert.AnError)
	require.ErrorIs(t, l.Extend(ctx, time.Hour), ErrNoQuorum, "only master 2 agreed: its key may now live an hour")
	setErr(nil)
	fl.fails.Store(1 << 30)
	require.NoError(t, l.Release(ctx), "masters 0 and 1 deleted it")
	time.Sleep(2 * ttl) // past the Lock's first TTL
	fl.fails.Store(0)
	require.Eventually(t, func() bool { return !held(fs[2]) }, 5*time.Second, time.Millisecond,
		"the release was still retried on master 2")
}

// releaseLostOn acquires k on three fakes for ttl, makes master 2 lose every
// release (with error replies if reply), and releases. It returns the
// client and master 2.
func releaseLostOn(t *testing.T, ttl time.Duration, reply bool) (*Client, *flakyMaster) {
	t.Helper()
	t.Cleanup(func(d time.Duration) func() { return func() { quorum.MaxCleanupDelay = d } }(quorum.MaxCleanupDelay))
	quorum.MaxCleanupDelay = 10 * time.Millisecond
	fs := fakes(3)
	masters, fl := withFlaky(fs, 2)
	fl.reply = reply
	c, err := New(masters, &Options{MasterTimeout: fakeAnswerTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) }) // before quorum.MaxCleanupDelay is restored
	l, err := c.Acquire(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return held(fs[0]) && held(fs[1]) && held(fs[2]) }, 5*time.Second, time.Millisecond,
		"the calls after the decision go on")
	fl.fails.Store(1 << 30)
	require.NoError(t, l.Release(context.Background()), "two of three deleted it")
	return c, fl
}

// assertCleanerStops checks that master i's cleaner retried and then
// stopped for good. The most it waits for is quorum.MaxErrorReplies
// retries 0.1-0.2s apart, about 5s: bound 20s.
func assertCleanerStops(t *testing.T, c *Client, i int, fl *flakyMaster) {
	t.Helper()
	require.Eventually(t, func() bool {
		return !c.engine.Retrying(i) && fl.fails.Load() < 1<<30-1 // the first try and one retry at least
	}, 20*time.Second, time.Millisecond, "the cleaner stopped")
	left := fl.fails.Load()
	time.Sleep(2 * fakeAnswerTimeout) // longer than a retry's wait
	assert.Equal(t, left, fl.fails.Load(), "no try after it stopped")
}

// TestCleanupStopsOnceTheKeyHasExpired: a release lost on a master that
// never answers is retried until the key has expired there, and no longer.
func TestCleanupStopsOnceTheKeyHasExpired(t *testing.T) {
	c, fl := releaseLostOn(t, time.Second, false)
	assertCleanerStops(t, c, 2, fl)
}

// TestCleanupStopsAfterErrorReplies: a master that answers a release with
// an error reply (it became a replica, say) gets quorum.MaxErrorReplies tries, not
// a retry every second for the key's hour.
func TestCleanupStopsAfterErrorReplies(t *testing.T) {
	c, fl := releaseLostOn(t, time.Hour, true)
	assertCleanerStops(t, c, 2, fl)
	assert.Equal(t, int32(1<<30-1-quorum.MaxErrorReplies), fl.fails.Load(), "the first try, then quorum.MaxErrorReplies retries")
}

// proxiedMaster answers every acquire with an error reply a proxy gives
// for a call it forwarded and gave up on (twemproxy's server timeout), and
// records the arguments of the releases it gets.
type proxiedMaster struct {
	*fakeMaster
	mu       sync.Mutex
	releases [][]any
}

func (p *proxiedMaster) call(ctx context.Context, name string, keys []string, args []any) *redis.Cmd {
	switch name {
	case "acquire":
		return redis.NewCmdResult(nil, errorReply("ERR Connection timed out"))
	case "release":
		p.mu.Lock()
		p.releases = append(p.releases, slices.Clone(args))
		p.mu.Unlock()
	}
	return p.fakeMaster.run(ctx, name, keys, args)
}

func (p *proxiedMaster) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.call(ctx, scriptName(sha), keys, args)
}

func (p *proxiedMaster) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return p.call(ctx, scriptName(redis.NewScript(src).Hash()), keys, args)
}

// TestErrorReplyIsDroppedWithAMarker: an acquire answered with an error
// reply may still land (a proxy forwarded it), so what drops it there, the
// undo of a failed round or the drop of a late agreement after a
// successful one, leaves the release marker (ARGV[7]) if it finds nothing:
// otherwise the acquire, landing after it, would keep the lock, held by
// nobody, for its TTL.
func TestErrorReplyIsDroppedWithAMarker(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held-elsewhere=%v", held), func(t *testing.T) {
			fs := fakes(3)
			if held {
				fs[1].set("{k}", "someone-else")
				fs[2].set("{k}", "someone-else")
			}
			p := &proxiedMaster{fakeMaster: fs[0]}
			c, err := New([]redis.Scripter{p, fs[1], fs[2]}, &Options{MasterTimeout: time.Second})
			require.NoError(t, err)
			l, err := c.Acquire(context.Background(), "k", 10*time.Second)
			if held {
				require.ErrorIs(t, err, ErrNotObtained)
			} else {
				require.NoError(t, err, "masters 1 and 2 agreed")
				require.NoError(t, l.Release(context.Background()))
			}
			require.NoError(t, c.Close())
			p.mu.Lock()
			defer p.mu.Unlock()
			require.NotEmpty(t, p.releases, "the acquire may have applied: it is dropped")
			marked := slices.ContainsFunc(p.releases, func(args []any) bool { return len(args) == 7 })
			assert.True(t, marked, "no drop leaves a marker: %v", p.releases)
		})
	}
}

// TestReleaseMarkerLastsTheLongestTTL: the marker that refuses an
// acquire landing late lasts as long as that acquire's lock would, even
// after an Extend to a shorter TTL (a review found it kept for the
// shorter one: the acquire, landing after it lapsed, kept the lock, held
// by nobody, for its whole TTL).
func TestReleaseMarkerLastsTheLongestTTL(t *testing.T) {
	fs := fakes(3)
	p := &proxiedMaster{fakeMaster: fs[0]} // its acquire's outcome is unknown
	c, err := New([]redis.Scripter{p, fs[1], fs[2]}, &Options{MasterTimeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err, "masters 1 and 2 agreed")
	require.NoError(t, l.Extend(ctx, 2*time.Second))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	p.mu.Lock()
	defer p.mu.Unlock()
	marked := 0
	for _, args := range p.releases {
		if len(args) == 7 {
			marked++
			assert.Equal(t, int64(10000), args[1], "the marker's TTL (ms)")
		}
	}
	assert.Positive(t, marked, "no release left a marker: %v", p.releases)
}

// TestCloseLeavesNoTimerArmed: the last round's cancelled entry stays
// queued for the timer to drop; Close stops the timer instead, so that
// nothing of the Client runs after it returns (review).
func TestCloseLeavesNoTimerArmed(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: time.Second})
	l, err := c.Acquire(context.Background(), "k", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	require.NoError(t, c.Close())
	assert.True(t, c.engine.Quiet(), "a deadline timer armed, or entries queued, after Close")
}
