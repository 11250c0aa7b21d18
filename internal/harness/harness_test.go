package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCtx bounds a whole test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCluster starts n process masters for a test.
func newCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	return NewProcessCluster(t, n, ProcessOptions{})
}

// runID returns the run_id of master i: it changes at every start.
func runID(ctx context.Context, t *testing.T, c *Cluster, i int) string {
	t.Helper()
	info, err := c.Admin(i).Info(ctx, "server").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\r\n") {
		if id, ok := strings.CutPrefix(line, "run_id:"); ok {
			return id
		}
	}
	require.FailNow(t, "no run_id in INFO server", info)
	return ""
}

// pids returns the process id of every live process master.
func pids(t *testing.T, c *Cluster) []int {
	var out []int
	for _, m := range c.Masters {
		pm, ok := m.(*processMaster)
		require.True(t, ok, "%s is not a process master", m.Name())
		if pid := pm.pid(); pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// requireRefused asserts that nothing listens on addr.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
	}
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func TestSetGetOnEveryMaster(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 3)

	require.Len(t, c.Masters, 3)
	addrs := c.Addrs()
	require.Len(t, addrs, 3)
	assert.Len(t, map[string]bool{addrs[0]: true, addrs[1]: true, addrs[2]: true}, 3, "addresses must differ")

	clients := c.Clients()
	require.Len(t, clients, 3)
	assert.Same(t, clients[0], c.Clients()[0], "Clients must be cached")
	for i, cl := range clients {
		assert.Equal(t, "m"+strconv.Itoa(i), c.Masters[i].Name())
		assert.True(t, c.Masters[i].Running())
		assert.Equal(t, addrs[i], cl.Options().Addr)
		val := "v" + strconv.Itoa(i)
		require.NoError(t, cl.Set(ctx, "k", val, 0).Err())
		got, err := cl.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, val, got)
		// The admin client sees the same data through its own pool.
		got, err = c.Admin(i).Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, val, got)
	}
	assert.Equal(t, []int{1, 1, 1}, c.KeyCounts(ctx))

	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, []int{0, 0, 0}, c.KeyCounts(ctx))
}

func TestKillAndRestart(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 3)
	m := c.Masters[1]
	addr := m.Addr()
	for _, cl := range c.Clients() {
		require.NoError(t, cl.Set(ctx, "k", "v", 0).Err())
	}

	require.NoError(t, m.Kill(ctx))
	assert.False(t, m.Running())
	requireRefused(t, addr)
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	assert.Error(t, c.Clients()[1].Ping(pingCtx).Err())
	assert.Equal(t, []int{1, -1, 1}, c.KeyCounts(ctx))
	require.NoError(t, c.FlushAll(ctx), "FlushAll must skip masters that are down")
	assert.Equal(t, []int{0, -1, 0}, c.KeyCounts(ctx))

	require.NoError(t, m.Kill(ctx), "Kill must be idempotent")
	require.ErrorIs(t, m.Pause(ctx), ErrNotRunning)
	require.ErrorIs(t, m.Resume(ctx), ErrNotRunning)

	require.NoError(t, m.Restart(ctx))
	assert.True(t, m.Running())
	assert.Equal(t, addr, m.Addr(), "Restart must keep the address")
	n, err := c.Admin(1).DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a restarted master must be empty")
	// The Redlock client reconnects on its own (its stale connection is
	// dropped by the pool's health check or by one failed command).
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return c.Clients()[1].Ping(ctx).Err() == nil
	}, 5*time.Second, 20*time.Millisecond)

	// Restart of a running master replaces the server and its data.
	require.NoError(t, c.Admin(1).Set(ctx, "k", "v", 0).Err())
	beforeRun := runID(ctx, t, c, 1)
	beforePid := pids(t, c)[1]
	require.NoError(t, m.Restart(ctx))
	assert.NotEqual(t, beforeRun, runID(ctx, t, c, 1), "Restart must start a new server")
	assert.NotEqual(t, beforePid, pids(t, c)[1])
	assert.ErrorIs(t, syscall.Kill(beforePid, 0), syscall.ESRCH, "old process must be reaped")
	assert.Equal(t, []int{0, 0, 0}, c.KeyCounts(ctx))
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	m := c.Masters[0]
	require.NoError(t, m.Kill(ctx))
	squatter, err := net.Listen("tcp", m.Addr())
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, func() { squatter.Close() })

	start := time.Now()
	require.NoError(t, m.Restart(ctx))
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.NoError(t, c.Admin(0).Ping(ctx).Err())

	// A port that stays busy makes Restart fail, with the reason.
	require.NoError(t, m.Kill(ctx))
	squatter2, err := net.Listen("tcp", m.Addr())
	require.NoError(t, err)
	defer squatter2.Close()
	err = m.Restart(ctx)
	require.ErrorIs(t, err, ErrAddrInUse)
	assert.Contains(t, strings.ToLower(err.Error()), "address already in use", "the error must give the reason")
	assert.False(t, m.Running())
}

