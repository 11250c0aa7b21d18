package election

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// guardTTL is the TTL of the tests in this file.
const guardTTL = 2 * time.Second

// guardClients starts five masters and returns n clients on them.
func guardClients(t *testing.T, n int) (*harness.Cluster, []*redlock.Client) {
	t.Helper()
	cl := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	clients := make([]*redlock.Client, n)
	for k := range clients {
		masters := make([]*redis.Client, len(cl.Masters))
		for i, m := range cl.Masters {
			masters[i] = redis.NewClient(harness.MasterOptions(m.Addr()))
		}
		c, err := redlock.New(masters, &redlock.Options{MasterTimeout: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, c.Close())
			for _, m := range masters {
				_ = m.Close()
			}
		})
		clients[k] = c
	}
	return cl, clients
}

// TestGuardLossLetsTheLockGo: a leadership that ends by its guard while
// its lock is still renewed (a renewal that lands late, a pause of the
// process) must not keep the lock for ever. The user never calls
// Resign. Here three masters are paused once Campaign returns, so no
// renewal can move the validity: the guard (7/10 of the TTL) fires at
// most 0.3 TTL after the last renewal that landed, 0.6s. Done gets 2
// TTLs, for a late timer. The masters are resumed then, with about 1.4s
// of validity left. Renewal gives up only with 0.3s left (a retry and
// MasterTimeout), so a retry lands first and keeps the lock; where it
// does not, the lock is lost, and the test passes without proving much.
// Another candidate must still lead, at the latest when the validity the
// guard saw runs out, 0.7 TTL after the guard fired; 3 TTLs is the
// bound. Without the let-go, the lock keeps it out for good.
func TestGuardLossLetsTheLockGo(t *testing.T) {
	ctx := t.Context()
	cl, clients := guardClients(t, 2)
	a, err := New(clients[0], t.Name(), &Options{TTL: guardTTL})
	require.NoError(t, err)
	a.guard = 7 * guardTTL / 10
	b, err := New(clients[1], t.Name(), &Options{TTL: guardTTL})
	require.NoError(t, err)

	la, err := a.Campaign(ctx, "a")
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
	case <-la.Done():
	case <-time.After(2 * guardTTL):
		t.Fatal("the guard did not end the leadership")
	}
	for i := range 3 {
		require.NoError(t, cl.Masters[i].Resume(ctx))
	}
	require.ErrorIs(t, la.Err(), ErrLost)
	ended := time.Now()

	wait, cancel := context.WithTimeout(ctx, 3*guardTTL)
	defer cancel()
	lb, err := b.Campaign(wait, "b")
	require.NoError(t, err, "the lost leadership's lock kept every other candidate out")
	t.Logf("next leader %v after the guard; a's lock held: %v", time.Since(ended), la.lock.Held())
	assert.Greater(t, lb.Epoch(), la.Epoch())
	require.NoError(t, lb.Resign(ctx))
	assert.NoError(t, la.Resign(ctx), "nothing left to release")
}

// TestLateGuardTimerStillEndsTheLead: the guard's timer may fire late (a
// paused process, a starved runtime). Err and Proclaim must still tell
// that the lead ended once Until passed, rather than proclaim a value
// for a leader whose lock may be gone. The timer is stopped here, and
// renewals fail (three masters paused); the guard is half the TTL, so
// Until passes 1s before the lock's validity runs out.
func TestLateGuardTimerStillEndsTheLead(t *testing.T) {
	ctx := t.Context()
	cl, clients := guardClients(t, 1)
	e, err := New(clients[0], t.Name(), &Options{TTL: guardTTL})
	require.NoError(t, err)
	e.guard = guardTTL / 2
	l, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	l.timer.Stop()
	for i := range 3 {
		require.NoError(t, cl.Masters[i].Pause(ctx))
	}
	t.Cleanup(func() {
		for i := range 3 {
			_ = cl.Masters[i].Resume(context.Background())
		}
	})
	time.Sleep(time.Until(l.Until()) + 10*time.Millisecond)
	require.True(t, l.lock.Held(), "the lock's validity ran out already: the machine is too slow for this test")
	assert.ErrorIs(t, l.Err(), ErrLost)
	assert.ErrorIs(t, l.Proclaim(ctx, "late"), ErrLost)
	select {
	case <-l.Done():
	default:
		t.Error("Done open after Err reported the loss")
	}
}
