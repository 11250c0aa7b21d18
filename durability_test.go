package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// durableID is a master's identity with replicas and a quarantine the
// test sets. A fake master sends no WAIT: no replica ever acknowledges.
// Nor does it send ROLE: Role answers what the test set in role and
// connected instead, as ROLE would after the write.
type durableID struct {
	replicas    atomic.Int32
	quarantined atomic.Bool
	unannounced atomic.Bool
	role        atomic.Pointer[string] // nil: "master"
	connected   atomic.Int32           // what ROLE lists; -1: the cached count
	roles       atomic.Int32           // calls of Role
}

func (d *durableID) Known() (string, error, bool)          { return "", nil, true }
func (d *durableID) Admit(context.Context) (string, error) { return "", nil }
func (d *durableID) Last() string                          { return "" }
func (d *durableID) Replicas() int                         { return int(d.replicas.Load()) }
func (d *durableID) Unannounced() bool                     { return d.unannounced.Load() }

func (d *durableID) Role(pipeline.Role) (int, error) {
	d.roles.Add(1)
	if r := d.role.Load(); r != nil && *r != "master" {
		return 0, fmt.Errorf("%w (role %s)", ErrReplica, *r)
	}
	n := d.connected.Load()
	if n < 0 {
		return d.Replicas(), nil
	}
	d.replicas.Store(n) // as idCache does
	return int(n), nil
}

func (d *durableID) Unreplicated(acked, replicas int, cause error) error {
	return fmt.Errorf("%w (%d of %d)", ErrNotReplicated, acked, replicas)
}

func (d *durableID) Quarantine() error {
	if d.quarantined.Load() {
		return ErrQuarantined
	}
	return nil
}

// durableClient is a Client of fake masters whose identities are ids.
func durableClient(t *testing.T, fs []*fakeMaster) (*Client, []*durableID) {
	t.Helper()
	c := newFakeClient(t, fs, &Options{MasterTimeout: time.Second})
	ids := make([]*durableID, len(fs))
	ms := make([]quorum.Master, len(fs))
	for i := range fs {
		ids[i] = &durableID{}
		ids[i].connected.Store(-1)
		ms[i] = quorum.Master{Client: c.nodes[i].client, Pipe: c.nodes[i].pipe, ID: ids[i]}
	}
	c.engine = quorum.New(quorum.Config{
		Quorum:        c.quorum,
		MasterTimeout: c.masterTimeout,
		DriftFactor:   c.driftFactor,
		Work:          &c.gate,
	}, ms)
	return c, ids
}

// TestUnreplicatedAgreementDoesNotCount: a master with replicas whose
// write no replica acknowledged agreed, but does not count. Its error
// says so, distinct from a refusal. The failed acquire is undone there.
// An extend that too few masters count leaves the lock held: it is not
// proof of loss.
func TestUnreplicatedAgreementDoesNotCount(t *testing.T) {
	fs := fakes(3)
	c, ids := durableClient(t, fs)
	ctx := t.Context()

	ids[0].replicas.Store(1)
	fs[1].set("{k}", "other")
	_, err := c.Acquire(ctx, "k", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.False(t, qe.Masters[0].Agreed)
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated, "%v", qe.Masters[0].Err)
	assert.Contains(t, qe.Error(), "1 did not count")
	_, held := fs[0].get("{k}")
	assert.False(t, held, "undone on the master that agreed")

	// Two agreements held back cost the quorum: the error says so.
	fs[1].mu.Lock()
	delete(fs[1].data, "{k}")
	fs[1].mu.Unlock()
	ids[1].replicas.Store(1)
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, err, ErrNotReplicated, "it cost the quorum")
	assert.NotErrorIs(t, err, ErrQuarantined)
	ids[1].replicas.Store(0)

	// Where the others refuse, it did not cost the quorum.
	fs[1].set("{k}", "other")
	fs[2].set("{k}", "other")
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
	assert.NotErrorIs(t, err, ErrNotReplicated, "held elsewhere: it would not have counted")
	for _, f := range fs[1:] {
		f.mu.Lock()
		delete(f.data, "{k}")
		f.mu.Unlock()
	}

	ids[0].replicas.Store(0)
	l, err := c.Acquire(ctx, "j", 10*time.Second)
	require.NoError(t, err)
	ids[0].replicas.Store(1)
	ids[1].replicas.Store(1)
	err = l.Extend(ctx, 10*time.Second)
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, err, ErrNoQuorum, "unreplicated is no refusal: the lock may be held")
	assert.NotErrorIs(t, err, ErrNotHeld)
	assert.True(t, l.Held())
	ids[0].replicas.Store(0)
	ids[1].replicas.Store(0)
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, l.Release(ctx))
}