func TestPauseAndResume(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	m, cl := c.Masters[0], c.Clients()[0]
	require.NoError(t, cl.Ping(ctx).Err())

	require.NoError(t, m.Pause(ctx))
	assert.True(t, m.Running(), "a paused master still counts as running")
	start := time.Now()
	pingCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := cl.Ping(pingCtx).Err()
	require.Error(t, err)
	assert.Less(t, time.Since(start), time.Second, "the ctx must bound a PING to a paused master")
	start = time.Now()
	assert.Equal(t, []int{-1, 0}, c.KeyCounts(ctx))
	assert.Less(t, time.Since(start), time.Second, "KeyCounts must not wait for a paused master")
	require.NoError(t, m.Pause(ctx), "Pause must be idempotent")

	require.NoError(t, m.Resume(ctx))
	require.NoError(t, cl.Ping(ctx).Err())
	assert.Equal(t, []int{0, 0}, c.KeyCounts(ctx))
}

func TestCloseStopsEverything(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 3)
	require.NoError(t, c.Masters[1].Pause(ctx), "a paused master must die too")
	require.NoError(t, c.Masters[2].Kill(ctx))
	ps := pids(t, c)
	require.Len(t, ps, 2)
	dir := rootDir(c)
	require.DirExists(t, dir)
	addrs := c.Addrs()

	require.NoError(t, c.Close())
	for _, pid := range ps {
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "pid %d still exists", pid)
	}
	for i, m := range c.Masters {
		assert.False(t, m.Running())
		requireRefused(t, addrs[i])
	}
	assert.NoDirExists(t, dir)
	assert.NoError(t, c.Close(), "Close must be idempotent")
	assert.ErrorIs(t, c.Clients()[0].Ping(ctx).Err(), redis.ErrClosed)
	assert.ErrorIs(t, c.Admin(1).Ping(ctx).Err(), redis.ErrClosed, "clients made after Close are closed")
}

// rootDir returns the temporary root directory of a process cluster.
func rootDir(c *Cluster) string {
	return filepath.Dir(c.Masters[0].(*processMaster).dir)
}

func TestConcurrentControl(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	m := c.Masters[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				_ = m.Pause(ctx)
				_ = m.Resume(ctx)
				_ = m.Kill(ctx)
				assert.NoError(t, m.Restart(ctx))
				_ = m.Running()
				_ = c.KeyCounts(ctx)
				_ = c.Clients()
				_ = c.Admin(1)
			}
		})
	}
	wg.Wait()
	// Whatever the interleaving, the master ends up running and unpaused.
	require.NoError(t, m.Resume(ctx))
	require.True(t, m.Running())
	require.NoError(t, c.Admin(0).Ping(ctx).Err())
	assert.Len(t, pids(t, c), 2)
}

func TestBinaryAndEnv(t *testing.T) {
	real, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip(ErrNoRedisServer)
	}
	// redis-server overwrites /proc/<pid>/environ (for its process title), so
	// a wrapper records the environment it was given before exec'ing redis.
	wrapper := filepath.Join(t.TempDir(), "redis-wrapper")
	script := "#!/bin/sh\nenv > env.txt\nexec " + real + " \"$@\"\n"
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o700))

	c := NewProcessCluster(t, 2, ProcessOptions{
		Binary: wrapper,
		Env:    []string{"REDLOCK_TEST_ALL=yes"},
		EnvFor: func(i int) []string { return []string{"REDLOCK_TEST_ONE=" + strconv.Itoa(i)} },
	})
	for i, m := range c.Masters {
		b, err := os.ReadFile(filepath.Join(m.(*processMaster).dir, "env.txt"))
		require.NoError(t, err)
		env := strings.Split(string(b), "\n")
		assert.Contains(t, env, "REDLOCK_TEST_ALL=yes")
		assert.Contains(t, env, "REDLOCK_TEST_ONE="+strconv.Itoa(i))
		assert.NotContains(t, env, "REDLOCK_TEST_ONE="+strconv.Itoa(1-i))
	}
}

func TestStartFailureQuotesLog(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(ErrNoRedisServer)
	}
	_, err := StartProcesses(testCtx(t), 2, ProcessOptions{Args: []string{"--no-such-directive", "x"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-directive", "the error must quote the log")
}

func TestMissingBinary(t *testing.T) {
	_, err := StartProcesses(testCtx(t), 1, ProcessOptions{Binary: "/nonexistent/redis-server"})
	require.ErrorIs(t, err, ErrNoRedisServer)
	assert.Contains(t, err.Error(), "apt-get install -y redis-server")
}
