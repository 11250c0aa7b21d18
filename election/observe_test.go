package election_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
)

// next returns the observer's next report, failing after wait.
func next(t *testing.T, ch <-chan election.LeaderInfo, wait time.Duration) election.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		require.True(t, ok, "observer closed")
		return info
	case <-time.After(wait):
		t.Fatalf("no report within %v", wait)
		return election.LeaderInfo{}
	}
}

// brief drops what varies from a report.
func brief(info election.LeaderInfo) string {
	if info.Vacant {
		return "vacant"
	}
	return fmt.Sprintf("%s/%d", info.Value, info.Seq)
}

// TestObserveSeesEveryChangeInOrder: an observer reports the initial
// vacancy, then each leader's win, Proclaim and resignation, in epoch
// order.
func TestObserveSeesEveryChangeInOrder(t *testing.T) {
	ctx := t.Context()
	e := newElection(t, shared(t), t.Name(), nil)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := e.Observe(octx)
	first := next(t, ch, ttl)
	assert.True(t, first.Vacant)

	var want []string
	var epochs []uint64
	for _, v := range []string{"a", "b", "c"} {
		l, err := e.Campaign(ctx, v)
		require.NoError(t, err)
		require.NoError(t, l.Proclaim(ctx, v+"2"))
		require.NoError(t, l.Resign(ctx))
		want = append(want, v+"/0", v+"2/1", "vacant")
		epochs = append(epochs, l.Epoch(), l.Epoch(), l.Epoch())
	}
	var got []string
	var gotEpochs []uint64
	for range want {
		info := next(t, ch, ttl)
		got = append(got, brief(info))
		gotEpochs = append(gotEpochs, info.Epoch)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, epochs, gotEpochs)
	stop()
	requireClosed(t, ch)
}

// TestObserveAcrossReconnect: changes published while the observer's
// subscriptions are cut, or while a master restarts empty, are read
// from the history all the same: by the fallback read (a quarter of the
// TTL, 500ms here), within 3s.
func TestObserveAcrossReconnect(t *testing.T) {
	ctx := t.Context()
	cl, client := own(t)
	e := newElection(t, client, "svc", nil)
	candidate := newElection(t, own2(t, cl), "svc", nil)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := e.Observe(octx)
	assert.True(t, next(t, ch, ttl).Vacant)

	l, err := candidate.Campaign(ctx, "a")
	require.NoError(t, err)
	a := next(t, ch, 3*time.Second)
	assert.Equal(t, "a/0", brief(a))

	// Cut every subscription of the masters, then change leaders.
	for i := range cl.Masters {
		require.NoError(t, cl.Admin(i).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	}
	require.NoError(t, l.Resign(ctx))
	l, err = candidate.Campaign(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, "vacant", brief(next(t, ch, 3*time.Second)))
	b := next(t, ch, 3*time.Second)
	assert.Equal(t, "b/0", brief(b))
	assert.Greater(t, b.Epoch, a.Epoch)

	// A master restarts empty: its history is gone, the others' is not.
	require.NoError(t, cl.Masters[0].Restart(ctx))
	require.NoError(t, l.Proclaim(ctx, "b2"))
	require.NoError(t, l.Resign(ctx))
	assert.Equal(t, "b2/1", brief(next(t, ch, 3*time.Second)))
	assert.Equal(t, "vacant", brief(next(t, ch, 3*time.Second)))
	stop()
	requireClosed(t, ch)
}

// TestObserveReportsExpiry: a leader that stops renewing (its client is
// closed) is reported gone once its lock expires, without a resignation.
func TestObserveReportsExpiry(t *testing.T) {
	ctx := t.Context()
	e := newElection(t, shared(t), t.Name(), nil)
	quitter, err := redlock.New(sharedMasters(t), &redlock.Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := e.Observe(octx)
	assert.True(t, next(t, ch, ttl).Vacant)
	l, err := newElection(t, quitter, t.Name(), nil).Campaign(ctx, "gone")
	require.NoError(t, err)
	assert.Equal(t, "gone/0", brief(next(t, ch, ttl)))
	require.NoError(t, quitter.Close()) // stops renewal: the lock expires within the TTL
	<-l.Done()
	gone := next(t, ch, 2*ttl)
	assert.True(t, gone.Vacant)
	assert.Equal(t, l.Epoch(), gone.Epoch)
}

// requireClosed waits for ch to close, then for the observer's
// goroutine to be gone.
func requireClosed(t *testing.T, ch <-chan election.LeaderInfo) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("observer channel not closed")
		}
	}
	noGoroutines(t, "election.(*Election).observe")
}

// noGoroutines fails unless no goroutine runs fn within 2s.
func noGoroutines(t *testing.T, fn string) {
	t.Helper()
	var stacks string
	for range 200 {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, fn) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutine of %s left:\n%s", fn, stacks)
}

// TestObserveEndsWithTheClient: Client.Close ends an observer too.
func TestObserveEndsWithTheClient(t *testing.T) {
	c, err := redlock.New(sharedMasters(t), &redlock.Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	ch := newElection(t, c, t.Name(), nil).Observe(t.Context())
	assert.True(t, next(t, ch, ttl).Vacant)
	require.NoError(t, c.Close())
	requireClosed(t, ch)
}
