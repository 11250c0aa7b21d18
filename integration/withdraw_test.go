package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// behind starts five masters and a client whose master 0 is behind: paused,
// with the call of an acquire of "first" in flight there for 600ms. Master
// 0 is behind once busy for twice as long as a round took to be decided
// (rounds on loopback take milliseconds, even on a busy machine), and for
// at least a twentieth of MasterTimeout (100ms here): 600ms leaves a wide
// margin. Calls end at their contexts' deadlines (seconds),
// not at a 200ms read timeout, so master 0 stays busy until it resumes.
func behind(t *testing.T) (*integration.Cluster, *redlock.Client, *redlock.Lock) {
	t.Helper()
	cl := integration.NewCluster(t, 5)
	c, err := redlock.New(patientClients(t, cl.Addrs(), 10*time.Second), &redlock.Options{MasterTimeout: 2 * time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, cl.Masters[0].Pause(ctx))
	t.Cleanup(func() { _ = cl.Masters[0].Resume(context.Background()) })
	first, err := c.Acquire(ctx, "first", time.Minute)
	require.NoError(t, err)
	time.Sleep(600 * time.Millisecond)
	return cl, c, first
}

// keysOf returns the keys on master i that start with one of prefixes.
func keysOf(t *testing.T, cl *integration.Cluster, i int, prefixes ...string) []string {
	t.Helper()
	keys, err := cl.Admin(i).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	var out []string
	for _, k := range keys {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				out = append(out, k)
			}
		}
	}
	return out
}

// TestAcquireWithdrawnFromMasterThatIsBehind: a round decided while its
// call to a master is still queued behind a call that master has been busy
// with for long never sends that call there. The lock's release skips the
// master, and a failed round has nothing to undo there: once the master
// catches up, it holds no key of those locks, fencing counter included.
func TestAcquireWithdrawnFromMasterThatIsBehind(t *testing.T) {
	cl, c, first := behind(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	for i := 1; i < 5; i++ {
		holdAs(t, cl, i, "held", "other")
	}
	_, err = c.Acquire(ctx, "held", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	// Withdrawn is no master error: it has its own sentinel, and the
	// round's outcome is contention.
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrWithdrawn, "master 0: %v", qe.Masters[0].Err)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrNoReply)
	assert.Equal(t, "contended", redlock.Outcome(err))

	require.NoError(t, cl.Masters[0].Resume(ctx))
	require.NoError(t, first.Release(ctx))
	require.NoError(t, c.Close()) // waits for what is still under way
	assert.Empty(t, keysOf(t, cl, 0, "{job}", "{held}"), "master 0 got calls that were withdrawn")
	v, err := cl.Admin(0).Get(ctx, "{first}").Result()
	require.NoError(t, err, "the call in flight was not withdrawn: it left the fencing counter")
	assert.True(t, isFree(v), "{first} = %q", v)
	assert.Equal(t, []string{"", "", "", "", ""}, values(t, cl, "job"))
}

// TestReleaseAfterRepairOfWithdrawnMaster: where the acquire was withdrawn
// and an extend then repaired the lock, the release does not skip the
// master: the repaired key is deleted.
func TestReleaseAfterRepairOfWithdrawnMaster(t *testing.T) {
	cl, c, first := behind(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.NoError(t, cl.Masters[0].Resume(ctx))
	require.NoError(t, first.Release(ctx))

	require.NoError(t, l.Extend(ctx, time.Minute))
	require.Eventually(t, func() bool { return stored(t, cl, 0, "job").Owner == l.Value() },
		5*time.Second, time.Millisecond, "the extend repairs master 0")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	assert.Equal(t, []string{"", "", "", "", ""}, values(t, cl, "job"))
}
