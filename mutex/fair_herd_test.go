package mutex_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// roundCounter is an Observer that counts the decided rounds of each
// operation ("acquire", "queue" for a renewal, ...).
type roundCounter struct {
	mu   sync.Mutex
	by   map[string]int
	last map[string]redlock.Round // the latest of each operation
}

func (r *roundCounter) ObserveRound(_ context.Context, rd redlock.Round) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by, r.last = map[string]int{}, map[string]redlock.Round{}
	}
	r.by[rd.Op]++
	r.last[rd.Op] = rd
}

func (r *roundCounter) ObserveEvent(context.Context, redlock.Event) {}

func (r *roundCounter) latest(op string) redlock.Round {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[op]
}

func (r *roundCounter) count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[op]
}

// settled waits until the acquire rounds r counts stop changing for three
// polls 100ms apart, and there are at least least of them. Bound: 20s.
func (r *roundCounter) settled(t *testing.T, least int) {
	t.Helper()
	last, same := -1, 0
	require.Eventually(t, func() bool {
		n := r.count("acquire")
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
		return n >= least && same >= 3
	}, 20*time.Second, 100*time.Millisecond, "the acquire rounds never settled at %d or more", least)
}

// scriptCalls returns the scripts (FCALL, EVALSHA, EVAL) master i ran so
// far, from INFO commandstats.
func scriptCalls(t *testing.T, c *harness.Cluster, i int) int {
	t.Helper()
	calls, err := c.CommandCalls(t.Context(), i)
	require.NoError(t, err)
	return calls["fcall"] + calls["evalsha"] + calls["eval"]
}

// clientOn returns a client of the masters is of c (all where none is
// given), with a MasterTimeout of 1s: rounds of a hundred waiters under
// -race on a busy machine must not time out.
func clientOn(t *testing.T, c *harness.Cluster, obs redlock.Observer, is ...int) *redlock.Client {
	t.Helper()
	if len(is) == 0 {
		for i := range c.Masters {
			is = append(is, i)
		}
	}
	masters := make([]*redis.Client, len(is))
	for k, i := range is {
		masters[k] = redis.NewClient(harness.MasterOptions(c.Masters[i].Addr()))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: time.Second, Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	return client
}

// A Mutex's release wakes the first of a hundred fair waiters of one
// client, not all of them, though none has renewed yet: each learned from
// its refused try whether a ticket is ahead. The scripts each master runs
// from the release until the first waiter holds the lock and the others
// are idle are counted: the release and the first waiter's acquire, 2.
// The bound, 10, leaves room for a try that came late. It fails where a
// waiter that has not renewed tries at every release: 200 per master. No renewal falls in the test: the
// waiters renew a third of their waiter TTL (60s) after they queued, and
// the test checks it.
func TestFairMutexReleaseWakesOneOfManyWaiters(t *testing.T) {
	const waiters, name = 100, "herd"
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	rounds := &roundCounter{}
	client := clientOn(t, c, rounds)
	m, err := mutex.New(clientOn(t, c, nil), name, &mutex.Options{TTL: time.Minute})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, m.Lock(ctx))
	f, err := mutex.NewFair(client, name, &mutex.FairOptions{TTL: 10 * time.Second, WaiterTTL: time.Minute})
	require.NoError(t, err)
	tickets := make([]*mutex.Ticket, waiters)
	for i := range tickets {
		tickets[i], err = f.Enqueue(ctx)
		require.NoError(t, err)
	}
	type grant struct {
		i int
		l *redlock.Lock
	}
	got := make(chan grant, waiters) // held: a release would wake the next
	defer func() {
		for _, tk := range tickets {
			tk.Cancel()
		}
		for {
			select {
			case g := <-got:
				assert.NoError(t, g.l.Release(context.Background()))
			default:
				return
			}
		}
	}()
	for i, tk := range tickets {
		go func() {
			if l, err := tk.Wait(ctx); err == nil {
				got <- grant{i, l}
			}
		}()
	}
	require.Eventually(t, func() bool { return subscribed(t, c, name, 1) },
		5*time.Second, 5*time.Millisecond, "the waiters never subscribed on every master")
	rounds.settled(t, waiters) // every waiter tried, and was refused
	before := make([]int, len(c.Masters))
	for i := range before {
		before[i] = scriptCalls(t, c, i)
	}
	require.NoError(t, m.Unlock(ctx))
	select {
	case g := <-got:
		got <- g // released at the end
		assert.Equal(t, 0, g.i, "the first ticket gets the lock")
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter got the lock")
	}
	rounds.settled(t, 0)
	for i := range before {
		n := scriptCalls(t, c, i) - before[i]
		t.Logf("master %d ran %d scripts from the release on", i, n)
		assert.LessOrEqual(t, n, 10, "master %d: scripts from the Mutex's release on", i)
	}
	require.Zero(t, rounds.count("queue"), "a renewal fell in the test: it counts nothing")
}

