package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu     sync.Mutex
	rounds []Round
	events []Event
}

func (r *recorder) ObserveRound(_ context.Context, rd Round) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds = append(r.rounds, rd)
}

func (r *recorder) ObserveEvent(_ context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func TestObserverSeesRoundsAndEvents(t *testing.T) {
	rec := &recorder{}
	c := newFakeClient(t, fakes(3), &Options{Observer: rec})
	ctx := context.Background()

	l, err := c.Acquire(ctx, "k", time.Second)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, l.Extend(ctx, time.Second))
	require.NoError(t, l.Release(ctx))

	rec.mu.Lock()
	rounds := rec.rounds
	rec.mu.Unlock()
	require.Len(t, rounds, 4)
	for i, op := range []string{"acquire", "acquire", "extend", "release"} {
		assert.Equal(t, op, rounds[i].Op)
		assert.Equal(t, "k", rounds[i].Key)
		assert.Len(t, rounds[i].Masters, 3)
		assert.Positive(t, rounds[i].Elapsed)
	}
	ok := rounds[0]
	assert.NoError(t, ok.Err)
	assert.Positive(t, ok.Validity)
	assert.Equal(t, l.Token(), ok.Token, "no raise round here")
	assert.LessOrEqual(t, ok.Validity, time.Second)
	answered := 0
	for _, m := range ok.Masters {
		if m.Agreed {
			answered++
			assert.Positive(t, m.Latency)
			assert.LessOrEqual(t, m.Latency, ok.Elapsed)
		}
	}
	assert.GreaterOrEqual(t, answered, 2)
	refused := rounds[1]
	var qe *QuorumError
	require.ErrorAs(t, refused.Err, &qe)
	assert.Zero(t, refused.Validity)

	assert.Equal(t, []EventKind{EventAcquired, EventReleased}, rec.kinds())
	rec.mu.Lock()
	acquired := rec.events[0]
	rec.mu.Unlock()
	assert.Equal(t, l.Token(), acquired.Token)
	assert.Positive(t, acquired.Token)
	assert.False(t, acquired.Until.IsZero())
}

func TestObserverSeesRenewalAndLoss(t *testing.T) {
	rec := &recorder{}
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{Observer: rec, MasterTimeout: 50 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "k", 300*time.Millisecond)
	require.NoError(t, err)
	l.AutoRenew()
	require.Eventually(t, func() bool { return slices.Contains(rec.kinds(), EventRenewed) },
		5*time.Second, time.Millisecond, "renewed")
	assert.Equal(t, EventAcquired, rec.kinds()[0])
	for _, f := range fs {
		f.mu.Lock()
		f.err = assert.AnError // every master fails from now on
		f.mu.Unlock()
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was not lost")
	}
	// Done closes as the loss is queued; the event is reported just
	// after, on the renewal's goroutine.
	require.Eventually(t, func() bool { return slices.Contains(rec.kinds(), EventLost) },
		5*time.Second, time.Millisecond, "EventLost reported")
	kinds := rec.kinds()
	assert.Contains(t, kinds, EventRenewalFailed)
	assert.Equal(t, EventLost, kinds[len(kinds)-1])
	rec.mu.Lock()
	lost := rec.events[len(rec.events)-1]
	rec.mu.Unlock()
	require.ErrorIs(t, lost.Err, ErrNotHeld)
}

func TestEventKindString(t *testing.T) {
	assert.Equal(t, "renewal_failed", EventRenewalFailed.String())
	assert.Equal(t, "unknown", EventKind(0).String())
}

// panicOnce is an Observer that panics once, at the first successful
// acquire round (round) or at the first EventAcquired (!round).
type panicOnce struct {
	round bool
	fired sync.Once
}

func (p *panicOnce) ObserveRound(_ context.Context, r Round) {
	if p.round && r.Op == "acquire" && r.Err == nil {
		p.fired.Do(func() { panic("observer") })
	}
}

func (p *panicOnce) ObserveEvent(_ context.Context, e Event) {
	if !p.round && e.Kind == EventAcquired {
		p.fired.Do(func() { panic("observer") })
	}
}

// TestObserverPanicInAcquireReleasesTheLock: an Observer panics while an
// acquire that got the lock is reported. The panic reaches the caller, who
// never gets the Lock; the lock is released rather than left until its TTL.
func TestObserverPanicInAcquireReleasesTheLock(t *testing.T) {
	for _, round := range []bool{true, false} {
		fs := fakes(3)
		c := newFakeClient(t, fs, &Options{Observer: &panicOnce{round: round}, MasterTimeout: time.Second})
		require.PanicsWithValue(t, "observer", func() { _, _ = c.Acquire(context.Background(), "k", time.Hour) })
		require.Eventually(t, func() bool { return !held(fs[0]) && !held(fs[1]) && !held(fs[2]) }, 5*time.Second, time.Millisecond,
			"released (panic in ObserveRound: %v)", round)
		l, err := c.Acquire(context.Background(), "k", time.Hour)
		require.NoError(t, err)
		require.NoError(t, l.Release(context.Background()))
	}
}

