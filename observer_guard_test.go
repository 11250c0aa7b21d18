package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// panicky is an Observer that records every round and event, then panics
// on the events of the kinds in on and on the rounds of op round.
type panicky struct {
	recorder
	on    map[EventKind]bool
	round string
}

func (p *panicky) ObserveRound(ctx context.Context, r Round) {
	p.recorder.ObserveRound(ctx, r)
	if r.Op == p.round {
		panic("observer round")
	}
}

func (p *panicky) ObserveEvent(ctx context.Context, e Event) {
	p.recorder.ObserveEvent(ctx, e)
	if p.on[e.Kind] {
		panic("observer event")
	}
}

func (p *panicky) count(kind EventKind) int {
	n := 0
	for _, k := range p.kinds() {
		if k == kind {
			n++
		}
	}
	return n
}

// TestObserverPanicOnTheExpiryTimer: an Observer that panics on the
// EventLost the expiry timer reports does not crash the process; the lock
// says lost, and its later events are still reported. Timing: the lock
// expires about 1.2s after the acquire; each wait is bounded at 10s.
func TestObserverPanicOnTheExpiryTimer(t *testing.T) {
	p := &panicky{on: map[EventKind]bool{EventLost: true}}
	c := newFakeClient(t, fakes(3), &Options{Observer: p, MasterTimeout: 300 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "k", 1200*time.Millisecond)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.count(EventLost) == 1 }, 10*time.Second, time.Millisecond,
		"the timer reported the loss")
	assert.False(t, l.Held())
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.True(t, isClosed(l.Done()))
	_ = l.Release(context.Background()) // the masters may say it is not held
	// The timer's goroutine may still be reporting: it then reports
	// EventReleased too, after Release returns.
	require.Eventually(t, func() bool { return len(p.kinds()) == 3 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []EventKind{EventAcquired, EventLost, EventReleased}, p.kinds(),
		"one EventLost; the panic left later events to be reported")
	p.mu.Lock()
	released := p.events[len(p.events)-1]
	p.mu.Unlock()
	assert.True(t, released.WasLost)
}

