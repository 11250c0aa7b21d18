package pipeline

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// replicator records a call's answer and its WAIT's.
type replicator struct {
	mu    sync.Mutex
	acked int
	role  Role
	told  bool // Replicated ran
	done  chan struct{}
}

func newReplicator() *replicator { return &replicator{acked: -1, done: make(chan struct{})} }

func (r *replicator) Replicated(rep Replication) {
	r.mu.Lock()
	r.acked, r.role, r.told = rep.Acked, rep.Role, true
	r.mu.Unlock()
}

func (r *replicator) Complete(int64, error) { close(r.done) }

func (r *replicator) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(testLimit):
		t.Fatal("no answer")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.True(t, r.told, "Replicated runs before Complete")
	return r.acked
}

// startReplicated starts a master with one replica in sync. It returns
// the master's Pipeline and the replica, which a test may pause.
func startReplicated(t *testing.T) (*Pipeline, harness.Master) {
	t.Helper()
	_, admin, p := startMaster(t, "--repl-diskless-sync-delay", "0")
	_, port, err := net.SplitHostPort(admin.Options().Addr)
	require.NoError(t, err)
	replicas := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--replicaof", "127.0.0.1", port}})
	ctx := t.Context()
	require.NoError(t, admin.Set(ctx, "marker", 1, 0).Err())
	poll(t, 10*time.Second, "replicated", func() bool {
		return replicas.Admin(0).Get(ctx, "marker").Val() == "1"
	})
	// ROLE lists a replica only once the master saw it online, which
	// can come after the replica has the data on a busy machine.
	poll(t, 10*time.Second, "listed by ROLE", func() bool {
		v, err := admin.Do(ctx, "ROLE").Slice()
		if err != nil || len(v) < 3 {
			return false
		}
		listed, _ := v[2].([]any)
		return len(listed) == 1
	})
	r := replicas.Masters[0]
	t.Cleanup(func() { _ = r.Resume(context.Background()) })
	return p, r
}

// TestWaitFollowsTheCallOnItsConnection: a call with Wait is answered
// with how many replicas acknowledged its own write. With the replica
// paused, WAIT gives up at WaitUntil with 0. A WAIT on a connection
// that wrote nothing would count the paused replica at once: so 0 also
// shows that the WAIT went behind the call, alone or in a batch.
func TestWaitFollowsTheCallOnItsConnection(t *testing.T) {
	p, replica := startReplicated(t)
	ctx := t.Context()
	keys := NewKeys("k")
	call := func(until time.Duration) *replicator {
		r := newReplicator()
		p.Go(ctx, incrScript, keys, nil, Options{Wait: 1, WaitUntil: time.Now().Add(until)}, r)
		return r
	}
	assert.Equal(t, 1, call(testLimit).wait(t), "the replica acknowledged")

	require.NoError(t, replica.Pause(ctx))
	start := time.Now()
	assert.Equal(t, 0, call(200*time.Millisecond).wait(t), "a paused replica acknowledges nothing")
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "WAIT waited until WaitUntil")

	// A batch: calls made while one is in flight go out together, with
	// one WAIT after them.
	batches := statsOf(p).batches
	first := call(300 * time.Millisecond)
	poll(t, 5*time.Second, "the first call in flight", func() bool { return queueLen(p) == 0 && !idle(p) })
	rest := []*replicator{call(300 * time.Millisecond), call(300 * time.Millisecond)}
	require.NoError(t, replica.Resume(ctx))
	// Resumed within WaitUntil, the replica acknowledges every write.
	assert.Equal(t, 1, first.wait(t), "the call in flight")
	for i, r := range rest {
		assert.Equal(t, 1, r.wait(t), "batched call %d", i)
	}
	assert.Equal(t, batches+1, statsOf(p).batches, "the two went out as one batch")
}

// TestNoWaitWithoutReplicas: a call without Wait sends no WAIT, and its
// Completion hears nothing of replicas.
func TestNoWaitWithoutReplicas(t *testing.T) {
	_, _, p := startMaster(t)
	r := newReplicator()
	p.Go(t.Context(), incrScript, NewKeys("k"), nil, Options{}, r)
	select {
	case <-r.done:
	case <-time.After(testLimit):
		t.Fatal("no answer")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.False(t, r.told, "no WAIT, no Replicated")
}

// TestWaitStaysWithinTheReadTimeout: a WAIT gives up at half the client's
// ReadTimeout, whatever WaitUntil says. Its read does not time out, which
// would cost the connection and the call's answer.
func TestWaitStaysWithinTheReadTimeout(t *testing.T) {
	p, replica := startReplicated(t)
	opt := *p.client.(*redis.Client).Options()
	opt.ReadTimeout = 400 * time.Millisecond
	rc := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rc.Close() })
	short := New(rc, testLimit, 1)
	t.Cleanup(short.Close)
	require.Equal(t, 200*time.Millisecond, short.waitCap)

	require.NoError(t, replica.Pause(t.Context()))
	r := newReplicator()
	var callErr error
	done := make(chan struct{})
	short.Go(t.Context(), incrScript, NewKeys("k"), nil, Options{Wait: 1, WaitUntil: time.Now().Add(testLimit)},
		newBoth(func(_ int64, err error) { callErr = err; close(done) }, r))
	start := time.Now()
	<-done
	assert.Less(t, time.Since(start), testLimit/2, "WAIT gave up early")
	assert.NoError(t, callErr, "the call's answer was read")
	assert.Equal(t, 0, r.acked)
}