// TestQuarantineRefusesOnlyNewLocks: a master in quarantine counts
// toward no new lock. An extend and a re-entry, which need the lock held
// there, still count it: they cannot agree on a master that lost it.
func TestQuarantineRefusesOnlyNewLocks(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ctx := t.Context()

	l, err := c.AcquireAs(ctx, "held", "owner", 10*time.Second)
	require.NoError(t, err)
	ids[0].quarantined.Store(true)
	require.NoError(t, l.Extend(ctx, 10*time.Second), "an extend counts it")
	require.NoError(t, l.Reenter(ctx), "a re-entry counts it")

	_, err = c.Acquire(ctx, "new", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, ErrQuarantined)
	assert.ErrorIs(t, err, ErrQuarantined, "it cost the quorum")
	_, held := fs[0].get("{new}")
	assert.False(t, held, "undone")

	ids[0].quarantined.Store(false)
	l2, err := c.Acquire(ctx, "new", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
}

// TestQuarantineAfterARestartSeen: a master restarted with a new run_id,
// which the client saw, counts toward no new lock until the longest TTL
// the client asked for has passed.
func TestQuarantineAfterARestartSeen(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	c, err := New(cl.Clients(), &Options{MasterTimeout: 750 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := t.Context()
	const ttl = 3 * time.Second

	l, err := c.Acquire(ctx, "k", ttl)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, cl.Masters[0].Restart(ctx))
	seen := time.Now()

	// The first attempt may meet the connection the restart closed.
	var qe *QuorumError
	for attempt := 0; ; attempt++ {
		_, err = c.Acquire(ctx, "k", ttl)
		require.ErrorAs(t, err, &qe)
		if errors.Is(qe.Masters[0].Err, ErrQuarantined) || attempt == 3 {
			break
		}
	}
	require.ErrorIs(t, qe.Masters[0].Err, ErrQuarantined, "%v", err)
	assert.Contains(t, err.Error(), "run_id")

	time.Sleep(ttl - time.Since(seen) + 50*time.Millisecond)
	l, err = c.Acquire(ctx, "k", ttl)
	require.NoError(t, err, "after the longest TTL the master counts again")
	require.NoError(t, l.Release(ctx))
}

// TestWaitOnARealReplica: a master with a replica counts once the
// replica acknowledged the write. With the replica paused, its
// agreement does not count (ErrNotReplicated), and the acquire is undone.
func TestWaitOnARealReplica(t *testing.T) {
	cl, rs := replicatedMaster(t)
	ctx := t.Context()
	replica := rs.Masters[0]
	c := replicatedClient(t, cl.Masters[0].Addr(), nil)
	l, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, c.nodes[0].id.Replicas())
	v, err := rs.Admin(0).Get(ctx, "{k}").Result()
	require.NoError(t, err, "granted once the replica had it")
	assert.Contains(t, v, l.Value())
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, l.Release(ctx))

	require.NoError(t, replica.Pause(ctx))
	_, err = c.Acquire(ctx, "j", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated, "%v", err)
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged")
	n, err := cl.Admin(0).Exists(ctx, "{j}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "undone before Acquire returned")
}

// replicatedMaster starts a master with one replica, and waits until
// the replica is in sync. The replica is resumed at cleanup.
func replicatedMaster(t *testing.T) (master, replica *harness.Cluster) {
	t.Helper()
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	_, port, err := net.SplitHostPort(cl.Masters[0].Addr())
	require.NoError(t, err)
	rs := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--replicaof", "127.0.0.1", port}})
	t.Cleanup(func() { _ = rs.Masters[0].Resume(context.Background()) })
	require.Eventually(t, func() bool {
		info, err := rs.Admin(0).Info(t.Context(), "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	}, 10*time.Second, 10*time.Millisecond)
	return cl, rs
}

// renewalLog is an Observer that keeps the renewals' events.
type renewalLog struct {
	mu       sync.Mutex
	renewed  int
	failures []error
}

func (o *renewalLog) ObserveRound(context.Context, Round) {}

func (o *renewalLog) ObserveEvent(_ context.Context, e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e.Kind {
	case EventRenewed:
		o.renewed++
	case EventRenewalFailed:
		o.failures = append(o.failures, e.Err)
	}
}

func (o *renewalLog) counts() (renewed int, failures []error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.renewed, slices.Clone(o.failures)
}

// cmdstatCalls returns how many times the server ran cmd.
func cmdstatCalls(t *testing.T, rc *redis.Client, cmd string) int {
	t.Helper()
	info, err := rc.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err)
		return n
	}
	return 0
}

// TestRenewalsWaitOnARealReplica: auto-renewed locks on a master with a
// replica are renewed with WAIT, as Extend is: the batches' calls are
// followed by it. Without it a failover could lose a renewal, and the
// promoted replica would let the lock go while its owner holds it. With
// the replica paused, no renewal counts (ErrNotReplicated), and the lock
// is lost. The test counts; it times nothing.
func TestRenewalsWaitOnARealReplica(t *testing.T) {
	cl, rs := replicatedMaster(t)
	ctx := t.Context()
	obs := &renewalLog{}
	c := replicatedClient(t, cl.Masters[0].Addr(), obs)
	const locks = 20
	held := make([]*Lock, locks)
	for i := range held {
		l, err := c.Acquire(ctx, fmt.Sprintf("renew-%d", i), 3*time.Second)
		require.NoError(t, err)
		held[i] = l
	}
	waits := cmdstatCalls(t, cl.Admin(0), "wait")
	for _, l := range held {
		l.AutoRenew()
	}
	// Two renewals of each lock, about a second apart.
	require.Eventually(t, func() bool {
		renewed, _ := obs.counts()
		return renewed >= 2*locks
	}, 20*time.Second, 10*time.Millisecond)
	_, failures := obs.counts()
	assert.Empty(t, failures)
	// A pipeline's batch of calls shares one WAIT: at least one went per
	// renewer's batch, and there were two at least. Nothing else ran.
	assert.GreaterOrEqual(t, cmdstatCalls(t, cl.Admin(0), "wait")-waits, 2,
		"renewals went without WAIT")
	for _, l := range held {
		assert.True(t, l.Held(), "%s", l.Key())
	}

	// Paused, the replica acknowledges nothing: no renewal counts.
	require.NoError(t, rs.Masters[0].Pause(ctx))
	l := held[0]
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the lock outlived its validity without a replicated renewal")
	}
	require.ErrorIs(t, l.Err(), ErrNotHeld)
	// Lost by a renewal that failed, or by its validity running out while
	// other renewals waited for WAIT: never renewed without the replica.
	var qe *QuorumError
	if errors.As(l.Err(), &qe) {
		assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated, "%v", l.Err())
	}
	_, failures = obs.counts()
	for _, err := range failures {
		if assert.ErrorAs(t, err, &qe) {
			assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated, "%v", err)
		}
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}

