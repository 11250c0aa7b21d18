package election_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/internal/harness"
)

// TestMain starts the examples' masters as local redis-server processes.
// Tests that do not stop masters use them too, each under names of its own.
func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

const ttl = 2 * time.Second

// shared returns a client on the examples' five masters.
func shared(t *testing.T) *redlock.Client {
	t.Helper()
	if strings.HasPrefix(exampletest.Addrs[0], "10.") {
		t.Skip("no redis-server: the examples' masters did not start")
	}
	masters := make([]*redis.Client, len(exampletest.Addrs))
	for i, a := range exampletest.Addrs {
		masters[i] = redis.NewClient(harness.MasterOptions(a))
	}
	return newClient(t, masters)
}

// own starts five masters for a test that stops some, and a client on them.
func own(t *testing.T) (*harness.Cluster, *redlock.Client) {
	t.Helper()
	c := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
	}
	return c, newClient(t, masters)
}

func newClient(t *testing.T, masters []*redis.Client) *redlock.Client {
	t.Helper()
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, client.Close())
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

func newElection(t *testing.T, c *redlock.Client, name string, opts *election.Options) *election.Election {
	t.Helper()
	if opts == nil {
		opts = &election.Options{TTL: ttl}
	}
	e, err := election.New(c, name, opts)
	require.NoError(t, err)
	return e
}

// campaign runs Campaign on its own goroutine.
func campaign(ctx context.Context, e *election.Election, value string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		ch <- result{l, err, time.Now()}
	}()
	return ch
}

type result struct {
	l   *election.Leadership
	err error
	at  time.Time
}

// TestResignWakesTheNextCandidate: of two candidates one leads and the
// other blocks; Resign makes the other lead at once, woken by the
// release. Its fallback timer is 2.5s to 5s, so leading within 1s of
// Resign proves the wake; the margin covers a busy machine.
func TestResignWakesTheNextCandidate(t *testing.T) {
	ctx := t.Context()
	client := shared(t)
	a := newElection(t, client, t.Name(), nil)
	slow := &election.Options{TTL: ttl, MinRetryDelay: 5 * time.Second, MaxRetryDelay: 5 * time.Second}
	b := newElection(t, shared(t), t.Name(), slow) // another process

	la, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, "a", la.Value())
	assert.NotZero(t, la.Epoch())

	pending := campaign(ctx, b, "b")
	select {
	case r := <-pending:
		t.Fatalf("second candidate led while the first did: %v %v", r.l, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	info, err := a.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", info.Value)
	assert.Equal(t, la.Epoch(), info.Epoch)

	resigned := time.Now()
	require.NoError(t, la.Resign(ctx))
	assert.ErrorIs(t, la.Err(), election.ErrResigned)
	var r result
	select {
	case r = <-pending:
	case <-time.After(10 * time.Second):
		t.Fatal("second candidate never led")
	}
	require.NoError(t, r.err)
	took := r.at.Sub(resigned)
	t.Logf("next leader %v after Resign", took)
	assert.Less(t, took, time.Second, "woken by the release, not by the 2.5s fallback timer")
	assert.Greater(t, r.l.Epoch(), la.Epoch())

	info, err = a.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", info.Value)
	require.NoError(t, r.l.Resign(ctx))
	_, err = a.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
	assert.NoError(t, la.Resign(ctx), "a second Resign does nothing")
}

// TestEpochsIncreaseAndProclaim: each leader's epoch is larger than the
// last; Proclaim changes Leader's value and keeps the epoch.
func TestEpochsIncreaseAndProclaim(t *testing.T) {
	ctx := t.Context()
	clients := []*redlock.Client{shared(t), shared(t)}
	var last uint64
	for i := range 6 {
		e := newElection(t, clients[i%2], t.Name(), nil)
		l, err := e.Campaign(ctx, "v0")
		require.NoError(t, err)
		require.Greater(t, l.Epoch(), last, "leader %d", i)
		last = l.Epoch()

		require.NoError(t, l.Proclaim(ctx, "v1"))
		assert.Equal(t, "v1", l.Value())
		info, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.LeaderInfo{Epoch: l.Epoch(), Seq: 1, Value: "v1", Until: info.Until}, info)
		assert.True(t, info.Until.After(time.Now()))
		require.NoError(t, l.Resign(ctx))
		assert.ErrorIs(t, l.Proclaim(ctx, "v2"), election.ErrResigned)
	}
}

func TestLeaderWithNone(t *testing.T) {
	e := newElection(t, shared(t), t.Name(), nil)
	_, err := e.Leader(t.Context())
	assert.ErrorIs(t, err, election.ErrNoLeader)
}

