package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A mustSend call sent alone on an idle master is applied even when its
// caller's context ends while the call is in flight, and the caller still
// returns when its context ends, with ctx.Err() alone (the call may yet be
// applied). The master is paused, so the call waits in go-redis's
// connection set-up (the HELLO handshake) until Resume. Sent under the
// caller's context, it would fail there at the caller's deadline, before it
// is written, and never be applied; and go-redis does not watch
// cancellation there, so a caller whose context has no deadline would not
// return on cancel.
func TestPipelineMustSendAloneOutlivesCallerContext(t *testing.T) {
	for _, end := range []string{"cancel", "deadline"} {
		t.Run(end, func(t *testing.T) {
			m, admin, p := startMaster(t)
			require.NoError(t, m.Pause(t.Context()))

			// The deadline leaves time to see the call start: enough on a
			// busy machine; starting is what is polled.
			deadline := time.Now().Add(time.Second)
			var ctx context.Context
			var cancel context.CancelFunc
			if end == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithDeadline(context.Background(), deadline)
			}
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := p.Run(ctx, incrScript, NewKeys("must"), nil, true)
				errc <- err
			}()
			poll(t, 5*time.Second, "sending the call alone", func() bool { return statsOf(p).alone == 1 })
			if end == "cancel" {
				cancel()
			}

			// The caller must return when its context ends while the master
			// stays paused; testLimit only keeps a broken Run from hanging
			// the test.
			var err error
			select {
			case err = <-errc:
			case <-time.After(testLimit):
				t.Fatal("Run did not return when its context ended")
			}
			if end == "cancel" {
				assert.ErrorIs(t, err, context.Canceled)
			} else {
				// It returns at its deadline: not before, and within 1s
				// after it (the margin covers scheduling on a busy machine).
				late := time.Since(deadline)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.GreaterOrEqual(t, late, time.Duration(0))
				assert.Less(t, late, time.Second)
			}
			assert.NotErrorIs(t, err, ErrNotSent, "the call is in flight, not unsent")

			// Close waits for the call. Not a timing bound: 100ms would show
			// a Close that does not wait.
			closed := make(chan struct{})
			go func() { p.Close(); close(closed) }()
			select {
			case <-closed:
				t.Fatal("Close returned while a mustSend call was in flight")
			case <-time.After(100 * time.Millisecond):
			}
			require.NoError(t, m.Resume(t.Context()))
			select {
			case <-closed:
			case <-time.After(testLimit):
				t.Fatal("Close did not return after Resume")
			}
			assert.Equal(t, int64(1), getInt(t, admin, "must"), "mustSend call applied")
			poll(t, time.Second, "sender gone after Close", func() bool { return goroutines() == 0 })
		})
	}
}

// MustSend calls in a batch are applied even when their own deadline is
// earlier than the batch's end: the batch runs under limit. Here the
// occupying call fails at its deadline on the paused master, so the
// sender sends the queued mustSend calls while the master is still paused,
// on a connection that cannot be set up until Resume.
//
// The test passes whatever the timing. Detecting a batch run under the
// call's deadline needs the batch to have failed before Resume: the batch
// would end at the call's deadline, which the caller's return marks, and
// the test resumes 500ms after that (the margin covers a busy machine).
func TestPipelineMustSendInBatchOutlivesCallerDeadline(t *testing.T) {
	for _, how := range []string{"batch", "alone"} {
		t.Run(how, func(t *testing.T) { mustSendOutlivesCallerDeadline(t, how == "batch") })
	}
}