// TestWaitTargetIsReadOnce: the verdict judges the WAIT's answer against
// the replica count read when the call was sent. A count that drops
// while the call is in flight (an INFO of another round: a replica that
// acked and then died) must not let an agreement count whose WAIT for 1
// replica got 0.
func TestWaitTargetIsReadOnce(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ctx := t.Context()
	ids[0].replicas.Store(1) // WAIT 1 is asked for; the fake acks none
	fs[0].block(false)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", 10*time.Second)
		done <- err
	}()
	require.Eventually(t, func() bool { return fs[0].entered.Load() > 0 }, 5*time.Second, time.Millisecond)
	ids[0].replicas.Store(0) // the count drops while the call is in flight
	fs[0].unblock()
	err := <-done
	var qe *QuorumError
	require.ErrorAs(t, err, &qe, "an agreement whose WAIT for 1 replica got 0 acks counted")
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
}

// TestReplicaSeenByRoleIsWaitedFor: a master cached with no replica, but
// reached through Sentinel, has its write followed by ROLE. Where ROLE
// lists a replica, the agreement does not count: no WAIT covered it. The
// count is updated, so the next round waits for that replica. A master
// through a plain client known to have no replica sends no ROLE.
func TestReplicaSeenByRoleIsWaitedFor(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ctx := t.Context()

	l, err := c.Acquire(ctx, "plain", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	assert.Zero(t, ids[0].roles.Load(), "no replica known, no Sentinel: no ROLE")

	ids[0].unannounced.Store(true)
	ids[0].connected.Store(1) // a replica joined unseen
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe, "an agreement counted that no WAIT covered, with a replica connected")
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
	assert.Contains(t, qe.Masters[0].Err.Error(), "0 of 1")
	assert.Equal(t, 1, ids[0].Replicas(), "the count follows ROLE")
	_, held := fs[0].get("{k}")
	assert.False(t, held, "undone")

	// A master known to have a replica sends ROLE through a plain client
	// too: a second replica that joined is seen.
	ids[0].unannounced.Store(false)
	ids[0].connected.Store(2)
	roles := ids[0].roles.Load()
	_, err = c.Acquire(ctx, "k", 10*time.Second)
	require.ErrorAs(t, err, &qe)
	assert.Contains(t, qe.Masters[0].Err.Error(), "0 of 2")
	assert.Greater(t, ids[0].roles.Load(), roles)
}

// TestRoleSaysReplica: a server whose ROLE, right after the write, says
// it is a replica does not count, whatever the cached identity says.
func TestRoleSaysReplica(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ids[0].unannounced.Store(true)
	ids[0].connected.Store(0)
	slave := "slave"
	ids[0].role.Store(&slave)
	_, err := c.Acquire(t.Context(), "k", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, ErrReplica)
}