// A grant whose answer never came is undone where it landed, and the undo
// puts the waiter's entry back: the waiter needs no renewal for it. A
// Mutex holds the lock on two masters of three (its client knows only
// those), and the third is paused while the waiter tries, so that its
// call lands, and is granted, only when it resumes. The lock there then
// keeps its fencing counter ("f:..."), which only the grant's undo leaves,
// and the queue holds the waiter again, though no renewal ran: the next
// one is 20s away (a third of the waiter TTL). The undo may travel on
// another connection and land first (about one run in six): its marker
// refuses the grant, and the entry was never dropped. Bound: the undo's
// retries, 5s after the resume. It fails where fair_undo does not queue
// the waiter again.
func TestFairGrantWithoutAnswerIsUndoneIntoTheQueue(t *testing.T) {
	const name = "paused"
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	rounds := &roundCounter{}
	client := clientOn(t, c, rounds)
	m, err := mutex.New(clientOn(t, c, nil, 0, 1), name, &mutex.Options{TTL: time.Minute})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, m.Lock(ctx))
	defer func() { assert.NoError(t, m.Unlock(context.Background())) }()
	f, err := mutex.NewFair(client, name, &mutex.FairOptions{TTL: 10 * time.Second, WaiterTTL: time.Minute})
	require.NoError(t, err)
	tk, err := f.Enqueue(ctx)
	require.NoError(t, err)
	defer tk.Cancel()
	require.NoError(t, c.Masters[2].Pause(ctx))
	resumed := false
	defer func() {
		if !resumed {
			_ = c.Masters[2].Resume(context.Background())
		}
	}()
	wctx, stop := context.WithTimeout(ctx, 2*time.Second) // the try, decided by the refusals
	_, err = tk.Wait(wctx)
	stop()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	try := rounds.latest("acquire")
	require.Equal(t, 1, rounds.count("acquire"))
	require.Len(t, try.Masters, 3)
	silent := try.Masters[2].Err
	require.True(t, errors.Is(silent, redlock.ErrNoReply) || errors.Is(silent, redlock.ErrMasterTimeout), "the paused master: %v", silent)
	require.NoError(t, c.Masters[2].Resume(ctx))
	resumed = true
	key := "{" + name + "}"
	var lock string
	require.Eventually(t, func() bool {
		v, err := c.Admin(2).Get(ctx, key).Result()
		if err == nil && strings.HasPrefix(v, "f:") {
			lock = v
			return true
		}
		marks, err := c.Admin(2).Keys(ctx, key+":gone:*").Result()
		return err == nil && len(marks) > 0 && v == ""
	}, 5*time.Second, 10*time.Millisecond, "the grant was neither undone nor refused on the paused master")
	if lock == "" {
		t.Log("the undo landed first: its marker refused the grant, which dropped nothing")
	}
	n, err := c.Admin(2).ZCard(ctx, key+":q").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the undo put the waiter's entry back")
	assert.Zero(t, rounds.count("queue"), "no renewal ran")
}

// slowHook delays every call to a master by d.
type slowHook time.Duration

func (slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(h))
		return next(ctx, cmd)
	}
}

func (h slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(h))
		return next(ctx, cmds)
	}
}

// A try that some masters granted and others refused, as the lock is held
// there, is undone and renews the ticket at once; that renewal is the
// try's own, no news that the lock may be free. A Mutex holds the lock on
// two masters of three (its client knows only those), which answer the
// fair waiter 50ms late: each try is granted on the third, heard before
// the refusals decide, refused on the two, and undone. The waiter waits
// for the Mutex's release, or its next renewal (20s away), not trying
// meanwhile. Bound: 1s of waiting, at most 3 tries (the first, one once
// subscribed, one for margin). It fails where the try's renewal wakes the
// Wait that made it: the waiter tries again at once, about every 100ms
// (a try and a renewal) while the Mutex holds the lock.
func TestFairPartlyGrantedTryDoesNotSpin(t *testing.T) {
	const name = "spin"
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	masters := make([]*redis.Client, 3)
	for i := range masters {
		masters[i] = redis.NewClient(harness.MasterOptions(c.Masters[i].Addr()))
		if i < 2 {
			masters[i].AddHook(slowHook(50 * time.Millisecond))
		}
	}
	rounds := &roundCounter{}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: time.Second, Observer: rounds})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, m := range masters {
			_ = m.Close()
		}
	})
	m, err := mutex.New(clientOn(t, c, nil, 0, 1), name, &mutex.Options{TTL: time.Minute})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, m.Lock(ctx))
	f, err := mutex.NewFair(client, name, &mutex.FairOptions{TTL: 10 * time.Second, WaiterTTL: time.Minute})
	require.NoError(t, err)
	tk, err := f.Enqueue(ctx)
	require.NoError(t, err)
	defer tk.Cancel()
	wctx, stop := context.WithTimeout(ctx, time.Second)
	_, err = tk.Wait(wctx)
	stop()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	try := rounds.latest("acquire")
	require.Len(t, try.Masters, 3)
	assert.True(t, try.Masters[2].Agreed, "the third master granted the try: %v", try.Masters[2].Err)
	assert.LessOrEqual(t, rounds.count("acquire"), 3, "tries while the Mutex held the lock")

	// The Mutex's release wakes the waiter at once.
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := tk.Wait(ctx)
		assert.NoError(t, err)
		got <- l
	}()
	rounds.settled(t, rounds.count("acquire")+1)
	require.NoError(t, m.Unlock(ctx))
	select {
	case l := <-got:
		assert.NoError(t, l.Release(context.Background()))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock after the Mutex's release")
	}
}
