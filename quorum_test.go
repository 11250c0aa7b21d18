package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/quorum"
)

func newFakeClient(t *testing.T, fs []*fakeMaster, opts *Options) *Client {
	t.Helper()
	c, err := New(fs, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func TestAcquireExtendReleaseAllAgree(t *testing.T) {
	fs := fakes(5)
	c := newFakeClient(t, fs, nil)
	before := time.Now()
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "k", l.Key())
	assert.Len(t, l.Value(), 26, "128 random bits as base32 text")
	// Until = start + ttl - drift, with start between before and now.
	drift := quorum.Drift(time.Second, DefaultDriftFactor)
	assert.False(t, l.Until().Before(before.Add(time.Second-drift)))
	assert.False(t, l.Until().After(time.Now().Add(time.Second-drift)))

	require.NoError(t, c.Close()) // wait for background calls
	c = newFakeClient(t, fs, nil)
	l.client = c
	for _, f := range fs {
		v, ok := f.get("{k}")
		assert.True(t, ok)
		assert.Equal(t, l.Value(), v)
	}
	require.NoError(t, l.Extend(context.Background(), 2*time.Second))
	require.NoError(t, l.Release(context.Background()))
	require.NoError(t, c.Close())
	for _, f := range fs {
		_, ok := f.get("{k}")
		assert.False(t, ok, "released everywhere")
	}
	assert.False(t, l.Held())
}

func TestAcquireDecidesWithoutWaitingForSlowMasters(t *testing.T) {
	fs := fakes(5)
	fs[3].block(false) // ignores contexts, like a client without ContextTimeoutEnabled
	fs[4].block(false)
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Hour})
	l, err := c.Acquire(context.Background(), "k", 4*time.Hour)
	require.NoError(t, err, "three fast masters are a quorum")
	assert.Empty(t, fs[3].callNames(), "decided while the slow masters had not answered")
	fs[3].unblock()
	fs[4].unblock()
	require.NoError(t, c.Close())
	v, _ := fs[4].get("{k}")
	assert.Equal(t, l.Value(), v, "a late yes after success stays part of the lock")
}

func TestFailedAcquireUndoesLateYes(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[:3] {
		f.set("{k}", "someone-else")
	}
	fs[3].block(false)
	fs[4].block(false)
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Hour})
	_, err := c.Acquire(context.Background(), "k", 4*time.Hour)
	require.ErrorIs(t, err, ErrNotObtained)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 0, qe.Agreed)
	assert.ErrorIs(t, qe.Masters[3].Err, ErrNoReply, "decided by three refusals: no wait for the slow masters")
	fs[3].unblock()
	fs[4].unblock()
	require.NoError(t, c.Close())
	for _, f := range fs[3:] {
		_, held := f.get("{k}")
		assert.False(t, held, "the late yes was released")
		assert.Equal(t, []string{"acquire", "release"}, f.callNames())
	}
}