// TestLostWhenKeysDeleted: the leader's lock deleted on the masters is
// found lost by the next renewal (a third of the TTL on); Done closes
// with the cause. Under Run, fn's context is cancelled with it, and Run
// campaigns again. It is deleted on all five: a late call of the acquire
// round, or a renewal's repair, may still set it where a round did not
// reach in time, after the delete. Those are two masters at most, too
// few for a quorum; a majority of three could get one back.
func TestLostWhenKeysDeleted(t *testing.T) {
	ctx := t.Context()
	cl, client := own(t)
	e := newElection(t, client, "job", nil)
	drop := func() {
		for i := range cl.Masters {
			require.NoError(t, cl.Admin(i).Del(ctx, "{job}").Err())
		}
	}

	l, err := e.Campaign(ctx, "me")
	require.NoError(t, err)
	drop()
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatal("leadership not lost")
	}
	assert.ErrorIs(t, l.Err(), election.ErrLost)
	assert.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	assert.Equal(t, l.Err(), context.Cause(l.Context()))
	assert.NoError(t, l.Resign(ctx), "nothing left to release")

	type run struct {
		epoch uint64
		cause error
	}
	started, ended := make(chan uint64, 4), make(chan run, 4)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- e.Run(runCtx, "me", func(ctx context.Context, l *election.Leadership) error {
			started <- l.Epoch()
			<-ctx.Done()
			ended <- run{l.Epoch(), context.Cause(ctx)}
			return ctx.Err()
		})
	}()
	var epochs []uint64
	for i := range 2 {
		select {
		case ep := <-started:
			epochs = append(epochs, ep)
		case <-time.After(3 * ttl):
			t.Fatalf("run %d never led", i)
		}
		if i == 1 {
			break
		}
		drop()
		select {
		case r := <-ended:
			assert.Equal(t, epochs[0], r.epoch)
			assert.ErrorIs(t, r.cause, election.ErrLost)
		case <-time.After(3 * ttl):
			t.Fatal("fn's context not cancelled on the loss")
		}
	}
	assert.Greater(t, epochs[1], epochs[0])
	stop()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(3 * ttl):
		t.Fatal("Run did not return")
	}
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader, "Run resigned")
}

// sharedMasters returns go-redis clients on the examples' masters, closed
// by the test's cleanup.
func sharedMasters(t *testing.T) []*redis.Client {
	t.Helper()
	if strings.HasPrefix(exampletest.Addrs[0], "10.") {
		t.Skip("no redis-server: the examples' masters did not start")
	}
	masters := make([]*redis.Client, len(exampletest.Addrs))
	for i, a := range exampletest.Addrs {
		masters[i] = redis.NewClient(harness.MasterOptions(a))
		t.Cleanup(func() { _ = masters[i].Close() })
	}
	return masters
}

// own2 returns another client on cl's masters: another process.
func own2(t *testing.T, cl *harness.Cluster) *redlock.Client {
	t.Helper()
	masters := make([]*redis.Client, len(cl.Masters))
	for i, m := range cl.Masters {
		masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
	}
	return newClient(t, masters)
}

// TestPausedLeaderEndsBeforeItsValidity: with a majority of masters
// paused, renewals cannot land; the leadership ends a tenth of the TTL
// (200ms) before the lock's validity runs out, not after.
func TestPausedLeaderEndsBeforeItsValidity(t *testing.T) {
	ctx := t.Context()
	cl, client := own(t)
	e := newElection(t, client, "paused", nil)
	l, err := e.Campaign(ctx, "me")
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, cl.Masters[i].Pause(ctx))
	}
	t.Cleanup(func() {
		for i := range 3 {
			_ = cl.Masters[i].Resume(context.Background())
		}
	})
	select {
	case <-l.Done():
	case <-time.After(2 * ttl):
		t.Fatal("leadership did not end")
	}
	ended := time.Now()
	validity := l.Until().Add(ttl / 10) // the lock's, which no renewal moved
	assert.True(t, ended.Before(validity), "ended %v, validity until %v", ended, validity)
	assert.ErrorIs(t, l.Err(), election.ErrLost)
	assert.ErrorIs(t, context.Cause(l.Context()), redlock.ErrNotHeld)
	for i := range 3 {
		require.NoError(t, cl.Masters[i].Resume(ctx))
	}
	require.NoError(t, l.Resign(ctx))
}

