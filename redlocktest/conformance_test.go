package redlocktest_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/redlocktest"
	"github.com/go-redlock/redlock/rwmutex"
)

// master is what the suite does to a master: redlocktest.Master and the
// harness's redis-server processes both have these.
type master interface {
	Addr() string
	Kill(context.Context) error
	Restart(context.Context) error
	Pause(context.Context) error
	Resume(context.Context) error
}

// backend starts n masters for one test and returns a client per master
// and the masters.
type backend func(t *testing.T, n int) ([]*redis.Client, []master)

func kit(t *testing.T, n int) ([]*redis.Client, []master) {
	ms := redlocktest.NewMasters(t, n)
	out := make([]master, n)
	for i, m := range ms {
		out[i] = m
	}
	return redlocktest.Clients(ms), out
}

func redisServer(t *testing.T, n int) ([]*redis.Client, []master) {
	c := harness.NewProcessCluster(t, n, harness.ProcessOptions{})
	out := make([]master, n)
	for i, m := range c.Masters {
		out[i] = m
	}
	return c.Clients(), out
}

// TestConformance runs the same lock tests on redlocktest's masters and on
// real redis-server processes, so that the kit cannot drift from the real
// thing.
func TestConformance(t *testing.T) {
	for name, b := range map[string]backend{"redlocktest": kit, "redis-server": redisServer} {
		t.Run(name, func(t *testing.T) {
			for _, tc := range suite {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
			}
		})
	}
}

// masterTimeout is generous: a first round on new masters dials, loads and
// compiles the scripts, about 20ms under the race detector on an idle
// machine, and the tests must hold on a busy one.
const masterTimeout = 500 * time.Millisecond