// mustSendOutlivesCallerDeadline is TestPipelineMustSendInBatchOutlivesCallerDeadline
// with two calls of Run, which go in a batch, or one call of Go, which
// goes alone, bounded as in a batch because it queued behind another.
func mustSendOutlivesCallerDeadline(t *testing.T, batch bool) {
	m, admin, p := startMaster(t)
	require.NoError(t, m.Pause(t.Context()))

	occupied := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := p.Run(ctx, otherScript, Keys{}, []any{0}, false)
		occupied <- err
	}()
	poll(t, 5*time.Second, "sending the occupying call", func() bool { return statsOf(p).alone == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	n := 1
	if batch {
		n = 2
	}
	must := make(chan error, n)
	for range n {
		go func() {
			var err error
			if batch {
				_, err = p.Run(ctx, incrScript, NewKeys("must"), nil, true)
			} else {
				_, err = goWait(ctx, p, incrScript, NewKeys("must"), Options{MustSend: true})
			}
			must <- err
		}()
	}
	poll(t, 5*time.Second, "the mustSend calls queued", func() bool { return queueLen(p) == n })

	// The occupying call fails at its deadline (a go-redis i/o timeout),
	// the mustSend caller returns at its own; testLimit keeps a broken Run
	// from hanging the test.
	select {
	case err := <-occupied:
		assert.Error(t, err)
	case <-time.After(testLimit):
		t.Fatal("the occupying call did not end at its deadline")
	}
	for range n {
		select {
		case err := <-must:
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, ErrNotSent, "the call is queued or in flight, not unsent")
		case <-time.After(testLimit):
			t.Fatal("Run did not return at its deadline")
		}
	}
	poll(t, 5*time.Second, "the mustSend calls sent", func() bool { return queueLen(p) == 0 })
	time.Sleep(500 * time.Millisecond)

	require.NoError(t, m.Resume(t.Context()))
	poll(t, 5*time.Second, "mustSend calls applied", func() bool { return getInt(t, admin, "must") == int64(n) })
	poll(t, 5*time.Second, "idle", func() bool { return idle(p) })
	if batch {
		assert.Equal(t, 2, statsOf(p).batched)
	} else {
		assert.Equal(t, 2, statsOf(p).alone, "the occupying call, then the mustSend call")
	}
}

// Abort answers every queued call ErrClosed, mustSend ones included, sends
// none of them, and returns once the call in flight has ended.
func TestPipelineAbortDropsQueuedCalls(t *testing.T) {
	m, admin, p := startMaster(t)
	occupied := occupy(t, m, p)
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := p.Run(context.Background(), incrScript, NewKeys("must"), nil, true)
			errs <- err
		}()
	}
	poll(t, 5*time.Second, "calls queued", func() bool { return queueLen(p) == n })

	aborted := make(chan struct{})
	go func() { p.Abort(); close(aborted) }()
	for range n {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, ErrClosed)
		case <-time.After(testLimit):
			t.Fatal("a queued call was not answered by Abort")
		}
	}
	// Not a timing bound: 100ms would show an Abort that does not wait.
	select {
	case <-aborted:
		t.Fatal("Abort returned while a call was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-occupied)
	select {
	case <-aborted:
	case <-time.After(testLimit):
		t.Fatal("Abort did not return after the call in flight ended")
	}
	assert.Zero(t, getInt(t, admin, "must"), "a dropped call was sent")
	_, err := p.Run(context.Background(), incrScript, NewKeys("must"), nil, true)
	assert.ErrorIs(t, err, ErrClosed)
}

// The calls that a take leaves in the queue, past maxBatch, wait behind
// the batch it took, even those queued while nothing was in flight (the
// sender yielding between batches): a MustSend one among them is bounded
// as in a batch when it goes alone, not by a deadline spent waiting.
func TestPipelineCallsLeftByATakeAreBehind(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	p := New(client, testLimit, 1)
	defer p.Close()
	ln := &p.lanes[0]
	p.mu.Lock()
	for range maxBatch + 2 {
		ln.queue = append(ln.queue, &call{ctx: context.Background(), Options: Options{MustSend: true}})
	}
	batch := slices.Clone(ln.takeLocked())
	left := slices.Clone(ln.queue)
	ln.queue, ln.batch = nil, nil
	p.mu.Unlock()
	require.Len(t, batch, maxBatch)
	require.Len(t, left, 2)
	for i, c := range batch {
		assert.False(t, c.queuedBehind, "call %d of the batch", i)
	}
	for i, c := range left {
		assert.True(t, c.queuedBehind, "call %d left queued", i)
	}
}

// A MustSend call whose context is past its deadline but does not say so
// yet (the engine's contexts end when a shared timer fires) is sent alone
// under a context bounded by limit, not under its own.
func TestPipelineMustSendPastItsDeadlineGetsTheLimit(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	p := New(client, testLimit, 1)
	defer p.Close()
	late := lateContext{context.Background(), time.Now().Add(-time.Millisecond)}
	ctx, cancel := p.sendContext(&call{ctx: late, Options: Options{MustSend: true}})
	require.NotNil(t, cancel, "a context of its own")
	defer cancel()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	assert.Greater(t, time.Until(d), testLimit/2)
}

// lateContext has passed its deadline without ending.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }
