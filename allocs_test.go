//go:build !race

package redlock

import (
	"context"
	"testing"
	"time"
)

// TestAcquireReleaseAllocs holds an Acquire and its Release on five fake
// masters to the allocations they made before the engine moved to
// internal/quorum. The fake masters' own allocations count too: a change
// of Go or go-redis that moves the count may lower the budget. The least
// of three measures is taken: other goroutines only add.
func TestAcquireReleaseAllocs(t *testing.T) {
	const budget = 49
	fs := fakes(5)
	c := newFakeClient(t, fs, nil)
	ctx := context.Background()
	run := func() {
		l, err := c.Acquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run() // the masters' setup
	for _, f := range fs {
		f.mu.Lock()
		f.calls = make([]string, 0, 8192) // the fakes' log grows without allocating
		f.mu.Unlock()
	}
	least := testing.AllocsPerRun(1000, run)
	for range 2 {
		least = min(least, testing.AllocsPerRun(1000, run))
	}
	if least > budget {
		t.Errorf("%.0f allocations per Acquire and Release, want at most %d", least, budget)
	}
}

// TestObserveAttemptAllocs: without an Observer, a waiting Lock's
// attempts cost the no-quorum hook nothing.
func TestObserveAttemptAllocs(t *testing.T) {
	c := newFakeClient(t, fakes(3), nil)
	ctx := context.Background()
	refused := &QuorumError{Op: "acquire", Key: "k", Quorum: 2, sentinel: ErrNotObtained,
		Masters: []MasterResult{{Err: ErrMasterTimeout}, {Err: ErrMasterTimeout}, {Err: ErrHeldElsewhere}}}
	var err error = refused
	var h linked
	if n := testing.AllocsPerRun(100, func() { h.ObserveAttempt(ctx, c, "k", err, false) }); n > 0 {
		t.Errorf("%.0f allocations per attempt without an Observer", n)
	}
}