func newClient(t *testing.T, clients []*redis.Client) *redlock.Client {
	t.Helper()
	c, err := redlock.New(clients, &redlock.Options{MasterTimeout: masterTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// leftKeys returns the keys on every master but released locks' fencing
// counters, release markers and fair queues' ticket counters (which
// expire).
func leftKeys(t *testing.T, clients []*redis.Client) []string {
	t.Helper()
	var left []string
	for _, c := range clients {
		keys, err := c.Keys(context.Background(), "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			v, _ := c.Get(context.Background(), k).Result() // "" for a key of another type
			// A fair queue's ticket counter expires a waiter TTL after
			// its last renewal, not with the last waiter.
			counter := strings.HasSuffix(k, ":qc") && c.PTTL(context.Background(), k).Val() != -1
			if !strings.HasPrefix(v, "f:") && !strings.Contains(k, ":gone:") && !counter {
				left = append(left, k)
			}
		}
	}
	return left
}

var suite = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"exclusive", func(t *testing.T, b backend) {
		clients, _ := b(t, 3)
		a, other := newClient(t, clients), newClient(t, clients)
		ctx := t.Context()
		l, err := a.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err)
		_, err = other.Acquire(ctx, "job", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		require.NoError(t, l.Extend(ctx, 10*time.Second))
		require.NoError(t, l.Release(ctx))
		l2, err := other.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err)
		assert.Greater(t, l2.Token(), l.Token(), "fencing tokens grow")
		require.NoError(t, l2.Release(ctx))
		require.NoError(t, a.Close())
		require.NoError(t, other.Close())
		assert.Empty(t, leftKeys(t, clients))
	}},
	{"expires in real time", func(t *testing.T, b backend) {
		clients, _ := b(t, 3)
		a, other := newClient(t, clients), newClient(t, clients)
		ctx := t.Context()
		ttl := 4 * masterTimeout // fencing's least TTL
		start := time.Now()
		_, err := a.Acquire(ctx, "job", ttl)
		require.NoError(t, err)
		_, err = other.Acquire(ctx, "job", ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "held")
		require.Eventually(t, func() bool {
			l, err := other.Acquire(ctx, "job", ttl)
			return err == nil && l.Release(ctx) == nil
		}, 5*ttl, 20*time.Millisecond, "free once the TTL ran out")
		assert.GreaterOrEqual(t, time.Since(start), ttl-50*time.Millisecond, "not before the TTL")
	}},
	{"reentrant", func(t *testing.T, b backend) {
		clients, _ := b(t, 3)
		c := newClient(t, clients)
		ctx := t.Context()
		l, err := c.AcquireAs(ctx, "job", "owner-1", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Reenter(ctx))
		assert.Equal(t, 2, l.Holds())
		_, err = c.AcquireAs(ctx, "job", "owner-2", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, l.Release(ctx))
		require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)
	}},
	{"read-write", func(t *testing.T, b backend) {
		clients, _ := b(t, 3)
		c := newClient(t, clients)
		ctx := t.Context()
		m, err := rwmutex.New(c, "doc", &rwmutex.Options{TTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, m.RLock(ctx, "r1"))
		require.NoError(t, m.RLock(ctx, "r2"), "readers share")
		require.ErrorIs(t, m.TryLock(ctx, "w"), redlock.ErrNotObtained, "a writer waits for readers")
		require.NoError(t, m.RUnlock(ctx, "r1"))
		require.NoError(t, m.RUnlock(ctx, "r2"))
		require.NoError(t, m.Lock(ctx, "w"))
		require.ErrorIs(t, m.TryRLock(ctx, "r3"), redlock.ErrNotObtained, "readers wait for the writer")
		require.NoError(t, m.Unlock(ctx, "w"))
	}},
	{"wake on release", func(t *testing.T, b backend) {
		clients, _ := b(t, 3)
		ctx := t.Context()
		holder, err := mutex.New(newClient(t, clients), "job", &mutex.Options{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, holder.Lock(ctx))
		waiter, err := mutex.New(newClient(t, clients), "job", &mutex.Options{TTL: time.Minute, MinRetryDelay: 5 * time.Second, MaxRetryDelay: 10 * time.Second})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		time.Sleep(100 * time.Millisecond) // it found the lock held and waits
		require.NoError(t, holder.Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(2 * time.Second): // its retry delay is 5s and more: only the wake-up is this fast
			t.Fatal("the release did not wake the waiter")
		}
		require.NoError(t, waiter.Unlock(ctx))
	}},
	{"fair", func(t *testing.T, b backend) {
		// The queue's scripts use sorted sets, INCR, TIME and PUBLISH.
		clients, _ := b(t, 3)
		ctx := t.Context()
		opts := &mutex.FairOptions{TTL: 10 * time.Second, WaiterTTL: 3 * time.Second}
		c := newClient(t, clients)
		f, err := mutex.NewFair(c, "job", opts)
		require.NoError(t, err)
		holder, err := f.Lock(ctx)
		require.NoError(t, err)
		first, err := f.Enqueue(ctx)
		require.NoError(t, err)
		later, err := f.Enqueue(ctx)
		require.NoError(t, err)
		require.Less(t, first.Number(), later.Number())
		p, err := later.Position(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, p, "the holder is not counted")
		require.NoError(t, holder.Release(ctx))
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = later.Wait(short)
		require.ErrorIs(t, err, context.DeadlineExceeded, "a live earlier ticket is ahead")
		got := make(chan error, 1)
		go func() { // woken by the first one's release, not by its renewal
			l, err := later.Wait(ctx)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		l, err := first.Wait(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the next ticket never got the lock")
		}
		// A release is decided at a quorum: Close waits for the last call.
		require.NoError(t, c.Close())
		assert.Empty(t, leftKeys(t, clients))
	}},
	{"killed and restarted masters", func(t *testing.T, b backend) {
		clients, ms := b(t, 3)
		c := newClient(t, clients)
		ctx := t.Context()
		require.NoError(t, ms[0].Kill(ctx))
		l, err := c.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err, "two of three masters")
		// Back empty, without its scripts: the extend repairs it.
		require.NoError(t, ms[0].Restart(ctx))
		require.NoError(t, l.Extend(ctx, 10*time.Second))
		require.Eventually(t, func() bool {
			v, err := clients[0].Get(ctx, "{job}").Result()
			return err == nil && !strings.HasPrefix(v, "f:")
		}, 5*time.Second, 10*time.Millisecond, "repaired on the restarted master")
		require.NoError(t, l.Release(ctx))

		require.NoError(t, ms[0].Kill(ctx))
		require.NoError(t, ms[1].Kill(ctx))
		_, err = c.Acquire(ctx, "other", 10*time.Second)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe, "one of three")
		require.ErrorIs(t, err, redlock.ErrNotObtained)
	}},
	{"killed masters refuse dials", func(t *testing.T, b backend) {
		_, ms := b(t, 3)
		ctx := t.Context()
		require.NoError(t, ms[0].Kill(ctx))
		require.NoError(t, ms[1].Kill(ctx))
		// Fresh clients, with the same options on both backends: the
		// kit's own (see Master.Client), dials retried or not.
		deadErrs := func(t *testing.T, dialerRetries int, timeout time.Duration) []error {
			clients := make([]*redis.Client, len(ms))
			for i, m := range ms {
				clients[i] = redis.NewClient(&redis.Options{
					Addr:                  m.Addr(),
					ContextTimeoutEnabled: true,
					MaxRetries:            -1,
					DialTimeout:           time.Second,
					DialerRetries:         dialerRetries,
				})
				t.Cleanup(func() { _ = clients[i].Close() })
			}
			c, err := redlock.New(clients, &redlock.Options{MasterTimeout: timeout})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, c.Close()) })
			// A short TTL: Close waits for the undo on the dead masters
			// until the lock would have expired.
			_, err = c.Acquire(ctx, "job", 2*time.Second)
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe, "one of three")
			return []error{qe.Masters[0].Err, qe.Masters[1].Err}
		}
		t.Run("one dial", func(t *testing.T) {
			// 500ms: the longest fencing allows for the 2s TTL; a
			// refused dial takes a millisecond.
			for i, err := range deadErrs(t, 1, 500*time.Millisecond) {
				assert.ErrorIs(t, err, syscall.ECONNREFUSED, "m%d: a refused dial, as from a dead server", i)
			}
		})
		t.Run("dials retried", func(t *testing.T) {
			// go-redis dials five times, 100ms apart: at least 400ms, which
			// a 150ms MasterTimeout cuts short (250ms margin; a busy machine
			// only sleeps longer).
			for i, err := range deadErrs(t, 0, 150*time.Millisecond) {
				assert.ErrorIs(t, err, redlock.ErrMasterTimeout, "m%d: still dialing", i)
			}
		})
	}},
	{"paused master", func(t *testing.T, b backend) {
		clients, ms := b(t, 3)
		c := newClient(t, clients)
		ctx := t.Context()
		require.NoError(t, ms[2].Pause(ctx))
		start := time.Now()
		l, err := c.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err, "the other two")
		assert.Less(t, time.Since(start), 5*time.Second)
		require.NoError(t, ms[2].Resume(ctx))
		require.NoError(t, l.Release(ctx))
		_, err = c.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err)
	}},
}