// TestObserverPanicAfterEventAcquiredReportsTheRelease: the Observer saw
// EventAcquired and then panicked; the release that follows is reported,
// so that what it counts (held locks, say) stays balanced.
func TestObserverPanicAfterEventAcquiredReportsTheRelease(t *testing.T) {
	rec := &recorder{}
	c := newFakeClient(t, fakes(3), &Options{Observer: acquiredThenPanic{rec}, MasterTimeout: time.Second})
	require.Panics(t, func() { _, _ = c.Acquire(context.Background(), "k", time.Hour) })
	assert.Equal(t, []EventKind{EventAcquired, EventReleased}, rec.kinds())
}

// acquiredThenPanic records every event and then panics on EventAcquired.
type acquiredThenPanic struct{ *recorder }

func (a acquiredThenPanic) ObserveEvent(ctx context.Context, e Event) {
	a.recorder.ObserveEvent(ctx, e)
	if e.Kind == EventAcquired {
		panic("observer")
	}
}

// gatedRecorder is a recorder whose first event of kind gate, or first
// round of op gate's Op, blocks until open is closed, and tells entered
// when it begins. It records an event when its call ends.
type gatedRecorder struct {
	recorder
	event         EventKind
	round         string
	entered, open chan struct{}
	once          sync.Once
}

func (g *gatedRecorder) wait() {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
}

func (g *gatedRecorder) ObserveRound(ctx context.Context, r Round) {
	if r.Op == g.round {
		g.wait()
	}
	g.recorder.ObserveRound(ctx, r)
}

func (g *gatedRecorder) ObserveEvent(ctx context.Context, e Event) {
	if e.Kind == g.event {
		g.wait()
	}
	g.recorder.ObserveEvent(ctx, e)
}

// TestAutoRenewDuringTheLastReleaseStartsNothing: the last Release waits,
// with the Lock's mutex let go, for the renewal to stop (here held in its
// Observer); an AutoRenew meanwhile must not start another renewal, which
// would outlive the release.
func TestAutoRenewDuringTheLastReleaseStartsNothing(t *testing.T) {
	g := &gatedRecorder{event: EventRenewed, entered: make(chan struct{}), open: make(chan struct{})}
	c := newFakeClient(t, fakes(3), &Options{Observer: g, MasterTimeout: 50 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "k", 600*time.Millisecond) // renewed after 200ms
	require.NoError(t, err)
	l.AutoRenew()
	<-g.entered // the renewal is in its Observer, until open
	released := make(chan error, 1)
	go func() { released <- l.Release(context.Background()) }()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.renew == nil
	}, 5*time.Second, time.Millisecond, "the release took the renewal to stop it")
	l.AutoRenew()
	close(g.open)
	require.NoError(t, <-released)
	l.mu.Lock()
	renew := l.renew
	l.mu.Unlock()
	assert.Nil(t, renew, "no renewal after the last Release")
}

// TestAutoRenewFollowsAShorterExtend: an Extend to a shorter TTL moves the
// validity's end closer; the renewal planned for the old TTL must come
// sooner, or the lock runs out. Timing: the lock is renewed after about
// 0.7s of the 2s it holds after the Extend, a margin of 1.3s; the renewal
// planned before it comes after 10s.
func TestAutoRenewFollowsAShorterExtend(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	l.AutoRenew()
	// Most likely the renewal plans for 30s meanwhile; either way, it must
	// come in time.
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, l.Extend(ctx, 2*time.Second))
	extended := l.Until()
	require.Eventually(t, func() bool { return l.Until().After(extended) }, 5*time.Second, 10*time.Millisecond,
		"renewed after the Extend")
	require.True(t, l.Held(), "%v", l.Err())
	require.NoError(t, l.Release(ctx))
}