// TestBadInput: each bad argument gets an error wrapping
// redlock.ErrInvalidArgument, or the context's, and nothing is written
// on the masters.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	client := shared(t)
	masters := sharedMasters(t)
	// A name of its own per run: the last check leaves a free lock (a
	// fencing counter) under the name, which -count=2 would find.
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())

	_, err := election.New(nil, name, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = election.New(client, "", nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = election.New(client, name, &election.Options{TTL: time.Microsecond})
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	unfenced, err := redlock.New(masters, &redlock.Options{NoFencing: true})
	require.NoError(t, err)
	defer unfenced.Close()
	_, err = election.New(unfenced, name, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	var zero election.Election
	_, err = zero.Campaign(ctx, "v")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)

	e := newElection(t, client, name, nil)
	var nilCtx context.Context // a variable: staticcheck flags a literal nil
	_, err = e.Campaign(nilCtx, "v")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = e.Leader(nilCtx)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	err = e.Run(nilCtx, "v", func(context.Context, *election.Leadership) error { return nil })
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorIs(t, e.Run(ctx, "v", nil), redlock.ErrInvalidArgument)
	_, open := <-e.Observe(nilCtx)
	assert.False(t, open)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.Campaign(cancelled, "v")
	assert.ErrorIs(t, err, context.Canceled)
	err = e.Run(cancelled, "v", func(context.Context, *election.Leadership) error { return nil })
	assert.ErrorIs(t, err, context.Canceled)
	for i, m := range masters {
		n, err := m.Exists(ctx, "{"+name+"}", "{"+name+"}:eh").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "master %d", i)
	}

	// A candidate that gives up waiting leaves no hold behind. Its last
	// acquire may reach a master after the leader's release, and be
	// undone in the background; the release may reach a slow master in
	// the background too. Close waits for both, as a process's exit would.
	l, err := e.Campaign(ctx, "leader")
	require.NoError(t, err)
	assert.ErrorIs(t, l.Proclaim(nilCtx, "x"), redlock.ErrInvalidArgument)
	assert.ErrorIs(t, l.Resign(nilCtx), redlock.ErrInvalidArgument)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	waiter := shared(t)
	_, err = newElection(t, waiter, name, nil).Campaign(short, "waiter")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, l.Resign(ctx))
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
	require.NoError(t, waiter.Close())
	require.NoError(t, client.Close())
	for i, m := range masters {
		v, err := m.Get(ctx, "{"+name+"}").Result()
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(v, "f:"), "master %d holds %q, not a free lock", i, v)
	}
}

// TestNameWithBrace: '}' in a name or a value needs nothing special.
func TestNameWithBrace(t *testing.T) {
	ctx := t.Context()
	for _, name := range []string{"}a}", "a}b"} {
		e := newElection(t, shared(t), t.Name()+name, nil)
		l, err := e.Campaign(ctx, "v}")
		require.NoError(t, err)
		info, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, "v}", info.Value)
		require.NoError(t, l.Resign(ctx))
	}
}

// TestRunHandsOver: two candidates under Run take turns, one at a time,
// each with a larger epoch; no goroutine of Run is left once both return.
func TestRunHandsOver(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var mu sync.Mutex
	var epochs []uint64
	active := 0
	fn := func(ctx context.Context, l *election.Leadership) error {
		mu.Lock()
		active++
		epochs = append(epochs, l.Epoch())
		n, overlap := len(epochs), active > 1
		mu.Unlock()
		assert.False(t, overlap, "two leaders at once")
		if n >= 6 {
			stop()
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		active--
		mu.Unlock()
		return nil
	}
	errs := make(chan error, 2)
	for range 2 {
		e := newElection(t, shared(t), t.Name(), nil)
		go func() { errs <- e.Run(ctx, "v", fn) }()
	}
	for range 2 {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(epochs), 6)
	for i := 1; i < len(epochs); i++ {
		assert.Greater(t, epochs[i], epochs[i-1])
	}
	noGoroutines(t, "election.(*Election).Run")
}

// TestLeaderWithMixedTokens: the leader's lock holds a quorum even where
// one of its masters kept a lower token (a fence round that did not
// reach it) and the masters of its record round are too few (one
// restarted empty). Masters 0 and 1 hold the lock at the epoch, master 3
// at a lower token, 2 and 4 not at all: three of five hold it, so no
// other candidate can win, and Leader must report it, not ErrNoLeader.
// The leader's client is closed first: no late call of its rounds and
// no renewal can change that state. The lock's value is taken from a
// master of its quorum; the rounds may not have reached 0, 1 or 3.
func TestLeaderWithMixedTokens(t *testing.T) {
	ctx := t.Context()
	cl, client := own(t)
	leader := own2(t, cl)
	e := newElection(t, client, "mixed", &election.Options{TTL: 6 * time.Second})
	l, err := newElection(t, leader, "mixed", &election.Options{TTL: 6 * time.Second}).Campaign(ctx, "me")
	require.NoError(t, err)
	require.NoError(t, leader.Close())
	var held []string // the lock's value, in fields, on a master at the epoch
	for i := range cl.Masters {
		v, err := cl.Admin(i).Get(ctx, "{mixed}").Result()
		if f := strings.SplitN(v, ":", 3); err == nil && len(f) == 3 && f[1] == fmt.Sprint(l.Epoch()) {
			held = f
			break
		}
	}
	require.NotNil(t, held, "no master holds the lock at epoch %d", l.Epoch())
	lower := slices.Clone(held)
	lower[1] = fmt.Sprint(l.Epoch() - 1)
	for i, v := range map[int]string{0: strings.Join(held, ":"), 1: strings.Join(held, ":"), 3: strings.Join(lower, ":")} {
		require.NoError(t, cl.Admin(i).Set(ctx, "{mixed}", v, 6*time.Second).Err())
	}
	for _, i := range []int{2, 4} {
		require.NoError(t, cl.Admin(i).Del(ctx, "{mixed}").Err())
	}
	info, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, l.Epoch(), info.Epoch)
	assert.Equal(t, "me", info.Value)

	// Without master 1 the lock holds no quorum: no leader.
	require.NoError(t, cl.Admin(1).Del(ctx, "{mixed}").Err())
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
}