// TestSlowMaster: a master slower than MasterTimeout does not hold a round
// back, and its slowness shows as ErrMasterTimeout when it is needed.
func TestSlowMaster(t *testing.T) {
	ms := redlocktest.NewMasters(t, 3)
	c := newClient(t, redlocktest.Clients(ms))
	ctx := t.Context()
	slow := 3 * masterTimeout
	ms[0].Slow(slow)
	start := time.Now()
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), slow-masterTimeout, "decided without the slow master")
	require.NoError(t, l.Release(ctx))
	ms[1].Slow(slow)
	_, err = c.Acquire(ctx, "other", 10*time.Second)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.True(t, errors.Is(qe.Masters[0].Err, redlock.ErrMasterTimeout) && errors.Is(qe.Masters[1].Err, redlock.ErrMasterTimeout), "%v", err)
	ms[0].Slow(0)
	ms[1].Slow(0)
}

// TestKitDifferences pins what the kit does not do like redis-server.
func TestKitDifferences(t *testing.T) {
	ms := redlocktest.NewMasters(t, 3)
	c := newClient(t, redlocktest.Clients(ms))
	err := c.Verify(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot be identified", "miniredis's INFO has no run_id nor role")
}

// TestRestartOnTakenPort: a master restarts on its address, and fails,
// still killed, while another process holds the port.
func TestRestartOnTakenPort(t *testing.T) {
	ms := redlocktest.NewMasters(t, 1)
	m := ms[0]
	ctx := t.Context()
	require.NoError(t, m.Kill(ctx))
	taker, err := net.Listen("tcp", m.Addr())
	require.NoError(t, err, "the port is free while the master is killed")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = m.Restart(short)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "retried until the context ended")
	assert.False(t, m.Running())
	require.NoError(t, taker.Close())
	require.NoError(t, m.Restart(ctx))
	require.NoError(t, m.Client().Ping(ctx).Err())
}
