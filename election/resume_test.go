package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/internal/harness"
)

// longestPTTL is the longest TTL that the masters of cl have left on the
// election's lock.
func longestPTTL(t *testing.T, cl *harness.Cluster, name string) time.Duration {
	t.Helper()
	longest := time.Duration(0)
	for _, m := range cl.Masters {
		c := redis.NewClient(harness.MasterOptions(m.Addr()))
		d, err := c.PTTL(t.Context(), "{"+name+"}").Result()
		_ = c.Close()
		require.NoError(t, err)
		longest = max(longest, d)
	}
	return longest
}

// TestResumeAfterRestart: a leader's process goes away (its client is
// closed, its lock left on the masters); another process resumes the
// lead by the leader's Owner. Same epoch, validity from the remaining
// TTL, Proclaim goes on where the leader's left off, observers see it
// all in order, and Resign hands the lead to the next candidate. A wrong
// owner changes nothing.
func TestResumeAfterRestart(t *testing.T) {
	ctx := t.Context()
	cl, observer := own(t)
	name := t.Name()
	// The TTL is long enough that no renewal lands between Resume and
	// the check of its validity: the first comes 2s after it at least.
	opts := &election.Options{TTL: 6 * time.Second}
	masters := make([]*redis.Client, len(cl.Masters))
	for i, m := range cl.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
		t.Cleanup(func() { _ = masters[i].Close() })
	}
	clientA, err := redlock.New(masters, &redlock.Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	a := newElection(t, clientA, name, opts)
	b := newElection(t, own2(t, cl), name, opts)

	_, err = b.Resume(ctx, "nobody")
	require.ErrorIs(t, err, election.ErrNoLeader, "nothing to resume")

	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := newElection(t, observer, name, opts).Observe(octx)
	assert.True(t, next(t, ch, 5*time.Second).Vacant)

	la, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, la.Proclaim(ctx, "a1"))
	owner, epoch := la.Owner(), la.Epoch()
	require.NotEmpty(t, owner)

	_, err = b.Resume(ctx, "nobody")
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a wrong owner")
	require.NoError(t, la.Err(), "a wrong owner changes nothing")
	require.NoError(t, la.Proclaim(ctx, "a2"), "a still leads")

	require.NoError(t, clientA.Close()) // a's process is gone; its lock stays
	assert.ErrorIs(t, la.Err(), election.ErrLost)
	time.Sleep(300 * time.Millisecond) // the TTL runs down: Resume must not restore it

	before := time.Now()
	pttl := longestPTTL(t, cl, name)
	lb, err := b.Resume(ctx, owner)
	require.NoError(t, err)
	assert.False(t, lb.Until().After(before.Add(pttl)), "validity %v past the remaining TTL %v", lb.Until().Sub(before), pttl)
	assert.True(t, lb.Until().After(time.Now()))
	assert.Equal(t, epoch, lb.Epoch())
	assert.Equal(t, "a2", lb.Value(), "the leader's last value")
	assert.Equal(t, owner, lb.Owner())
	require.NoError(t, lb.Err())
	info, err := b.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.LeaderInfo{Epoch: epoch, Seq: 2, Value: "a2", Until: info.Until}, info)

	// A second Resume, a third process say, takes the lead from the first
	// one that still runs.
	old := lb
	lb, err = newElection(t, own2(t, cl), name, opts).Resume(ctx, owner)
	require.NoError(t, err)
	assert.Equal(t, epoch, lb.Epoch())
	assert.Error(t, old.Proclaim(ctx, "stale"), "the old leadership cannot proclaim")
	select {
	case <-old.Done():
		assert.ErrorIs(t, old.Err(), election.ErrLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the old leadership did not end")
	}

	require.NoError(t, lb.Proclaim(ctx, "b3"))
	info, err = b.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), info.Seq, "the next sequence after the leader's last")
	assert.Equal(t, "b3", info.Value)

	c := newElection(t, observer, name, opts)
	pending := campaign(ctx, c, "c")
	require.NoError(t, lb.Resign(ctx))
	var r result
	select {
	case r = <-pending:
	case <-time.After(5 * time.Second):
		t.Fatal("the next candidate did not lead after Resign")
	}
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Epoch(), epoch)

	var got []string
	for range 6 {
		got = append(got, brief(next(t, ch, 5*time.Second)))
	}
	assert.Equal(t, []string{"a/0", "a1/1", "a2/2", "b3/3", "vacant", "c/0"}, got)
	require.NoError(t, r.l.Resign(ctx))
}

// TestResumeBadInput: bad arguments get an error wrapping
// redlock.ErrInvalidArgument.
func TestResumeBadInput(t *testing.T) {
	e := newElection(t, shared(t), t.Name(), nil)
	_, err := e.Resume(t.Context(), "")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	var nilCtx context.Context
	_, err = e.Resume(nilCtx, "owner")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	var zero election.Election
	_, err = zero.Resume(t.Context(), "owner")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.Resume(cancelled, "owner")
	assert.ErrorIs(t, err, context.Canceled)
}