// TestNoRenewalEventAfterTheLoss: one Lock's events come in order, so a
// renewal under way when Client.Close ends the lock reports nothing after
// its EventLost. The renewal is held in its Observer: reporting that it
// renewed (Close's loss then waits for it), or deciding its round (the
// loss comes first, and the renewal then fails).
func TestNoRenewalEventAfterTheLoss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event EventKind // or
		round string
		until func(*testing.T, *gatedRecorder)
	}{
		{"renewed", EventRenewed, "", func(t *testing.T, g *gatedRecorder) {
			// A loss reported while the renewal reports comes before it.
			// The margin: Close's loss is a few microseconds away.
			time.Sleep(200 * time.Millisecond)
			assert.NotContains(t, g.kinds(), EventLost, "lost while the renewal reported")
		}},
		{"round", 0, "renew", func(t *testing.T, g *gatedRecorder) {
			require.Eventually(t, func() bool { return slices.Contains(g.kinds(), EventLost) },
				5*time.Second, time.Millisecond, "Close ends the lock while its renewal is under way")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedRecorder{event: tc.event, round: tc.round, entered: make(chan struct{}), open: make(chan struct{})}
			c := newFakeClient(t, fakes(3), &Options{Observer: g, MasterTimeout: 50 * time.Millisecond})
			l, err := c.Acquire(context.Background(), "k", 600*time.Millisecond) // renewed after 200ms
			require.NoError(t, err)
			l.AutoRenew()
			<-g.entered
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			tc.until(t, g)
			close(g.open)
			require.NoError(t, <-closed)
			kinds := g.kinds()
			require.Contains(t, kinds, EventLost)
			assert.Equal(t, EventLost, kinds[len(kinds)-1], "%v", kinds)
			assert.ErrorIs(t, l.Err(), ErrClosed)
		})
	}
}

// TestLockLostWhereAQuorumRefuses: a round of a held Lock that so many
// masters refuse (the lock is not theirs: taken over, deleted, or lost to
// a restart) that the others cannot make a quorum loses the lock at once,
// whatever validity is left; timeouts or errors alone do not.
func TestLockLostWhereAQuorumRefuses(t *testing.T) {
	ctx := context.Background()
	takeOver := func(fs []*fakeMaster, l *Lock, n int) {
		for _, f := range fs[:n] {
			f.set(l.keys.Names[0], "thief")
		}
	}
	lost := func(t *testing.T, l *Lock) {
		t.Helper()
		select {
		case <-l.Done():
		default:
			t.Fatal("Done is open")
		}
		assert.False(t, l.Held())
		assert.ErrorIs(t, l.Err(), ErrNotHeld)
		var qe *QuorumError
		require.ErrorAs(t, l.Err(), &qe)
		refused := 0
		for _, m := range qe.Masters {
			if errors.Is(m.Err, ErrNotHeld) {
				refused++
			}
		}
		assert.Equal(t, 2, refused, "the lock is not ours there (a re-entry's too): %v", qe)
	}
	for _, tc := range []struct {
		name     string
		reenters int // before the round
		run      func(*Lock) error
		want     error
	}{
		{"extend", 0, func(l *Lock) error { return l.Extend(ctx, 10*time.Second) }, ErrNotHeld},
		{"reenter", 0, func(l *Lock) error { return l.Reenter(ctx) }, ErrNotObtained},
		{"release that leaves holds", 2, func(l *Lock) error { return l.Release(ctx) }, ErrNotHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakes(3)
			c := newFakeClient(t, fs, nil)
			l, err := c.Acquire(ctx, "k", 10*time.Second)
			require.NoError(t, err)
			for range tc.reenters {
				require.NoError(t, l.Reenter(ctx))
			}
			// The round was decided by two of them; the third's call may
			// still be on its way.
			require.Eventually(t, func() bool {
				for _, f := range fs {
					if _, ok := f.get(l.keys.Names[0]); !ok {
						return false
					}
				}
				return true
			}, 5*time.Second, time.Millisecond, "every master holds it")
			takeOver(fs, l, 1)
			require.NoError(t, tc.run(l), "one master that refuses leaves a quorum")
			require.True(t, l.Held())
			takeOver(fs, l, 2)
			require.ErrorIs(t, tc.run(l), tc.want)
			lost(t, l)
		})
	}
	t.Run("masters that fail", func(t *testing.T) {
		fs := fakes(3)
		c := newFakeClient(t, fs, nil)
		l, err := c.Acquire(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		for _, f := range fs[:2] {
			f.mu.Lock()
			f.err = assert.AnError
			f.mu.Unlock()
		}
		err = l.Extend(ctx, 10*time.Second)
		require.ErrorIs(t, err, ErrNoQuorum)
		assert.NotErrorIs(t, err, ErrNotHeld, "failures prove nothing")
		assert.True(t, l.Held(), "a master that did not answer may still hold it")
		assert.NoError(t, l.Err())
	})
	// Timing: renewed after 1s of the 3s TTL; the refused renewal loses it
	// then, where retrying until the validity ran out lost it after 2.3s.
	t.Run("renewal", func(t *testing.T) {
		fs := fakes(3)
		c := newFakeClient(t, fs, &Options{MasterTimeout: 50 * time.Millisecond})
		l, err := c.Acquire(ctx, "k", 3*time.Second)
		require.NoError(t, err)
		takeOver(fs, l, 2)
		l.AutoRenew()
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("Done open 2s after a take-over that the first renewal met (Until in %v)", time.Until(l.Until()))
		}
		lost(t, l)
	})
}
