package redlock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldEverywhere waits until every master has answered the lock's calls
// so far: a round is decided by a quorum, and the others' calls may still
// be on their way.
func heldEverywhere(t *testing.T, fs []*fakeMaster, calls int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, f := range fs {
			if len(f.callNames()) < calls {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "every master answered %d calls", calls)
}

// TestStalledMastersAreNoQuorumNotNotHeld: an extend or release that too
// few masters answer in time cannot tell whether the lock is held. Its
// error matches ErrNoQuorum, not ErrNotHeld ("may have overlapped"), says
// the lock may still be held, and the lock is not lost.
func TestStalledMastersAreNoQuorumNotNotHeld(t *testing.T) {
	ctx := context.Background()
	fs := fakes(5)
	// Timing: the stalled masters answer nothing until the test ends, and
	// the others in microseconds: the 1s MasterTimeout only bounds each
	// round, and leaves the fast masters a second to be scheduled.
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second})
	l, err := c.Acquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Reenter(ctx)) // two holds: the first Release leaves one
	heldEverywhere(t, fs, 2)
	stall(t, fs[2:]...)

	for _, tc := range []struct {
		op  string
		run func() error
	}{
		{"extend", func() error { return l.Extend(ctx, time.Minute) }},
		{"release", func() error { return l.Release(ctx) }}, // leaves a hold
		{"release", func() error { return l.Release(ctx) }}, // the last
	} {
		err := tc.run()
		require.ErrorIs(t, err, ErrNoQuorum, tc.op)
		assert.NotErrorIs(t, err, ErrNotHeld, "%s: timeouts prove nothing", tc.op)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		assert.Equal(t, 2, qe.Agreed)
		for _, m := range qe.Masters[2:] {
			assert.ErrorIs(t, m.Err, ErrMasterTimeout)
		}
		text := err.Error()
		t.Log(text)
		assert.True(t, strings.HasPrefix(text, `redlock: too few masters answered to decide: `+tc.op+` "k": 2 of 5 masters agreed, 3 needed, 3 gave no answer; the lock may still be held (master2: no reply within the master timeout; `), text)
		if l.Holds() > 0 {
			assert.NoError(t, l.Err(), "%s: the lock is not lost", tc.op)
			assert.True(t, l.Held())
		}
	}
}

// TestRefusalsStillProveNotHeld: where so many masters answer that they do
// not hold the lock that the others cannot make a quorum, an extend or
// release matches ErrNotHeld; where the masters that gave no answer could
// still make one, ErrNoQuorum.
func TestRefusalsStillProveNotHeld(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		refuse  int // masters 0..refuse-1 hold another owner's lock
		stall   int // the next ones give no answer
		want    error
		notWant error
		says    string
	}{
		// Decided by the third refusal: the others may not be heard.
		{"three refuse", 3, 0, ErrNotHeld, ErrNoQuorum, ` masters agreed, 3 needed, 3 refused`},
		{"two refuse, one stalls", 2, 1, ErrNoQuorum, ErrNotHeld, `2 of 5 masters agreed, 3 needed, 2 refused, 1 gave no answer; the lock may still be held (`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakes(5)
			c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second})
			l, err := c.Acquire(ctx, "k", time.Minute)
			require.NoError(t, err)
			require.NoError(t, l.Reenter(ctx))
			heldEverywhere(t, fs, 2)
			for _, f := range fs[:tc.refuse] {
				f.set("{k}", "thief")
			}
			stalled := fs[tc.refuse : tc.refuse+tc.stall]
			stall(t, stalled...)
			err = l.Release(ctx) // leaves a hold
			require.ErrorIs(t, err, tc.want)
			assert.NotErrorIs(t, err, tc.notWant)
			t.Log(err)
			assert.Contains(t, err.Error(), tc.says)
			if tc.want == ErrNotHeld {
				assert.ErrorIs(t, l.Err(), ErrNotHeld, "a quorum refused: lost")
			} else {
				assert.NoError(t, l.Err(), "the stalled master may hold it: not lost")
			}
		})
	}
}