func TestFailedAcquireReleasesItsPartialLocks(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[2:] {
		f.set("{k}", "someone-else")
	}
	c := newFakeClient(t, fs, nil)
	_, err := c.Acquire(context.Background(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	// No Close here: Acquire itself waits for the release where it saw a
	// yes (a yes that came after the decision may be undone later).
	for i, f := range fs[:2] {
		if qe.Masters[i].Agreed {
			_, held := f.get("{k}")
			assert.False(t, held, "partial lock on master %d released before Acquire returned", i)
		}
	}
	assert.Contains(t, err.Error(), " of 5 masters agreed, 3 needed, 3 refused")
	assert.Contains(t, err.Error(), "master2: held by another owner; master3: held by another owner; master4: held by another owner)")
}

func TestMasterTimeoutBoundsTheDecision(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[:3] {
		f.block(false) // never answers within the test
	}
	c := newFakeClient(t, fs, &Options{MasterTimeout: 20 * time.Millisecond})
	_, err := c.Acquire(context.Background(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context did not end")
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Agreed)
	failed := qe.Failed()
	require.Len(t, failed, 3)
	for i, m := range failed {
		assert.Equal(t, c.nodes[i].name, m.Master)
		assert.ErrorIs(t, m.Err, ErrMasterTimeout)
	}
	for _, f := range fs[3:] {
		_, held := f.get("{k}")
		assert.False(t, held)
	}
	for _, f := range fs[:3] {
		f.unblock()
	}
}

func TestCancelledAcquireCleansUpWithFreshContext(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[2:] {
		f.block(true)
	}
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(fs[1].callNames()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := c.Acquire(ctx, "k", 4*time.Hour)
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	// The undo runs in the background, on a context of its own.
	for _, f := range fs[:2] {
		assert.Eventually(t, func() bool { _, held := f.get("{k}"); return !held },
			5*time.Second, time.Millisecond, "released although the caller's context was cancelled")
	}
	for _, f := range fs[2:] {
		f.unblock()
	}
}

func TestExpiredValidityIsNotObtained(t *testing.T) {
	fs := fakes(3)
	for _, f := range fs {
		f.block(false)
	}
	// drift = 1.96s+2ms of a 2s TTL: any round slower than 38ms has no validity left.
	c := newFakeClient(t, fs, &Options{MasterTimeout: 500 * time.Millisecond, DriftFactor: 0.98})
	go func() {
		time.Sleep(60 * time.Millisecond)
		for _, f := range fs {
			f.unblock()
		}
	}()
	_, err := c.Acquire(context.Background(), "k", 2*time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.True(t, qe.Expired)
	assert.GreaterOrEqual(t, qe.Agreed, 2)
	require.NoError(t, c.Close())
	for _, f := range fs {
		_, held := f.get("{k}")
		assert.False(t, held, "a lock without validity is released")
	}
}

func TestRecoversFromNoScript(t *testing.T) {
	fs := fakes(3)
	fs[0].cached = false // as after a restart
	c := newFakeClient(t, fs, nil)
	for range 2 {
		l, err := c.Acquire(context.Background(), "k", time.Second)
		require.NoError(t, err)
		// The quorum may decide before fs[0] answers. A release sent
		// meanwhile would find NOSCRIPT too, and load it a second time.
		require.Eventually(t, func() bool { return slices.Contains(fs[0].callNames(), "acquire") },
			5*time.Second, time.Millisecond, "fs[0] runs the acquire")
		require.NoError(t, l.Release(context.Background()))
	}
	require.NoError(t, c.Close())
	evals := 0
	for _, name := range fs[0].callNames() {
		if name == "EVAL" {
			evals++
		}
	}
	assert.Equal(t, 1, evals, "one EVAL loads the script, then EVALSHA: %v", fs[0].callNames())
	assert.Contains(t, fs[0].callNames(), "acquire")
	_, held := fs[0].get("{k}")
	assert.False(t, held)
}

func TestLateAgreementAfterReleaseIsUndone(t *testing.T) {
	fs := fakes(3)
	fs[2].block(false)
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Hour})
	l, err := c.Acquire(context.Background(), "k", 4*time.Hour)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()), "two of three held it")
	fs[2].unblock() // the acquire lands after the release: an orphan
	require.NoError(t, c.Close())
	_, held := fs[2].get("{k}")
	assert.False(t, held, "the late agreement was undone")
}

func TestLoadScripts(t *testing.T) {
	fs := fakes(2)
	fs[0].cached, fs[1].cached = false, false
	c := newFakeClient(t, fs, nil)
	require.NoError(t, c.LoadScripts(context.Background()))
	assert.True(t, fs[0].cached && fs[1].cached)
}

func TestExtendAfterValidityWritesNothing(t *testing.T) {
	fs := fakes(3)
	noFencing := &Options{NoFencing: true} // a TTL shorter than 4*MasterTimeout
	c := newFakeClient(t, fs, noFencing)
	l, err := c.Acquire(context.Background(), "k", 100*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	c = newFakeClient(t, fs, noFencing)
	l.client = c
	time.Sleep(time.Until(l.Until()))
	err = l.Extend(context.Background(), time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	require.NoError(t, c.Close())
	for _, f := range fs {
		assert.Equal(t, []string{"acquire"}, f.callNames(), "no request sent")
	}
}

func TestExtendAndReleaseNeedOurValue(t *testing.T) {
	fs := fakes(5)
	c := newFakeClient(t, fs, nil)
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	c = newFakeClient(t, fs, nil)
	l.client = c
	for _, f := range fs[:3] {
		f.set("{k}", "someone-else") // our keys expired and were taken
	}
	err = l.Extend(context.Background(), time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "extend", qe.Op)
	assert.Less(t, qe.Agreed, 3)

	err = l.Release(context.Background())
	require.ErrorIs(t, err, ErrNotHeld, "held by only two of five")
	require.NoError(t, c.Close())
	for _, f := range fs[:3] {
		v, _ := f.get("{k}")
		assert.Equal(t, "someone-else", v, "another value is never touched")
	}
	for _, f := range fs[3:] {
		_, held := f.get("{k}")
		assert.False(t, held, "our leftovers are deleted")
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, nil)
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	assert.False(t, l.Held())
	for range 2 {
		assert.ErrorIs(t, l.Release(context.Background()), ErrNotHeld)
	}
	assert.ErrorIs(t, l.Extend(context.Background(), time.Second), ErrNotHeld)
}

func TestMasterErrorsAreReported(t *testing.T) {
	fs := fakes(3)
	boom := errors.New("boom")
	fs[0].err, fs[1].err = boom, boom
	c := newFakeClient(t, fs, nil)
	_, err := c.Acquire(context.Background(), "k", time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Quorum)
	assert.ErrorIs(t, qe.Masters[0].Err, boom)
	assert.NotErrorIs(t, err, boom, "per-master errors stay in Masters")
	assert.Contains(t, err.Error(), "master0: boom")
}

func TestClosedClient(t *testing.T) {
	c, err := New(fakes(1), nil)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = c.Acquire(context.Background(), "k", time.Second)
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, c.LoadScripts(context.Background()), ErrClosed)
}

func TestFencingTokensIncreaseAcrossDivergedCounters(t *testing.T) {
	fs := fakes(3)
	// This master's counter is ahead of the clock: it saw acquisitions
	// the others missed.
	ahead := time.Now().Add(time.Hour).UnixMicro()
	fs[0].counters["{k}"] = ahead
	c := newFakeClient(t, fs, nil)
	ctx := context.Background()

	l, err := c.Acquire(ctx, "k", time.Second)
	require.NoError(t, err)
	first := l.Token()
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	if first == uint64(ahead+1) {
		raised := 0
		for _, f := range fs {
			assert.Contains(t, f.callNames(), "fence", "counters differed: a raise round")
			if f.counters["{k}"] == ahead+1 {
				raised++
			}
		}
		assert.GreaterOrEqual(t, raised, 2, "a quorum's counters reach the token")
	} else {
		assert.Less(t, first, uint64(ahead), "the quorum without the ahead master agreed on a proposal")
		for _, f := range fs {
			assert.NotContains(t, f.callNames(), "fence", "the counters agreed: no raise round")
		}
	}

	c = newFakeClient(t, fs, nil)
	l, err = c.Acquire(ctx, "k", time.Second)
	require.NoError(t, err)
	assert.Greater(t, l.Token(), first, "strictly larger than the token before")
	require.NoError(t, l.Release(ctx))
}

func TestReentrantHoldsAndToken(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, nil)
	ctx := context.Background()
	l, err := c.AcquireAs(ctx, "k", "owner-1", time.Second)
	require.NoError(t, err)
	token := l.Token()
	require.NoError(t, l.Reenter(ctx))
	assert.Equal(t, 2, l.Holds())
	assert.Equal(t, token, l.Token(), "re-entering keeps the token")
	_, err = c.AcquireAs(ctx, "k", "owner-2", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, l.Release(ctx))
	assert.True(t, l.Held(), "one hold left")
	require.NoError(t, l.Release(ctx))
	assert.False(t, l.Held())
	require.ErrorIs(t, l.Reenter(ctx), ErrNotHeld)
	require.NoError(t, c.Close())
	for _, f := range fs {
		_, held := f.get("{k}")
		assert.False(t, held)
	}
}

func TestNoFencing(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{NoFencing: true})
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	assert.Zero(t, l.Token())
}

