package election_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// TestObserveMissesNoEntryPastAFullBatch: a master that missed a stretch
// of the history (paused, or restarted empty, while leaders came and
// went) must not make an observer skip that stretch. Masters 0 to 3 hold
// the wins and resignations of epochs 1 to 95; master 4 only those of 1
// to 10 and 90 to 95. An observer 190 entries behind reads 64 entries
// per master at a time: the 64 of masters 0 to 3 end at epoch 32, and
// master 4's go on to 95. Every epoch must be reported, in order. The
// entries are written straight to the masters, after the observer's
// first read (its next comes at the publication, or at its 1s poll).
func TestObserveMissesNoEntryPastAFullBatch(t *testing.T) {
	ctx := t.Context()
	cl, client := own(t)
	e := newElection(t, client, "gap", &election.Options{TTL: 4 * time.Second})
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := e.Observe(octx)
	first := next(t, ch, 4*time.Second)
	require.True(t, first.Vacant)
	require.Zero(t, first.Epoch, "the history was empty at the first read")

	const last = 95
	for i := range cl.Masters {
		p := cl.Admin(i).Pipeline()
		for k := 1; k <= last; k++ {
			if i == 4 && k > 10 && k < 90 {
				continue
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: "{gap}:eh", ID: fmt.Sprintf("%d-0", k), Values: []any{"v", fmt.Sprint("v", k)}})
			p.XAdd(ctx, &redis.XAddArgs{Stream: "{gap}:eh", ID: fmt.Sprintf("%d-1", k), Values: []any{"r", ""}})
		}
		_, err := p.Exec(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, cl.Admin(0).Publish(ctx, "{gap}", fmt.Sprintf("e:%d-1", last)).Err())

	var wins []uint64
	for len(wins) < last {
		info := next(t, ch, 4*time.Second)
		if info.Vacant {
			require.NotEmpty(t, wins, "a vacancy before any win")
			require.Equal(t, wins[len(wins)-1], info.Epoch, "a vacancy of another epoch than the last win's")
			if info.Epoch == last {
				break
			}
			continue
		}
		assert.Equal(t, fmt.Sprint("v", info.Epoch), info.Value)
		wins = append(wins, info.Epoch)
	}
	want := make([]uint64, last)
	for k := range want {
		want[k] = uint64(k + 1)
	}
	assert.Equal(t, want, wins)
}