// TestReleaseIsLossy: a release need not reach the replicas. A lost
// release leaves the lock until its TTL, which is safe. So it counts on
// a master whose replicas acknowledge nothing.
func TestReleaseIsLossy(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ctx := t.Context()
	l, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	ids[0].replicas.Store(1)
	ids[0].connected.Store(1)
	require.NoError(t, l.Release(ctx), "a release waits for no replica")
	_, held := fs[0].get("{k}")
	assert.False(t, held)
}

// TestQuarantineRunsOnTheMonotonicClock: the quarantine's start keeps a
// monotonic clock reading. A step of the wall clock (NTP, an operator)
// then neither ends it early nor stretches it.
func TestQuarantineRunsOnTheMonotonicClock(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rc.Close() })
	var longest atomic.Int64
	longest.Store(int64(time.Minute))
	id := newIDCache(rc, &longest)
	id.current.Store(&serverID{runID: "a", role: "master"})
	id.mu.Lock()
	id.seen(&serverID{runID: "b", role: "master"})
	id.mu.Unlock()
	changed := id.changed.Load()
	require.NotNil(t, changed)
	// time.Time.String shows the monotonic reading as "m=±<seconds>".
	assert.Contains(t, changed.String(), " m=", "the start has no monotonic reading: wall-clock steps move it")
	assert.ErrorIs(t, id.Quarantine(), ErrQuarantined)
}

// TestSentinelMastersAreUnannounced: a master reached through Sentinel
// may gain replicas unseen, so its writes are followed by ROLE. One
// reached through a plain client is not.
func TestSentinelMastersAreUnannounced(t *testing.T) {
	var longest atomic.Int64
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = fc.Close() })
	assert.True(t, newIDCache(fc, &longest).Unannounced())
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rc.Close() })
	assert.False(t, newIDCache(rc, &longest).Unannounced())
}

// TestReplicaLearnedInFlightIsWaitedFor: a master identified only after
// its call was sent (its first round, or a new connection) may turn out
// to have a replica. No WAIT covered the write: without ROLE, the count
// cached at the verdict decides, and the agreement does not count.
func TestReplicaLearnedInFlightIsWaitedFor(t *testing.T) {
	fs := fakes(1)
	c, ids := durableClient(t, fs)
	ctx := t.Context()
	fs[0].block(false)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", 10*time.Second)
		done <- err
	}()
	require.Eventually(t, func() bool { return fs[0].entered.Load() > 0 }, 5*time.Second, time.Millisecond)
	ids[0].replicas.Store(1) // INFO, after the call, shows a replica
	fs[0].unblock()
	err := <-done
	var qe *QuorumError
	require.ErrorAs(t, err, &qe, "an agreement counted that no WAIT covered")
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
	assert.Zero(t, ids[0].roles.Load(), "no ROLE for a plain master without replicas")
}

// renewRounds is an Observer that passes on each renew round.
type renewRounds chan Round

func (o renewRounds) ObserveRound(_ context.Context, r Round) {
	if r.Op == "renew" {
		select {
		case o <- r:
		default:
		}
	}
}

func (renewRounds) ObserveEvent(context.Context, Event) {}

// TestBatchedRenewalJudgesReplication: a renewal batch's agreement on a
// master with replicas counts only once WAIT saw them take it, as an
// extend's: a fake master's WAIT acknowledges none, so master 0 reports
// ErrNotReplicated. Master 1, reached through Sentinel (unannounced
// replicas), is judged by its ROLE, and counts. Master 2 stalls, so the
// round waits for its deadline: it reads both others, and fails.
func TestBatchedRenewalJudgesReplication(t *testing.T) {
	fs := fakes(3)
	c, ids := durableClient(t, fs)
	obs := make(renewRounds, 16)
	c.observer = obs
	l, err := c.Acquire(t.Context(), "k", 4*time.Second)
	require.NoError(t, err)
	ids[0].replicas.Store(1)
	ids[1].unannounced.Store(true)
	fs[2].block(true)
	unblocked := false
	defer func() {
		if !unblocked {
			fs[2].unblock()
		}
	}()
	roles := ids[1].roles.Load()
	l.AutoRenew()
	var rd Round
	select {
	case rd = <-obs:
	case <-time.After(20 * time.Second):
		t.Fatal("no renewal")
	}
	require.Error(t, rd.Err, "a quorum without master 0's unreplicated agreement")
	assert.ErrorIs(t, rd.Masters[0].Err, ErrNotReplicated, "%v", rd.Masters[0].Err)
	assert.False(t, rd.Masters[0].Agreed)
	assert.True(t, rd.Masters[1].Agreed, "%v", rd.Masters[1].Err)
	assert.Greater(t, ids[1].roles.Load(), roles, "ROLE judged")
	assert.False(t, rd.Masters[2].Agreed)
	fs[2].unblock()
	unblocked = true
	_ = l.Release(t.Context())
}
