package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// syncBuffer is a bytes.Buffer that the child's output and redlock run's
// own messages may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runRun runs redlock run against cluster's masters with args, and
// returns its exit status and stderr.
func runRun(ctx context.Context, cluster *harness.Cluster, args ...string) (int, string) {
	var stdout, stderr syncBuffer
	full := append([]string{"run", "-masters", strings.Join(cluster.Addrs(), ","), "-master-timeout", "200ms"}, args...)
	code := runCLI(ctx, full, nil, &stdout, &stderr)
	return code, stderr.String()
}

// assertNoLock checks, within 5s, that the lock named key is free on
// every master: released, or never taken.
func assertNoLock(t *testing.T, cluster *harness.Cluster, key string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		for i := range cluster.Masters {
			v, _ := cluster.Admin(i).Get(context.Background(), "{"+key+"}").Result()
			if v != "" && !strings.HasPrefix(v, "f:") {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
}

func TestRunExitStatus(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := t.Context()
	code, stderr := runRun(ctx, cluster, "-lock", "job", "--", "sh", "-c", "exit 3")
	assert.Equal(t, 3, code, stderr)
	code, stderr = runRun(ctx, cluster, "-lock", "job", "--", "sh", "-c", "kill -KILL $$")
	assert.Equal(t, 128+9, code, stderr)
	code, stderr = runRun(ctx, cluster, "-lock", "job", "--", "no-such-command-redlock")
	assert.Equal(t, 127, code, stderr)
	assertNoLock(t, cluster, "job")
}

func TestRunUsage(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	ctx := t.Context()
	for name, args := range map[string][]string{
		"no lock":    {"--", "true"},
		"no command": {"-lock", "job"},
		"bad flag":   {"-lock", "job", "-nope", "--", "true"},
		"short TTL":  {"-lock", "job", "-ttl", "1ms", "--", "true"},
		"grace":      {"-lock", "job", "-grace", "-1s", "--", "true"},
		"long grace": {"-lock", "job", "-ttl", "3s", "-grace", "1001ms", "--", "true"},
	} {
		code, stderr := runRun(ctx, cluster, args...)
		assert.Equal(t, 2, code, name)
		assert.Contains(t, stderr, "usage: redlock run", name)
	}
	var stderr syncBuffer
	assert.Equal(t, 2, runCLI(ctx, []string{"run", "-masters", "", "-lock", "job", "--", "true"}, nil, &stderr, &stderr), "no masters")
	// Below fencing's least TTL: refused before any call, naming both.
	code, out := runRun(ctx, cluster, "-lock", "job", "-ttl", "1s", "-master-timeout", "300ms", "--", "true")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "redlock run: -ttl 1s must be at least 4 times -master-timeout 300ms (1.2s)\n")
	assertNoLock(t, cluster, "job")
}

// Without -wait, a lock held elsewhere ends redlock run at once.
func TestRunHeldElsewhere(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := t.Context()
	c := newLockClient(t, cluster)
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	dir := t.TempDir()
	code, stderr := runRun(ctx, cluster, "-lock", "job", "--", "touch", filepath.Join(dir, "ran"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `"job" not obtained`)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
	require.NoError(t, l.Release(ctx))
}

// The lock is released from under the first child: it gets SIGTERM, and
// the waiting second run starts its child.
func TestRunLossStopsChild(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := t.Context()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	// sh runs the trap once the sleep under way ends.
	script := `trap 'echo TERM >> "$0"; exit 7' TERM; echo started > "$0"; while :; do sleep 0.05; done`

	type result struct {
		code   int
		stderr string
	}
	firstDone, secondDone := make(chan result, 1), make(chan result, 1)
	go func() {
		code, stderr := runRun(ctx, cluster, "-lock", "job", "-ttl", "1500ms", "-grace", "500ms", "--", "sh", "-c", script, first)
		firstDone <- result{code, stderr}
	}()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(first)
		return strings.Contains(string(b), "started")
	}, 10*time.Second, 10*time.Millisecond, "the first child did not start")
	go func() {
		code, stderr := runRun(ctx, cluster, "-lock", "job", "-ttl", "1500ms", "-wait", "--", "sh", "-c", `echo second > "$0"`, second)
		secondDone <- result{code, stderr}
	}()
	// The second run waits while the first holds the lock, over several
	// renewals (one per half second).
	time.Sleep(1500 * time.Millisecond)
	assert.NoFileExists(t, second, "the second child ran while the first held the lock")

	code, out, stderr := ops(t, cluster, "release", "-force", "job")
	require.Equal(t, 0, code, out+stderr)

	var r result
	select {
	case r = <-firstDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run did not end within 20s of the loss")
	}
	assert.Equal(t, 7, r.code, "the child's exit status: %s", r.stderr)
	assert.Contains(t, r.stderr, "sending SIGTERM")
	b, _ := os.ReadFile(first)
	assert.Contains(t, string(b), "TERM", "the child got SIGTERM")

	select {
	case r = <-secondDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the second run did not end within 20s")
	}
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, second)
	assertNoLock(t, cluster, "job")
}

// A child that ignores SIGTERM is killed after the grace.
func TestRunKillsAfterGrace(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	done := make(chan int, 1)
	go func() {
		code, _ := runRun(ctx, cluster, "-lock", "job", "-grace", "200ms", "--", "sh", "-c", `trap '' TERM; touch "$0"; while :; do sleep 0.05; done`, started)
		done <- code
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 10*time.Second, 10*time.Millisecond)
	cancel() // as SIGINT to redlock run
	select {
	case code := <-done:
		assert.Equal(t, 128+9, code, "SIGKILL")
	case <-time.After(20 * time.Second):
		t.Fatal("redlock run did not end within 20s")
	}
	assertNoLock(t, cluster, "job")
}