// both is a Completion, and a Replicator through r.
type both struct {
	f func(int64, error)
	r *replicator
}

func newBoth(f func(int64, error), r *replicator) *both { return &both{f, r} }

func (b *both) Replicated(r Replication)    { b.r.Replicated(r) }
func (b *both) Complete(v int64, err error) { b.f(v, err) }

// TestRoleFollowsTheCall: a call with Role learns the server's role and
// its online replicas, read on the call's connection after its WAIT. A
// call without Wait learns them too: no replica known is no WAIT, but
// ROLE still shows one that joined. A server without replicas lists
// none.
func TestRoleFollowsTheCall(t *testing.T) {
	p, _ := startReplicated(t)
	ctx := t.Context()
	keys := NewKeys("k")
	call := func(o Options) *replicator {
		r := newReplicator()
		p.Go(ctx, incrScript, keys, nil, o, r)
		return r
	}
	r := call(Options{Role: true})
	assert.Equal(t, 0, r.wait(t), "no WAIT sent")
	assert.Equal(t, Role{Name: "master", Replicas: 1}, r.role)

	r = call(Options{Role: true, Wait: 1, WaitUntil: time.Now().Add(testLimit)})
	assert.Equal(t, 1, r.wait(t))
	assert.Equal(t, Role{Name: "master", Replicas: 1}, r.role)

	// A batch: one ROLE after the batch's WAIT answers every call.
	first := call(Options{Role: true})
	rest := []*replicator{call(Options{Role: true}), call(Options{})}
	first.wait(t)
	assert.Equal(t, Role{Name: "master", Replicas: 1}, first.role)
	rest[0].wait(t)
	assert.Equal(t, Role{Name: "master", Replicas: 1}, rest[0].role)
	select {
	case <-rest[1].done:
	case <-time.After(testLimit):
		t.Fatal("no answer")
	}
	assert.False(t, rest[1].told, "a call without Wait or Role hears nothing")

	_, _, alone := startMaster(t)
	r = newReplicator()
	alone.Go(ctx, incrScript, keys, nil, Options{Role: true}, r)
	r.wait(t)
	assert.Equal(t, Role{Name: "master"}, r.role)
}

// TestRoleOfAReplica: ROLE on a (writable) replica says so.
func TestRoleOfAReplica(t *testing.T) {
	_, admin, _ := startMaster(t)
	_, port, err := net.SplitHostPort(admin.Options().Addr)
	require.NoError(t, err)
	rs := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--replicaof", "127.0.0.1", port, "--replica-read-only", "no"}})
	p := New(rs.Clients()[0], testLimit, 1)
	t.Cleanup(p.Close)
	r := newReplicator()
	p.Go(t.Context(), incrScript, NewKeys("k"), nil, Options{Role: true}, r)
	r.wait(t)
	assert.Equal(t, "slave", r.role.Name)
	assert.NoError(t, r.role.Err)
}

// incrMany increments each of its keys, and replies with their values.
var incrMany = redis.NewScript(`
local out = {}
for i = 1, #KEYS do out[i] = redis.call('INCR', KEYS[i]) end
return out`)

// TestRunValuesWaitsAndAsksRole: a call of RunValues with Wait and Role
// is followed, on its connection, by WAIT and ROLE, and returns what they
// told. With the replica paused, WAIT gives up at WaitUntil with 0: so it
// went behind the call's own write.
func TestRunValuesWaitsAndAsksRole(t *testing.T) {
	p, replica := startReplicated(t)
	ctx := t.Context()
	keys := NewKeys("a", "b")
	vals, rep, err := p.RunValues(ctx, incrMany, keys, nil, Options{Wait: 1, WaitUntil: time.Now().Add(testLimit), Role: true})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 1}, vals)
	assert.Equal(t, 1, rep.Acked)
	assert.NoError(t, rep.WaitErr)
	assert.Equal(t, Role{Name: "master", Replicas: 1}, rep.Role)

	require.NoError(t, replica.Pause(ctx))
	vals, rep, err = p.RunValues(ctx, incrMany, keys, nil, Options{Wait: 1, WaitUntil: time.Now().Add(100 * time.Millisecond)})
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 2}, vals)
	assert.Zero(t, rep.Acked, "a paused replica acknowledges nothing")
	assert.Equal(t, Role{}, rep.Role, "no ROLE asked")
}
