package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutcome: contention and the caller's own end are told apart from
// failures, from what the masters answered.
func TestOutcome(t *testing.T) {
	ctx := context.Background()
	fs := fakes(5)
	c := newFakeClient(t, fs, &Options{MasterTimeout: 50 * time.Millisecond})
	l, err := c.Acquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "ok", Outcome(nil))

	_, err = c.Acquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Equal(t, "contended", Outcome(err), "every master refused: %v", err)
	wrapped := fmt.Errorf("%w; gave up waiting: %w", err, context.DeadlineExceeded)
	assert.Equal(t, "contended", Outcome(wrapped), "a wait that gave up says why it waited")

	for _, f := range fs[:3] {
		f.mu.Lock()
		f.err = errors.New("ERR boom")
		f.mu.Unlock()
	}
	_, err = c.Acquire(ctx, "other", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Equal(t, "no_quorum", Outcome(err), "too few answered: %v", err)
	_, err = c.Acquire(ctx, "k", time.Minute)
	assert.Equal(t, "no_quorum", Outcome(err), "two refusals make no quorum of answers: %v", err)
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, ErrNoQuorum)
	assert.Equal(t, "no_quorum", Outcome(err))

	// Failed masters are silent for a while: another client.
	fs = fakes(5)
	l, err = newFakeClient(t, fs, nil).Acquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	for _, f := range fs[:3] {
		f.set(l.keys.Names[0], "thief")
	}
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Equal(t, "not_held", Outcome(err))

	assert.Equal(t, "expired", Outcome(&QuorumError{Expired: true, sentinel: ErrNotObtained}))
	assert.Equal(t, "canceled", Outcome(&QuorumError{sentinel: ErrNotObtained, ctxErr: context.Canceled}))
	assert.Equal(t, "error", Outcome(&QuorumError{sentinel: ErrNotObtained, upgrade: true}))
	assert.Equal(t, "canceled", Outcome(fmt.Errorf("%w: gave up: %w", ErrNotObtained, context.Canceled)))
	assert.Equal(t, "closed", Outcome(errClosedOp("acquire", "k")))
	assert.Equal(t, "error", Outcome(invalidf("empty key")))
}

// TestObservers: one Observer hands everything to each, in order, and
// skips nil ones.
func TestObservers(t *testing.T) {
	assert.Nil(t, Observers())
	assert.Nil(t, Observers(nil, nil))
	a, b := &recorder{}, &recorder{}
	assert.Same(t, a, Observers(nil, a))
	c := newFakeClient(t, fakes(3), &Options{Observer: Observers(a, nil, b)})
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	for _, r := range []*recorder{a, b} {
		assert.Equal(t, []EventKind{EventAcquired, EventReleased}, r.kinds())
		r.mu.Lock()
		assert.Len(t, r.rounds, 2)
		r.mu.Unlock()
	}
}

// TestObserveAttemptOncePerEpisode: a waiting lock's attempts that reach
// no quorum are reported once, until an attempt hears a quorum.
func TestObserveAttemptOncePerEpisode(t *testing.T) {
	rec := &recorder{}
	c := newFakeClient(t, fakes(3), &Options{Observer: rec})
	ctx := context.Background()
	noQuorum := &QuorumError{Op: "acquire", Key: "k", Quorum: 2, sentinel: ErrNotObtained,
		Masters: []MasterResult{{Err: ErrMasterTimeout}, {Err: ErrMasterTimeout}, {Err: ErrHeldElsewhere}}}
	contended := &QuorumError{Op: "acquire", Key: "k", Quorum: 2, sentinel: ErrNotObtained,
		Masters: []MasterResult{{Err: ErrHeldElsewhere}, {Err: ErrHeldElsewhere}, {Err: ErrMasterTimeout}}}
	var h linked
	stalled := false
	for _, err := range []error{contended, noQuorum, noQuorum, context.Canceled, noQuorum, contended, noQuorum, nil} {
		stalled = h.ObserveAttempt(ctx, c, "k", err, stalled)
	}
	assert.False(t, stalled)
	assert.Equal(t, []EventKind{EventNoQuorum, EventNoQuorum}, rec.kinds(), "two episodes")
	assert.Equal(t, "no_quorum", EventNoQuorum.String())
}

// ctxRecorder keeps the value of ctxKey in the context of each round and
// event.
type ctxRecorder struct {
	mu     sync.Mutex
	rounds map[string][]any // by op
	events map[EventKind][]any
}

type ctxKey struct{}

func (r *ctxRecorder) ObserveRound(ctx context.Context, rd Round) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds[rd.Op] = append(r.rounds[rd.Op], ctx.Value(ctxKey{}))
}

func (r *ctxRecorder) ObserveEvent(ctx context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[e.Kind] = append(r.events[e.Kind], ctx.Value(ctxKey{}))
}

func (r *ctxRecorder) event(k EventKind) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[k])
}