// TestRenewalThatGivesUpSaysNotHeldOnce: a renewal that too few masters
// answer before the validity runs out loses the lock: Err matches
// ErrNotHeld (and still ErrNoQuorum), in one message.
func TestRenewalThatGivesUpSaysNotHeldOnce(t *testing.T) {
	ctx := context.Background()
	fs := fakes(3)
	// Timing: renewed 1s into the 3s TTL, the round times out at 2s; too
	// little is left for another (1s + MasterTimeout), so renewal gives
	// up then, about 0.97s before the validity runs out.
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second, NoFencing: true}) // timing needs MasterTimeout above a quarter of the TTL, and so no fencing
	l, err := c.Acquire(ctx, "k", 3*time.Second)
	require.NoError(t, err)
	heldEverywhere(t, fs, 1)
	stall(t, fs[1:]...)
	l.AutoRenew()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second): // the validity is under 3s
		t.Fatal("Done open long after the validity ran out")
	}
	err = l.Err()
	require.ErrorIs(t, err, ErrNotHeld)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe, "renewal, not the expiry timer, lost it: %v", err)
	assert.ErrorIs(t, err, ErrNoQuorum)
	text := err.Error()
	t.Log(text)
	assert.Equal(t, 1, strings.Count(text, "redlock:"), text)
	assert.True(t, strings.HasPrefix(text, `redlock: lock not held: renew "k": 1 of 3 masters agreed, 2 needed, 2 gave no answer; too little validity left to try again (`), text)
}

// acquireFails is a fake master whose acquires fail with err (the other
// scripts run).
type acquireFails struct {
	*fakeMaster
	err error
}

func (f *acquireFails) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if scriptName(sha) == "acquire" {
		return redis.NewCmdResult(nil, f.err)
	}
	return f.fakeMaster.EvalSha(ctx, sha, keys, args...)
}

// TestAcquireErrorCountsAgreementsByTheDecision: agreements that come
// after a failed acquire was decided, while it undoes what it took, are
// undone and do not count: Agreed and the message say what decided.
func TestAcquireErrorCountsAgreementsByTheDecision(t *testing.T) {
	fs := fakes(5)
	masters := make([]redis.Scripter, len(fs))
	for i, f := range fs {
		masters[i] = f
	}
	boom := errors.New("boom")
	for i := range 3 {
		masters[i] = &acquireFails{fs[i], boom}
	}
	for _, f := range fs[3:] {
		f.block(false)
	}
	// Timing: with errors alone the decider waits for the late masters
	// until the round's deadline, 10s: they answer milliseconds after the
	// decision.
	c, err := New(masters, &Options{MasterTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "k", time.Minute)
		errc <- err
	}()
	// The undo of the failed calls is sent once the round is decided.
	require.Eventually(t, func() bool { return slices.Contains(fs[0].callNames(), "release") }, 5*time.Second, time.Millisecond,
		"the round was decided by three errors")
	for _, f := range fs[3:] {
		f.unblock()
	}
	err = <-errc
	require.ErrorIs(t, err, ErrNotObtained)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 0, qe.Agreed, "no master agreed by the decision")
	for i, m := range qe.Masters[3:] {
		assert.False(t, m.Agreed, "master %d", i+3)
		assert.ErrorIs(t, m.Err, ErrNoReply, "master %d", i+3)
	}
	assert.Len(t, qe.Failed(), 5, "the late masters are among the failed")
	text := err.Error()
	t.Log(text)
	assert.Contains(t, text, `acquire "k": 0 of 5 masters agreed, 3 needed, 5 gave no answer (master0: boom; `)
	assert.Contains(t, text, "master3: no reply before the quorum was decided (it agreed later: undone)")
	require.NoError(t, c.Close())
	for _, f := range fs[3:] {
		_, held := f.get("{k}")
		assert.False(t, held, "the late agreement was undone")
	}
}

