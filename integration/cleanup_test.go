package integration_test

// Cleanup after failed, cancelled and released locks: it must reach every
// master that may hold our key, even one that stalled or lost its script
// cache, and a refused acquire must not wait for slow masters.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/mutex"
)

// cleanupTTL is the TTL of the locks in these tests: far longer than any
// of them runs, so that no key can have gone by expiring.
const cleanupTTL = 30 * time.Second

// busyCore keeps one core busy until the test ends, or for at most limit.
func busyCore(t *testing.T, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() && time.Now().Before(end) {
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-done
	})
}

// cancelledAcquires runs n acquires of distinct keys from 4 goroutines,
// each cancelled at a random point within its first millisecond. An
// acquire that wins the race against its cancellation is released at once.
// It stops early if ctx ends.
func cancelledAcquires(ctx context.Context, t *testing.T, c *redlock.Client, n int) {
	t.Helper()
	const workers = 4
	var g errgroup.Group
	var attempts, obtained atomic.Int64
	for w := range workers {
		g.Go(func() error {
			for i := w; i < n && ctx.Err() == nil; i += workers {
				attempts.Add(1)
				actx, cancel := context.WithTimeout(ctx, rand.N(time.Millisecond))
				l, err := c.Acquire(actx, fmt.Sprintf("cancelled-%d", i), cleanupTTL)
				cancel()
				if err == nil {
					obtained.Add(1)
					if err := l.Release(ctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrNoQuorum) {
						return fmt.Errorf("release %d: %w", i, err)
					}
					continue
				}
				if !errors.Is(err, redlock.ErrNotObtained) {
					return fmt.Errorf("acquire %d: %w", i, err)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	t.Logf("%d of %d acquires won the race against their cancellation", obtained.Load(), attempts.Load())
}

// waitNoKeys polls the masters until none holds a lock's key, for at most
// limit. The clients run without fencing: no key may remain but the markers
// an undo leaves where it found nothing (see scripts.lua), and each of those
// must expire within the locks' TTL.
func waitNoKeys(t *testing.T, cl *integration.Cluster, limit time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	for {
		locks, markers := make([][]string, len(cl.Masters)), make([][]string, len(cl.Masters))
		clean := true
		for i := range cl.Masters {
			keys, err := cl.Admin(i).Keys(ctx, "*").Result()
			require.NoError(t, err, "master %d", i)
			for _, k := range keys {
				if strings.Contains(k, ":gone:") {
					markers[i] = append(markers[i], k)
				} else {
					locks[i] = append(locks[i], k)
					clean = false
				}
			}
		}
		if clean {
			n := 0
			for i, keys := range markers {
				n += len(keys)
				ttls := make([]*redis.DurationCmd, len(keys))
				_, err := cl.Admin(i).Pipelined(ctx, func(p redis.Pipeliner) error {
					for j, k := range keys {
						ttls[j] = p.PTTL(ctx, k)
					}
					return nil
				})
				require.NoError(t, err, "master %d", i)
				for j, ttl := range ttls {
					if d := ttl.Val(); d != -2 { // -2: expired meanwhile
						require.True(t, d > 0 && d <= cleanupTTL, "marker %s on master %d has PTTL %v", keys[j], i, d)
					}
				}
			}
			t.Logf("no key left %v after the load (%d undo markers, expiring)", time.Since(start).Round(time.Millisecond), n)
			return
		}
		if time.Since(start) > limit {
			t.Fatalf("keys left on the masters %v after the load: %q", limit, locks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelledAcquiresLeaveNoKeyUnderLoad cancels 2,000 acquires at random
// points within their first millisecond while one core is busy: every key
// an acquire set must be removed again, long before its TTL.
func TestCancelledAcquiresLeaveNoKeyUnderLoad(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: redlock.DefaultMasterTimeout, NoFencing: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	busyCore(t, 30*time.Second)

	cancelledAcquires(ctx, t, c, 2000)
	waitNoKeys(t, cl, 5*time.Second)
}

// TestCancelledAcquiresLeaveNoKeyWhenStalledMastersLoseScripts is the same
// while two masters repeatedly lose their script cache and functions
// (SCRIPT FLUSH, FUNCTION FLUSH) and stall (SIGSTOP, or a paused container)
// for twice the master timeout: an EVALSHA they answer with NOSCRIPT, or an
// FCALL with "Function not found", after the call timed out never gets its
// fallback, and an undo sent on another connection after its acquire
// timed out can reach the master first (Docker's port proxy relays each
// connection on its own); the undo's marker must make that acquire refuse.
func TestCancelledAcquiresLeaveNoKeyWhenStalledMastersLoseScripts(t *testing.T) {
	const masterTimeout = 100 * time.Millisecond
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, &redlock.Options{MasterTimeout: masterTimeout, NoFencing: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	busyCore(t, 30*time.Second)
	stalling := cl.Masters[:2]
	t.Cleanup(func() {
		for _, m := range stalling {
			_ = m.Resume(context.Background())
		}
	})

	load, lctx := errgroup.WithContext(ctx)
	stalls := 0
	load.Go(func() error {
		defer cancel() // the load ends once the masters stop stalling
		for stalls = 0; stalls < 12 && lctx.Err() == nil; stalls++ {
			for i, m := range stalling {
				if err := cl.Admin(i).ScriptFlush(lctx).Err(); err != nil {
					return fmt.Errorf("%s: script flush: %w", m.Name(), err)
				}
				if err := cl.Admin(i).FunctionFlush(lctx).Err(); err != nil {
					return fmt.Errorf("%s: function flush: %w", m.Name(), err)
				}
				if err := m.Pause(lctx); err != nil {
					return err
				}
			}
			time.Sleep(2 * masterTimeout)
			for _, m := range stalling {
				if err := m.Resume(context.Background()); err != nil {
					return err
				}
			}
			time.Sleep(masterTimeout)
		}
		return nil
	})
	// Until the stalls end (about 4s), when ctx is cancelled.
	cancelledAcquires(ctx, t, c, 50_000)
	require.NoError(t, load.Wait())
	t.Logf("%d stalls", stalls)
	// The stalled masters have thousands of undos queued (the test's rate
	// of acquires is far beyond what a stalled master's pool can take);
	// they drain at about 5,000 a second once the masters answer again, 2
	// to 4.5s on a loaded machine. 10s is a third of the TTL.
	waitNoKeys(t, cl, 10*time.Second)
}

// TestRefusedAcquireDoesNotWaitForPausedMaster: with one master paused,
// attempts on a lock held elsewhere are refused by the four others at once;
// nothing of theirs needs undoing, so they must not wait for the paused one.
func TestRefusedAcquireDoesNotWaitForPausedMaster(t *testing.T) {
	// The bound is MasterTimeout/5 = 50ms at p99. A refusal by four local
	// masters takes about 1ms; the margin covers a loaded machine. Waiting
	// for the paused master would take the whole 250ms.
	const masterTimeout, attempts = 250 * time.Millisecond, 200
	cl := integration.NewCluster(t, 5)
	holder := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
	ctx := context.Background()
	l, err := holder.Acquire(ctx, "job", cleanupTTL)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	require.NoError(t, cl.Masters[0].Pause(ctx))
	t.Cleanup(func() { _ = cl.Masters[0].Resume(context.Background()) })

	c := newClient(t, cl, &redlock.Options{MasterTimeout: masterTimeout})
	m, err := mutex.New(c, "job", &mutex.Options{TTL: 2 * time.Second})
	require.NoError(t, err)
	took := make([]time.Duration, 0, attempts)
	// Bounded: waiting MasterTimeout per attempt would take 50s.
	for begin := time.Now(); len(took) < attempts && time.Since(begin) < 10*time.Second; {
		i, start := len(took), time.Now()
		if i%2 == 0 {
			_, err = c.Acquire(ctx, "job", 2*time.Second)
			require.ErrorIs(t, err, redlock.ErrNotObtained)
		} else {
			require.ErrorIs(t, m.TryLock(ctx), redlock.ErrNotObtained)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	n := len(took)
	p99 := took[(n*99+99)/100-1]
	t.Logf("%d refused attempts: median %v, p99 %v, max %v", n, took[n/2], p99, took[n-1])
	assert.Less(t, p99, masterTimeout/5, "a refusal waited for the paused master")
}

// failCounter counts the calls to one master that failed without an answer
// from Redis (a timeout or a connection error).
type failCounter struct{ fails atomic.Int32 }

func (f *failCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // go-redis sets cmd's error only after the hooks
		f.count(err)
		return err
	}
}

// ProcessPipelineHook counts each call of a batch (redlock pipelines the
// calls made while one is in flight).
func (f *failCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			f.count(cmd.Err())
		}
		return err
	}
}

func (f *failCounter) count(err error) {
	var re redis.Error
	if err != nil && !errors.As(err, &re) {
		f.fails.Add(1)
	}
}

// TestLastReleaseReachesStalledMaster: the last release cannot reach one
// master (its traffic is dropped) when it is sent. Release returns with the
// quorum; the master must still get the delete once it is reachable again,
// long before the key's TTL.
func TestLastReleaseReachesStalledMaster(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	px := proxied(t, cl)
	clients := px.NewClients()
	var failed failCounter
	clients[0].AddHook(&failed)
	c, err := redlock.New(clients, &redlock.Options{MasterTimeout: slack})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", cleanupTTL)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)

	require.NoError(t, px.BlackHole(0))
	require.NoError(t, l.Release(ctx), "four masters deleted it")
	require.Eventually(t, func() bool { return failed.fails.Load() > 0 }, 10*time.Second, time.Millisecond,
		"the release to the stalled master did not fail")
	require.NoError(t, px.Heal(0)) // what was sent meanwhile is lost for good
	assert.Eventually(t, func() bool { return values(t, cl, "job")[0] == "" }, 10*time.Second, 10*time.Millisecond,
		"the delete never reached the master that stalled at release time (TTL %v)", cleanupTTL)
	waitReleased(t, cl, "job")
}

// TestCloseEndsPendingCleanup: a failed acquire must be undone on two
// stalled masters; its acquire and first undo time out there. One master
// comes back before Close, the other stays stalled. Close must get the
// undo to the first, give up on the second within a bound, and leave no
// goroutine behind.
func TestCloseEndsPendingCleanup(t *testing.T) {
	const masterTimeout = 200 * time.Millisecond
	cl := integration.NewCluster(t, 5)
	ctx := context.Background()
	for i := 2; i < 5; i++ {
		holdAs(t, cl, i, "job", "other") // our acquire must fail
	}
	counters := make([]failCounter, 5)
	clients := make([]*redis.Client, 5)
	for i, m := range cl.Masters {
		clients[i] = redis.NewClient(integration.MasterOptions(m.Addr()))
		clients[i].AddHook(&counters[i])
	}
	c, err := redlock.New(clients, &redlock.Options{MasterTimeout: masterTimeout, NoFencing: true})
	require.NoError(t, err)
	require.NoError(t, c.LoadScripts(ctx)) // an open connection to every master
	ignore := goleak.IgnoreCurrent()
	for _, m := range cl.Masters[:2] {
		require.NoError(t, m.Pause(ctx))
	}
	t.Cleanup(func() { _ = cl.Masters[1].Resume(context.Background()) })

	_, err = c.Acquire(ctx, "job", cleanupTTL)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	// The acquire (queued on the open connection) and the first undo (a new
	// connection, whose handshake gets no reply) have failed on both.
	require.Eventually(t, func() bool { return counters[0].fails.Load() >= 2 && counters[1].fails.Load() >= 2 },
		10*time.Second, 5*time.Millisecond, "the calls to the stalled masters did not fail")
	require.NoError(t, cl.Masters[0].Resume(ctx)) // it now runs the queued acquire

	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	// Close waits 4*MasterTimeout for pending cleanup, then cancels it; a try
	// in flight ends within its own bound (4*MasterTimeout) or the clients'
	// 200ms timeouts. 3s leaves more than a second of margin.
	assert.Less(t, took, 3*time.Second, "Close took too long")
	owner, err := cl.Admin(0).Get(ctx, "{job}").Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
		t.Errorf("the master that came back before Close still holds the lock for %q", owner)
	}
	for _, cl := range clients {
		require.NoError(t, cl.Close())
	}
	goleak.VerifyNone(t, ignore)
	t.Logf("Close took %v", took)
}

// overtaken is a master whose first acquire call fails at once, as if it
// timed out, while the command is held back; it reaches the master only
// after the undo that follows it has been answered there, as when the undo
// travels on another connection and overtakes it.
type overtaken struct {
	*redis.Client
	held     chan func() // sends the held acquire; buffered for one
	acquires atomic.Int32
	late     chan lateReply // the held acquire's reply
}

type lateReply struct {
	val int64
	err error
}

func newOvertaken(c *redis.Client) *overtaken {
	return &overtaken{Client: c, held: make(chan func(), 1), late: make(chan lateReply, 1)}
}

// An acquire has six arguments and asks for one hold; an undo has seven.
func (o *overtaken) intercept(ctx context.Context, args []any, send func(context.Context) *redis.Cmd) *redis.Cmd {
	switch {
	case len(args) == 6 && args[2] == int64(1) && o.acquires.Add(1) == 1:
		o.held <- func() {
			v, err := send(context.WithoutCancel(ctx)).Int64()
			o.late <- lateReply{v, err}
		}
		return redis.NewCmdResult(nil, context.DeadlineExceeded)
	case len(args) == 7:
		cmd := send(ctx)
		if cmd.Err() != nil { // not run (NOSCRIPT, say)
			return cmd
		}
		select {
		case acquire := <-o.held:
			acquire()
		default:
		}
		return cmd
	}
	return send(ctx)
}

func (o *overtaken) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return o.intercept(ctx, args, func(ctx context.Context) *redis.Cmd { return o.Client.EvalSha(ctx, sha, keys, args...) })
}

func (o *overtaken) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return o.intercept(ctx, args, func(ctx context.Context) *redis.Cmd { return o.Client.Eval(ctx, src, keys, args...) })
}

// TestAcquireThatLandsAfterItsUndoIsRefused: an acquire whose call failed
// (timed out) is undone; if the acquire reaches the master after its undo,
// the undo's marker makes the master refuse it, so no key is left for the
// lock's TTL. Exclusive and read locks.
func TestAcquireThatLandsAfterItsUndoIsRefused(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	ctx := context.Background()
	for _, read := range []bool{false, true} {
		t.Run(fmt.Sprintf("read=%v", read), func(t *testing.T) {
			require.NoError(t, cl.FlushAll(ctx))
			// Another owner holds the write lock on masters 0 and 1: the
			// acquire below is refused there and fails.
			other, err := redlock.New(cl.Clients()[:2], &redlock.Options{MasterTimeout: slack})
			require.NoError(t, err)
			defer other.Close()
			_, err = other.AcquireWrite(ctx, "job", "other", cleanupTTL)
			require.NoError(t, err)

			third := newOvertaken(cl.Clients()[2])
			masters := []redis.Scripter{cl.Clients()[0], cl.Clients()[1], third}
			c, err := redlock.New(masters, &redlock.Options{MasterTimeout: slack, NoFencing: true})
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.LoadScripts(ctx)) // the held acquire is sent with EVALSHA only
			if read {
				_, err = c.AcquireRead(ctx, "job", "me", cleanupTTL)
			} else {
				_, err = c.AcquireAs(ctx, "job", "me", cleanupTTL)
			}
			require.ErrorIs(t, err, redlock.ErrNotObtained)

			select {
			case r := <-third.late:
				require.NoError(t, r.err)
				assert.Zero(t, r.val, "master 2 agreed to an acquire that landed after its undo")
			case <-time.After(10 * time.Second):
				t.Fatal("the undo never reached master 2")
			}
			keys, err := cl.Admin(2).Keys(ctx, "*").Result()
			require.NoError(t, err)
			require.Len(t, keys, 1, "only the undo's marker: %q", keys)
			assert.Contains(t, keys[0], ":gone:")
			ttl, err := cl.Admin(2).PTTL(ctx, keys[0]).Result()
			require.NoError(t, err)
			assert.True(t, ttl > 0 && ttl <= cleanupTTL, "marker PTTL %v", ttl)
		})
	}
}