// TestRenewalHasTheAcquiresValues: the renewal's rounds and events, and
// the loss, carry the values of the acquire's context (a trace's span),
// not its cancellation.
func TestRenewalHasTheAcquiresValues(t *testing.T) {
	rec := &ctxRecorder{rounds: map[string][]any{}, events: map[EventKind][]any{}}
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{Observer: rec, MasterTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "job"))
	l, err := c.Acquire(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err)
	cancel() // the caller's context ends: renewal goes on
	l.AutoRenew()
	require.Eventually(t, func() bool { return len(rec.event(EventRenewed)) > 0 }, 5*time.Second, time.Millisecond)
	for _, f := range fs {
		f.mu.Lock()
		f.data = map[string]string{} // the lock is gone: the next renewal loses it
		f.mu.Unlock()
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was not lost")
	}
	require.Eventually(t, func() bool { return len(rec.event(EventLost)) > 0 }, 5*time.Second, time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.rounds["renew"])
	for _, v := range rec.rounds["renew"] {
		assert.Equal(t, "job", v, "a renewal round")
	}
	assert.Equal(t, []any{"job"}, rec.events[EventLost])
	assert.Equal(t, "job", rec.events[EventRenewed][0])
}

// TestHolderGoesWithTheNonce: Options.Holder is stored with each Lock, as
// part of its nonce, and checked where it is given.
func TestHolderGoesWithTheNonce(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{Holder: "web-3 pid 42"})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	r, err := c.AcquireAs(ctx, "r", "owner", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Value()+" web-3 pid 42", l.nonce)
	assert.True(t, strings.HasSuffix(r.nonce, " web-3 pid 42"), r.nonce)
	assert.Equal(t, "owner", r.Value())
	nonce, _ := func() (string, bool) {
		fs[0].mu.Lock()
		defer fs[0].mu.Unlock()
		n, ok := fs[0].nonces[l.keys.Names[0]]
		return n, ok
	}()
	assert.Equal(t, l.nonce, nonce, "stored on the master")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, r.Release(ctx))

	plain := newFakeClient(t, fakes(3), nil)
	l, err = plain.Acquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Value(), l.nonce, "nothing without a Holder")
	require.NoError(t, l.Release(ctx))

	for _, bad := range []string{"a}b", "line\nbreak", strings.Repeat("x", 201)} {
		_, err := New(fakes(1), &Options{Holder: bad})
		assert.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
	}
}

// TestOutcomeContendedOnlyWhereRefusalsDecide: an acquire is contended
// only where the refusals alone left too few masters for a quorum. Where
// failing, silent or held-back masters would have made one, the failure
// is theirs. A refusal that says the Lock does not hold the lock (a
// re-entry, resume or fence round) is no contention either.
func TestOutcomeContendedOnlyWhereRefusalsDecide(t *testing.T) {
	ctx := context.Background()
	fs := fakes(5)
	c := newFakeClient(t, fs, &Options{MasterTimeout: 50 * time.Millisecond})
	// Another owner holds "k" on one master; two masters fail.
	fs[0].set("{k}", "thief")
	for _, f := range fs[3:] {
		f.mu.Lock()
		f.err = errors.New("ERR boom")
		f.mu.Unlock()
	}
	_, err := c.Acquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Equal(t, "no_quorum", Outcome(err), "the failing masters cost the lock: %v", err)

	q := func(op string, ms ...MasterResult) *QuorumError {
		e := &QuorumError{Op: op, Key: "k", Quorum: len(ms)/2 + 1, sentinel: ErrNotObtained, Masters: ms}
		for _, m := range ms {
			if m.Agreed {
				e.Agreed++
			}
		}
		e.held = e.heldBack()
		return e
	}
	agreed, elsewhere, notHeld := MasterResult{Agreed: true}, MasterResult{Err: ErrHeldElsewhere}, MasterResult{Err: ErrNotHeld}
	for _, tc := range []struct {
		name string
		err  *QuorumError
		want string
	}{
		{"two silent of five", q("acquire", agreed, agreed, elsewhere, MasterResult{Err: ErrMasterSilent}, MasterResult{Err: ErrMasterTimeout}), "no_quorum"},
		{"an agreement undone", q("acquire", agreed, elsewhere, MasterResult{Err: errAgreedLate}), "no_quorum"},
		{"held back", q("acquire", agreed, elsewhere, MasterResult{Err: ErrNotReplicated}), "no_quorum"},
		{"quarantined", q("acquire", agreed, elsewhere, MasterResult{Err: ErrQuarantined}), "no_quorum"},
		{"withdrawn", q("acquire", agreed, elsewhere, MasterResult{Err: ErrWithdrawn}), "no_quorum"},
		{"refusals decide", q("acquire", agreed, elsewhere, elsewhere, MasterResult{Err: ErrMasterTimeout}, elsewhere), "contended"},
		{"a refused re-entry", q("acquire", agreed, notHeld, notHeld), "not_held"},
		{"a refused resume", q("resume", notHeld, notHeld, MasterResult{Err: ErrMasterTimeout}), "not_held"},
		{"a refused fence", q("fence", agreed, notHeld, notHeld), "not_held"},
	} {
		assert.Equal(t, tc.want, Outcome(tc.err), "%s: %v", tc.name, tc.err)
	}
}

// TestObserversSkipTypedNil: a nil pointer in an Observer, such as what
// a constructor returns with its error, is skipped like a nil Observer.
// Called, it would panic on every round, on the caller's goroutine.
func TestObserversSkipTypedNil(t *testing.T) {
	var broken *recorder // as from a failed otelredlock.New
	a := &recorder{}
	assert.Nil(t, Observers(broken))
	assert.Same(t, a, Observers(broken, a))
	c := newFakeClient(t, fakes(3), &Options{Observer: Observers(a, broken, nil)})
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	assert.Equal(t, []EventKind{EventAcquired, EventReleased}, a.kinds())
}