// TestLongKeysAreCutInErrors: a long key is quoted by its first bytes and
// its length, in every error that names it.
func TestLongKeysAreCutInErrors(t *testing.T) {
	ctx := context.Background()
	key := strings.Repeat("k", 1<<20)
	fs := fakes(3)
	for _, f := range fs[:2] {
		f.set("{"+key+"}", "thief")
	}
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second})
	want := `"` + strings.Repeat("k", 64) + `"…(1048576 bytes)`
	_, err := c.Acquire(ctx, key, time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Contains(t, err.Error(), `acquire `+want+`: `)
	assert.Less(t, len(err.Error()), 1000, "the key is not quoted whole")

	for _, f := range fs[:2] {
		f.mu.Lock()
		delete(f.data, "{"+key+"}")
		f.mu.Unlock()
	}
	l, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	err = l.Release(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Equal(t, `redlock: lock not held: release `+want+`: already released`, err.Error())

	assert.Equal(t, `"short"`, quote("short"))
	// A cut never splits a character: 63 bytes, then a 2-byte "é".
	long := strings.Repeat("a", 63) + strings.Repeat("é", 10)
	assert.Equal(t, `"`+strings.Repeat("a", 63)+`"…(83 bytes)`, quote(long))
}

// TestConnectionErrorsSayWhatHappened: a master that closed the
// connection reads as such, not as a bare "EOF", and a refused dial does
// not repeat the master's address; errors.Is and errors.As reach the
// network error.
func TestConnectionErrorsSayWhatHappened(t *testing.T) {
	fs := fakes(3)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	fs[0].err, fs[1].err = io.EOF, refused
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second})
	t.Cleanup(func() { // before Close: the undo's retries then succeed
		for _, f := range fs {
			f.mu.Lock()
			f.err = nil
			f.mu.Unlock()
		}
	})
	_, err := c.Acquire(context.Background(), "k", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, io.EOF)
	assert.ErrorIs(t, qe.Masters[1].Err, syscall.ECONNREFUSED)
	var op *net.OpError
	assert.ErrorAs(t, qe.Masters[1].Err, &op)
	// Master 2's yes may come after the two errors decided the round.
	assert.Contains(t, err.Error(), " (master0: connection closed (EOF); master1: connection refused")

	assert.Equal(t, "connection closed (unexpected EOF)", closedError(io.ErrUnexpectedEOF).Error())
	assert.Equal(t, "connection reset", closedError(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}).Error())
	assert.NoError(t, closedError(nil))
	assert.Same(t, assert.AnError, closedError(assert.AnError), "other errors as they are")
}

// TestReleaseAfterTheValidityRanOutIsNotHeld: a lock whose validity ran
// out before its release is not held, even where too few masters answer
// the release in time: the error matches ErrNotHeld, and ErrNoQuorum.
func TestReleaseAfterTheValidityRanOutIsNotHeld(t *testing.T) {
	ctx := context.Background()
	fs := fakes(3)
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second, NoFencing: true}) // timing needs MasterTimeout above a quarter of the TTL, and so no fencing
	l, err := c.Acquire(ctx, "k", 1500*time.Millisecond)
	require.NoError(t, err)
	heldEverywhere(t, fs, 1)
	stall(t, fs[1:]...)
	time.Sleep(time.Until(l.Until()))
	err = l.Release(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorIs(t, err, ErrNoQuorum)
	t.Log(err)
	assert.True(t, strings.HasPrefix(err.Error(), `redlock: lock not held: release "k": 1 of 3 masters agreed, 2 needed, 2 gave no answer; its validity had run out (`), err.Error())
}

// stall makes fs answer nothing until the test's cleanup, which runs
// before an earlier-registered Close waits for their calls.
func stall(t *testing.T, fs ...*fakeMaster) {
	t.Helper()
	for _, f := range fs {
		f.block(false)
	}
	t.Cleanup(func() {
		for _, f := range fs {
			f.unblock()
		}
	})
}

// ErrMasterSilent says once why the master told nothing, and still
// matches ErrNoReply: a silent master gave the round no reply. Its call
// may not even have been sent, so it does not say "no reply".
func TestMasterSilentSaysWhyOnce(t *testing.T) {
	assert.ErrorIs(t, ErrMasterSilent, ErrNoReply)
	assert.ErrorIs(t, ErrMasterSilent, ErrMasterSilent)
	assert.NotErrorIs(t, ErrNoReply, ErrMasterSilent)
	assert.NotErrorIs(t, ErrMasterSilent, ErrMasterTimeout)
	e := &QuorumError{
		Op: "acquire", Key: "k", Quorum: 2, sentinel: ErrNotObtained,
		Masters: []MasterResult{{Master: "m0", Err: ErrMasterSilent}, {Master: "m1", Agreed: true}, {Master: "m2", Err: ErrHeldElsewhere}},
		Agreed:  1,
	}
	assert.Equal(t, `redlock: lock not obtained: acquire "k": 1 of 3 masters agreed, 2 needed, 1 refused, 1 gave no answer (m0: master silent: not asked, or not waited for; m2: held by another owner)`, e.Error())
}
