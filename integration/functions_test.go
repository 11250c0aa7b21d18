package integration_test

// Where a master takes Redis Functions, the scripts run as FCALLs of one
// library that the client loads; elsewhere as EVALSHA. Both must give the
// same locks.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// libraries returns the names of the function libraries on master i.
func libraries(t *testing.T, cl *integration.Cluster, i int) []string {
	t.Helper()
	libs, err := cl.Admin(i).FunctionList(t.Context(), redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	var names []string
	for _, l := range libs {
		names = append(names, l.Name)
	}
	return names
}

// The first calls load the library; a master that lost it (FUNCTION FLUSH,
// as after a restart without persistence) gets it again, and no
// operation fails meanwhile.
func TestFunctionsLoadedAndReloaded(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	c := newClient(t, cl, nil)
	ctx := t.Context()
	lockAndUnlock := func(what string) {
		l, err := c.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err, what)
		require.NoError(t, l.Extend(ctx, 10*time.Second), what)
		require.NoError(t, l.Release(ctx), what)
	}
	// The first calls go as scripts while the library loads, and some may
	// still land (a master behind gets its calls after the quorum); then
	// every call goes as FCALL.
	for end := time.Now().Add(10 * time.Second); ; {
		require.True(t, time.Now().Before(end), "operations still run scripts after 10s")
		for i := range cl.Masters {
			require.NoError(t, cl.Admin(i).ConfigResetStat(ctx).Err())
		}
		lockAndUnlock("until all FCALL")
		fcalls, scripts := 0, 0
		for i := range cl.Masters {
			info, err := cl.Admin(i).Info(ctx, "commandstats").Result()
			require.NoError(t, err)
			fcalls += statCalls(info, "fcall")
			scripts += statCalls(info, "evalsha") + statCalls(info, "eval")
		}
		// Each operation returned once a quorum of three had answered.
		if scripts == 0 && fcalls >= 9 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range cl.Masters {
		for end := time.Now().Add(10 * time.Second); len(libraries(t, cl, i)) == 0; time.Sleep(5 * time.Millisecond) {
			require.True(t, time.Now().Before(end), "master %d has no library after 10s", i)
		}
		libs := libraries(t, cl, i)
		require.Len(t, libs, 1, "master %d", i)
		assert.True(t, strings.HasPrefix(libs[0], "redlock_"), libs[0])
	}

	for i := range cl.Masters {
		require.NoError(t, cl.Admin(i).FunctionFlush(ctx).Err())
	}
	// A master that gets an FCALL loads the library again; one behind may
	// have its calls withdrawn, so lock again until every master has it.
	reloaded := func() bool {
		for i := range cl.Masters {
			if len(libraries(t, cl, i)) == 0 {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(10 * time.Second); ; {
		lockAndUnlock("after FUNCTION FLUSH")
		if reloaded() {
			break
		}
		require.True(t, time.Now().Before(end), "a master has no library 10s after FUNCTION FLUSH")
	}
}

// Masters that refuse functions (here an ACL; Redis 6 has none) run the
// scripts as EVALSHA, beside masters that run FCALLs, and the locks are the
// same: exclusive, fenced, released.
func TestFunctionsRefusedOnSomeMasters(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	ctx := t.Context()
	clients := slices.Clone(cl.Clients())
	for i := range 2 {
		require.NoError(t, cl.Admin(i).Do(ctx, "acl", "setuser", "nofunctions", "on", ">secret",
			"~*", "&*", "+@all", "-function", "-fcall").Err())
		opt := integration.MasterOptions(cl.Masters[i].Addr())
		opt.Username, opt.Password = "nofunctions", "secret"
		clients[i] = redis.NewClient(opt)
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	c, err := redlock.New(clients, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	require.NoError(t, c.LoadScripts(ctx), "a refusal is not an error")

	// A call to a master that is behind may be withdrawn: lock and unlock
	// until both refusing masters have run scripts.
	ranScripts := func(i int) bool {
		info, err := cl.Admin(i).Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		return statCalls(info, "evalsha") > 0
	}
	for end := time.Now().Add(10 * time.Second); !ranScripts(0) || !ranScripts(1); {
		require.True(t, time.Now().Before(end), "the refusing masters ran no script in 10s")
		l, err := c.Acquire(ctx, "warm", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	l, err := c.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	for i := range cl.Masters {
		info, err := cl.Admin(i).Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		if i < 2 {
			assert.NotContains(t, info, "cmdstat_fcall:", "master %d: no FCALL tried", i)
		} else {
			assert.Zero(t, statCalls(info, "evalsha")+statCalls(info, "eval"), "master %d", i)
		}
	}

	other := newClient(t, cl, nil) // loads the library on every master
	_, err = other.Acquire(ctx, "job", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, l.Release(ctx))
	l2, err := other.Acquire(ctx, "job", 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, l2.Token(), l.Token())
	require.NoError(t, l2.Release(ctx))
}