// TestObserverPanicOnTheRenewal: an Observer that panics on every renew
// round and every event of the renewal does not crash the process nor stop
// the renewal; once the masters fail, the renewal loses the lock, and
// Err says so. Timing: renewed every 1s of the 3s TTL; the waits are
// bounded at 10s.
func TestObserverPanicOnTheRenewal(t *testing.T) {
	p := &panicky{round: "renew", on: map[EventKind]bool{EventRenewed: true, EventRenewalFailed: true, EventLost: true}}
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{Observer: p, MasterTimeout: 750 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "k", 3*time.Second)
	require.NoError(t, err)
	l.AutoRenew()
	require.Eventually(t, func() bool { return p.count(EventRenewed) >= 2 }, 10*time.Second, time.Millisecond,
		"renewed again after the Observer panicked")
	assert.True(t, l.Held())
	assert.NoError(t, l.Err())
	for _, f := range fs {
		f.mu.Lock()
		f.err = assert.AnError
		f.mu.Unlock()
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the renewal did not lose the lock")
	}
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.False(t, l.Held())
	require.Eventually(t, func() bool { return p.count(EventLost) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Close(), "the renewal has ended")
	assert.Equal(t, 1, p.count(EventLost))
}

// TestObserverPanicInClose: an Observer that panics on the EventLost of
// Client.Close does not stop Close from ending every lock and its renewal;
// the panic is dropped, and a second Close returns nil.
func TestObserverPanicInClose(t *testing.T) {
	p := &panicky{on: map[EventKind]bool{EventLost: true}}
	c, err := New(fakes(3), &Options{Observer: p, MasterTimeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	var locks []*Lock
	for _, key := range []string{"a", "b", "c"} {
		l, err := c.Acquire(ctx, key, time.Hour)
		require.NoError(t, err)
		l.AutoRenew()
		locks = append(locks, l)
	}
	require.NotPanics(t, func() { assert.NoError(t, c.Close()) }, "a queued event's panic is dropped")
	for _, l := range locks {
		assert.ErrorIs(t, l.Err(), ErrClosed, "%s", l.Key())
		assert.True(t, isClosed(l.Done()), "%s", l.Key())
		l.mu.Lock()
		assert.True(t, l.renew == nil || isClosed(l.renew.done), "%s: renewal ended", l.Key())
		l.mu.Unlock()
	}
	assert.Equal(t, 3, p.count(EventLost))
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a second Close blocks: a renewal outlived the first")
	}
	_, err = c.Acquire(ctx, "d", time.Hour)
	assert.ErrorIs(t, err, ErrClosed)
}

// blocker is an Observer that records every event and blocks on the first
// of kind block until open is closed, telling entered when it begins.
type blocker struct {
	recorder
	block         EventKind
	entered, open chan struct{}
	once          sync.Once
}

func (b *blocker) ObserveEvent(ctx context.Context, e Event) {
	if e.Kind == b.block {
		b.once.Do(func() {
			close(b.entered)
			<-b.open
		})
	}
	b.recorder.ObserveEvent(ctx, e)
}

// TestBlockedObserverBlocksNeitherErrNorRelease: while an Observer blocks
// in the EventLost of the expiry timer, the Lock's Err, Done, Context and
// Release return, and Client.Close waits for nothing of it; the events
// that come meanwhile are reported after it, in order. Timing: the lock
// expires about 1.2s after the acquire; each wait is bounded at 10s.
func TestBlockedObserverBlocksNeitherErrNorRelease(t *testing.T) {
	b := &blocker{block: EventLost, entered: make(chan struct{}), open: make(chan struct{})}
	c, err := New(fakes(3), &Options{Observer: b, MasterTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	l, err := c.Acquire(context.Background(), "k", 1200*time.Millisecond)
	require.NoError(t, err)
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not report the loss")
	}
	defer close(b.open) // should the test fail, so that the timer's goroutine ends
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		assert.ErrorIs(t, l.Err(), ErrNotHeld)
		assert.True(t, isClosed(l.Done()))
		assert.ErrorIs(t, context.Cause(l.Context()), ErrNotHeld)
		_ = l.Release(context.Background())
		assert.NoError(t, c.Close())
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked by the Observer")
	}
	assert.Equal(t, []EventKind{EventAcquired}, b.kinds(), "nothing reported before the blocked EventLost")
	b.open <- struct{}{} // unblocks it; the deferred close then finds it gone
	require.Eventually(t, func() bool { return len(b.kinds()) == 3 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []EventKind{EventAcquired, EventLost, EventReleased}, b.kinds())
}

// TestObserverPanicInReenterLeavesTheLockUsable: a Reenter whose round's
// Observer panics lets go of the Lock's mutex; the lock can then be
// released and the Client closed (before, Release and Close hung). Each
// call is bounded at 10s.
func TestObserverPanicInReenterLeavesTheLockUsable(t *testing.T) {
	p := &armedPanic{}
	c, err := New(fakes(3), &Options{Observer: p, MasterTimeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	l, err := c.AcquireAs(ctx, "k", "owner", 10*time.Second)
	require.NoError(t, err)
	l.AutoRenew()
	p.armed.Store(true) // the re-entry's round panics
	assert.PanicsWithValue(t, "observer round", func() { _ = l.Reenter(ctx) })
	within(t, "Release", func() { _ = l.Release(ctx) })
	within(t, "Close", func() { assert.NoError(t, c.Close()) })
}

// armedPanic is an Observer whose ObserveRound panics once armed.
type armedPanic struct{ armed atomic.Bool }

func (p *armedPanic) ObserveRound(context.Context, Round) {
	if p.armed.Swap(false) {
		panic("observer round")
	}
}

func (p *armedPanic) ObserveEvent(context.Context, Event) {}

// TestBlockedObserverOnReleaseBlocksNoOtherCall: while an Observer blocks
// in a last Release's EventReleased, the Lock's other calls return: the
// event is reported outside the Lock's mutex. Bounded at 10s.
func TestBlockedObserverOnReleaseBlocksNoOtherCall(t *testing.T) {
	b := &blocker{block: EventReleased, entered: make(chan struct{}), open: make(chan struct{})}
	c := newFakeClient(t, fakes(3), &Options{Observer: b, MasterTimeout: time.Second})
	l, err := c.Acquire(context.Background(), "k", 10*time.Second)
	require.NoError(t, err)
	go func() { _ = l.Release(context.Background()) }()
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not report")
	}
	defer close(b.open)
	within(t, "Holds", func() { assert.Zero(t, l.Holds()) })
	within(t, "Extend", func() { assert.ErrorIs(t, l.Extend(context.Background(), 10*time.Second), ErrNotHeld) })
}

// within fails the test if f does not return within 10s.
func within(t *testing.T, name string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", name)
	}
}