func TestLostSignal(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{NoFencing: true}) // a TTL shorter than 4*MasterTimeout
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", 100*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, l.Err())
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the validity ran out")
	}
	assert.False(t, time.Now().Before(l.Until()), "not before the deadline")
	require.ErrorIs(t, l.Err(), ErrNotHeld)
	require.ErrorIs(t, context.Cause(l.Context()), ErrNotHeld)

	l, err = c.Acquire(ctx, "k2", time.Second)
	require.NoError(t, err)
	done := l.Done()
	require.NoError(t, l.Release(ctx))
	<-done
	require.ErrorIs(t, l.Err(), ErrReleased)
}

func TestOlderLockOfSameOwnerCannotDeleteNewer(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, nil)
	ctx := context.Background()
	l1, err := c.AcquireAs(ctx, "k", "owner", time.Second)
	require.NoError(t, err)
	require.NoError(t, l1.Release(ctx))
	// Release returns once a quorum answered; the setup needs the delete
	// everywhere, so that the newer Lock is granted on every master.
	require.Eventually(t, func() bool {
		for _, f := range fs {
			if _, held := f.get("{k}"); held {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	l2, err := c.AcquireAs(ctx, "k", "owner", time.Second)
	require.NoError(t, err)
	// A late call of the first Lock (an undo, a second delete) arrives now.
	for i := range fs {
		l1.dropOn(ctx, i, true)
	}
	require.NoError(t, c.Close())
	for _, f := range fs {
		v, held := f.get("{k}")
		assert.True(t, held && v == "owner", "the newer Lock still holds every master")
	}
	c = newFakeClient(t, fs, nil)
	l2.client = c
	require.NoError(t, l2.Release(ctx))
}

func TestReleaseWithEndedContextStillReleases(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, nil)
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, l.Release(ctx), "a release must not be lost to an ended context")
	require.NoError(t, c.Close())
	for _, f := range fs {
		_, held := f.get("{k}")
		assert.False(t, held)
	}
}

// TestExtendThatSendsNothingKeepsUntil: an Extend to a shorter TTL whose
// context has already ended sends nothing, so it leaves Until alone.
func TestExtendThatSendsNothingKeepsUntil(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{MasterTimeout: 50 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "k", time.Minute)
	require.NoError(t, err)
	until := l.Until()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Extend(ctx, time.Second)
	require.ErrorIs(t, err, ErrNoQuorum, "no master answered: the lock is still held")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, until, l.Until())
	for _, f := range fs {
		assert.NotContains(t, f.callNames(), "extend")
	}
}

// TestReleaseAfterClose: Close ended the lock, which stays on the masters
// until it expires; a Release afterwards sends nothing, says so, and leaves
// the Lock as Close left it, whether its signal was made before or not.
func TestReleaseAfterClose(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) {
			fs := fakes(3)
			c, err := New(fs, nil)
			require.NoError(t, err)
			ctx := context.Background()
			l, err := c.Acquire(ctx, "k", 10*time.Second)
			require.NoError(t, err)
			if watched {
				l.Done()
			}
			require.NoError(t, c.Close())
			require.ErrorIs(t, l.Release(ctx), ErrClosed)
			assert.ErrorIs(t, l.Err(), ErrClosed)
			assert.Equal(t, 1, l.Holds())
			for _, f := range fs {
				assert.NotContains(t, f.callNames(), "release")
			}
		})
	}
}
