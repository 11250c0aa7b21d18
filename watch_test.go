package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runOut moves l's deadline into the past, as if its validity had run out,
// without waiting for it. Only for a Lock without a signal: its timer is
// not moved.
func runOut(l *Lock) {
	l.life.until.Store(int64(time.Since(l.client.epoch) - time.Millisecond))
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestExpiredLockSaysSoAtOnce: once Until has passed, Err, Done and Context
// say the lock is lost when they return, whether or not anyone watched it
// before; nothing waits for a timer. Each is asked first on its own Lock.
func TestExpiredLockSaysSoAtOnce(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: time.Second})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		lost func(*Lock) bool
	}{
		{"Err", func(l *Lock) bool { return l.Err() != nil }},
		{"Done", func(l *Lock) bool { return isClosed(l.Done()) }},
		{"Context", func(l *Lock) bool { return isClosed(l.Context().Done()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Acquire(ctx, "k-"+tc.name, time.Hour)
			require.NoError(t, err)
			require.True(t, l.Held())
			runOut(l)
			require.False(t, l.Held())
			require.True(t, tc.lost(l), "lost when it returns")
			require.ErrorIs(t, l.Err(), ErrNotHeld)
			require.ErrorContains(t, l.Err(), "validity ran out")
			require.True(t, isClosed(l.Done()))
			require.ErrorIs(t, context.Cause(l.Context()), ErrNotHeld)
			require.ErrorIs(t, l.Context().Err(), context.Canceled)
		})
	}
}

// TestLostSignalAgreesWithHeld: Held, Err, Done and Context agree at every
// instant, on the real clock, across the deadline. Asked in that order, a
// later one may see the deadline pass, never the reverse: once Held says
// the validity ran out, the others say lost; once Err says lost, Held says
// so. One Lock is asked all along; the others only once Held turned false,
// so that no signal made earlier closes them by its timer. Timing: the
// locks expire about 1.2s after their acquire; the loop is bounded at 10s.
func TestLostSignalAgreesWithHeld(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: 300 * time.Millisecond})
	asks := map[string]func(*Lock) bool{
		"Err":     func(l *Lock) bool { return l.Err() != nil },
		"Done":    func(l *Lock) bool { return isClosed(l.Done()) },
		"Context": func(l *Lock) bool { return isClosed(l.Context().Done()) },
	}
	watched, err := c.Acquire(context.Background(), "watched", 1200*time.Millisecond)
	require.NoError(t, err)
	unasked := map[string]*Lock{}
	for name := range asks {
		l, err := c.Acquire(context.Background(), name, 1200*time.Millisecond)
		require.NoError(t, err)
		unasked[name] = l
	}
	// Long before the deadline, all say held.
	if time.Until(watched.Until()) > 500*time.Millisecond {
		assert.True(t, watched.Held())
		assert.NoError(t, watched.Err())
		assert.False(t, isClosed(watched.Done()))
		assert.NoError(t, watched.Context().Err())
	}
	stop := time.Now().Add(10 * time.Second)
	for time.Now().Before(stop) && (watched.Held() || len(unasked) > 0) {
		held := watched.Held()
		if lost := watched.Err() != nil; !held && !lost {
			t.Fatalf("Held false but Err nil, %v past Until", time.Since(watched.Until()))
		} else if lost && watched.Held() {
			t.Fatal("Err says lost but Held true")
		}
		for name, l := range unasked {
			if !l.Held() {
				require.True(t, asks[name](l), "%s says lost when Held is false, %v past Until", name, time.Since(l.Until()))
				delete(unasked, name)
			}
		}
		time.Sleep(time.Millisecond)
	}
	require.False(t, watched.Held(), "the deadline passed within the loop's bound")
	require.Empty(t, unasked, "the deadline passed within the loop's bound")
	require.ErrorIs(t, watched.Err(), ErrNotHeld)
}

// TestExtendDoesNotReviveAnExpiredLock: an Extend whose round began while
// the lock was valid but ended after its validity ran out loses the lock,
// whether or not anyone watched it meanwhile: lost at one instant, it is
// not held again at the next. Timing: the round starts 1.5s before the
// deadline (a margin of 1s against MasterTimeout, 2.5s) and is held by the
// masters until 20ms after it.
func TestExtendDoesNotReviveAnExpiredLock(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{MasterTimeout: 2500 * time.Millisecond, NoFencing: true}) // timing needs MasterTimeout above a quarter of the TTL, and so no fencing
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", 3*time.Second)
	require.NoError(t, err)
	time.Sleep(time.Until(l.Until()) - 1500*time.Millisecond)
	before := make([]int32, len(fs))
	for i, f := range fs {
		f.block(false)
		before[i] = f.entered.Load()
	}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, 10*time.Second) }()
	require.Eventually(t, func() bool {
		for i, f := range fs {
			if f.entered.Load() == before[i] {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the round reached the masters")
	require.True(t, time.Now().Before(l.Until()), "the round began before the deadline")
	for i := 0; i < 100 && !time.Now().After(l.Until()); i++ {
		time.Sleep(time.Until(l.Until()) + 20*time.Millisecond)
	}
	for _, f := range fs {
		f.unblock()
	}
	err = <-extended
	require.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorContains(t, err, "validity ran out")
	assert.False(t, l.Held())
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
}