// -grace 0 kills at once a child that ignores SIGTERM: it must not run
// on without the lock.
func TestRunZeroGraceKills(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	started := filepath.Join(t.TempDir(), "started")
	done := make(chan int, 1)
	go func() {
		code, _ := runRun(ctx, cluster, "-lock", "job", "-grace", "0", "--", "sh", "-c", `trap '' TERM; echo $$ > "$0"; while :; do sleep 0.05; done`, started)
		done <- code
	}()
	var pid int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(started)
		_, err := fmt.Sscan(string(b), &pid)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	cancel() // as SIGINT to redlock run
	select {
	case code := <-done:
		assert.Equal(t, 128+9, code, "SIGKILL")
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL) // the child outlived the grace
		<-done
		t.Fatal("the child ran on 10s after its SIGTERM, with -grace 0")
	}
	assertNoLock(t, cluster, "job")
}

// What the child started goes with it: on a loss, signals reach its
// whole process group, and a background job it leaves is killed before
// the lock is released.
func TestRunStopsTheChildsGroup(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	dir := t.TempDir()
	gone := func(pidFile string) func() bool {
		return func() bool {
			b, err := os.ReadFile(pidFile)
			var pid int
			if _, serr := fmt.Sscan(string(b), &pid); err != nil || serr != nil {
				return false
			}
			// A killed process may stay a zombie until init reaps it.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err != nil || strings.Contains(string(stat), ") Z ")
		}
	}

	// The child exits at once, leaving a job in the background.
	left := filepath.Join(dir, "left")
	code, stderr := runRun(t.Context(), cluster, "-lock", "job", "--", "sh", "-c", `sleep 60 & echo $! > "$0"`, left)
	require.Equal(t, 0, code, stderr)
	assert.Eventually(t, gone(left), 5*time.Second, 10*time.Millisecond, "the background job outlived the child")

	// Interrupted: the child and its job get the signals.
	ctx, cancel := context.WithCancel(t.Context())
	job := filepath.Join(dir, "job")
	done := make(chan int, 1)
	go func() {
		code, _ := runRun(ctx, cluster, "-lock", "job", "-grace", "200ms", "--", "sh", "-c", `sleep 60 & echo $! > "$0"; wait`, job)
		done <- code
	}()
	require.Eventually(t, func() bool { b, _ := os.ReadFile(job); return len(b) > 0 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("redlock run did not end within 20s")
	}
	assert.Eventually(t, gone(job), 5*time.Second, 10*time.Millisecond, "the child's job outlived it")
	assertNoLock(t, cluster, "job")
}

// beforeValidity ends the child's context grace before the validity, and
// follows renewals. Only its lower bound is timing: it never fires early.
func TestBeforeValidity(t *testing.T) {
	const grace = 100 * time.Millisecond
	var until atomic.Int64
	until.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
	read := func() time.Time { return time.Unix(0, until.Load()) }
	start := time.Now()
	ctx, stop := beforeValidity(t.Context(), read, grace)
	defer stop()
	// A renewal moves the validity before the first timer fires.
	until.Store(time.Now().Add(600 * time.Millisecond).UnixNano())
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not cancelled within 10s")
	}
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "cancelled before the moved validity less the grace")
	assert.ErrorIs(t, context.Cause(ctx), redlock.ErrNotHeld)

	// stop ends it early, and its goroutine with it.
	until.Store(time.Now().Add(time.Hour).UnixNano())
	ctx, stop = beforeValidity(t.Context(), read, grace)
	stop()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
}

// tokenChild is a script that writes $REDLOCK_FENCING_TOKEN to the file
// $0, then runs until the file $1 exists (at most 20s).
const tokenChild = `echo "$REDLOCK_FENCING_TOKEN" > "$0.tmp"; mv "$0.tmp" "$0"; i=0; while [ ! -e "$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done`

// runWithToken runs redlock run with args and tokenChild, and calls
// check with the token the child got while it still runs. It returns
// the token and redlock run's exit status.
func runWithToken(t *testing.T, cluster *harness.Cluster, check func(token string), args ...string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	got, stop := filepath.Join(dir, "token"), filepath.Join(dir, "stop")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code, _ := runRun(ctx, cluster, append(args, "--", "sh", "-c", tokenChild, got, stop)...)
		done <- code
	}()
	var token string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(got)
		token = strings.TrimSpace(string(b))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the child did not start")
	check(token)
	require.NoError(t, os.WriteFile(stop, nil, 0o600))
	select {
	case code := <-done:
		return token, code
	case <-time.After(20 * time.Second):
		t.Fatal("redlock run did not end within 20s of its child's stop")
		return "", 0
	}
}

// The child gets the lock's fencing token, as inspect reads it on the
// masters while the child runs, in place of an outer redlock run's; the
// next run's token is larger.
func TestRunFencingToken(t *testing.T) {
	t.Setenv(tokenEnv, "18446744073709551615") // as under an outer run
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	held := func(token string) {
		w := mustView(t, cluster, "job").Writer
		require.NotNil(t, w, "the lock is not held while the child runs")
		assert.Equal(t, w.Token, token)
	}
	first, code := runWithToken(t, cluster, held, "-lock", "job")
	assert.Equal(t, 0, code)
	second, code := runWithToken(t, cluster, held, "-lock", "job", "-wait")
	assert.Equal(t, 0, code)
	a, errA := strconv.ParseUint(first, 10, 64)
	b, errB := strconv.ParseUint(second, 10, 64)
	require.NoError(t, errA, "token %q", first)
	require.NoError(t, errB, "token %q", second)
	assert.Positive(t, a)
	assert.Greater(t, b, a)
	assertNoLock(t, cluster, "job")
}
