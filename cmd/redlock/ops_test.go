package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

// ops runs an operations command against cluster's masters and returns
// its exit status, stdout and stderr.
func ops(t *testing.T, cluster *harness.Cluster, args ...string) (int, string, string) {
	t.Helper()
	args = append([]string{args[0], "-masters", strings.Join(cluster.Addrs(), ",")}, args[1:]...)
	var stdout, stderr bytes.Buffer
	code := opsCLI(t.Context(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func newLockClient(t *testing.T, cluster *harness.Cluster) *redlock.Client {
	t.Helper()
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func TestInspect(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	c := newLockClient(t, cluster)
	ctx := t.Context()

	code, out, _ := ops(t, cluster, "inspect", "job")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "quorum: not held")

	l, err := c.AcquireAs(ctx, "job", "alice", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the masters after the quorum get it in the background
		_, out, _ := ops(t, cluster, "inspect", "-json", "job")
		var v LockView
		return json.Unmarshal([]byte(out), &v) == nil && v.Writer != nil && v.Writer.Masters == 5
	}, 5*time.Second, 10*time.Millisecond)

	code, out, _ = ops(t, cluster, "inspect", "-json", "job")
	require.Equal(t, 0, code)
	var v LockView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, "job", v.Key)
	assert.Equal(t, 3, v.Quorum)
	require.Len(t, v.Masters, 5)
	token := strconv.FormatUint(l.Token(), 10)
	for _, m := range v.Masters {
		assert.Equal(t, "alice", m.Owner)
		assert.Equal(t, 1, m.Holds)
		assert.Equal(t, token, m.Token)
		assert.True(t, m.TTLms > 0 && m.TTLms <= time.Minute.Milliseconds(), "TTL %d ms", m.TTLms)
		assert.Equal(t, token, m.Fence)
		assert.Positive(t, m.FenceTTLms, "counters expire with the lock's key")
	}
	require.NotNil(t, v.Writer)
	assert.True(t, v.Writer.Held)
	assert.Equal(t, "alice", v.Writer.Owner)
	assert.Equal(t, token, v.Writer.Token)
	require.NotNil(t, v.Writer.Until)
	assert.WithinDuration(t, time.Now().Add(time.Minute), *v.Writer.Until, 5*time.Second)

	code, out, _ = ops(t, cluster, "inspect", "job")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "quorum: held by alice")
	assert.Contains(t, out, "token "+token)
	require.NoError(t, l.Release(ctx))
}

func TestInspectReaders(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c := newLockClient(t, cluster)
	ctx := t.Context()
	r, err := c.AcquireRead(ctx, "doc", "reader-1", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, out, _ := ops(t, cluster, "inspect", "-json", "doc")
		var v LockView
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil && len(v.Readers) == 1 && v.Readers[0].Masters == 3
	}, 5*time.Second, 10*time.Millisecond)
	_, out, _ := ops(t, cluster, "inspect", "doc")
	assert.Contains(t, out, "quorum: read by reader-1 on 3 of 3 masters")
	assert.Nil(t, mustView(t, cluster, "doc").Writer)
	require.NoError(t, r.Release(ctx))
}

func mustView(t *testing.T, cluster *harness.Cluster, key string) LockView {
	t.Helper()
	_, out, _ := ops(t, cluster, "inspect", "-json", key)
	var v LockView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	return v
}

func TestInspectMasterDown(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	require.NoError(t, cluster.Masters[1].Kill(t.Context()))
	code, out, stderr := ops(t, cluster, "inspect", "-json", "-timeout", "500ms", "job")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "1 of 3 masters did not answer")
	var v LockView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.NotEmpty(t, v.Masters[1].Error)
	assert.Empty(t, v.Masters[0].Error)
}

func TestWatch(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	code, out, _ := ops(t, cluster, "watch", "-json", "-count", "3", "-interval", "10ms", "job")
	assert.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	var first, last LockView
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &last))
	assert.True(t, last.At.After(first.At), "refreshed")

	code, out, _ = ops(t, cluster, "watch", "-count", "2", "-interval", "10ms", "job")
	assert.Equal(t, 0, code)
	assert.Equal(t, 2, strings.Count(out, "quorum: not held"))
}

// TestReleaseForce: a lock whose holder is gone (here: still holding, for
// a minute) is deleted on every master, but not its fencing counters; a
// waiter gets the lock at once.
func TestReleaseForce(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	ctx := t.Context()
	client := newLockClient(t, cluster)
	stuck, err := client.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { w := mustView(t, cluster, "job").Writer; return w != nil && w.Masters == 5 },
		5*time.Second, 10*time.Millisecond, "on every master")

	code, _, stderr := ops(t, cluster, "release", "job")
	assert.Equal(t, 2, code, "needs -force")
	assert.Contains(t, stderr, "-force")

	code, out, _ := ops(t, cluster, "release", "-force", "-json", "job")
	require.Equal(t, 0, code, out)
	var res struct{ Masters []ReleaseResult }
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Masters, 5)
	for _, m := range res.Masters {
		assert.Empty(t, m.Error)
		assert.Equal(t, int64(1), m.Deleted, "the lock's key")
	}
	v := mustView(t, cluster, "job")
	assert.Nil(t, v.Writer, "released everywhere")
	for _, m := range v.Masters {
		assert.Equal(t, strconv.FormatUint(stuck.Token(), 10), m.Fence, "the fencing counter stays")
		assert.Positive(t, m.FenceTTLms)
	}

	// A waiter is woken by the forced release.
	stuck, err = client.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	waiter, err := mutex.New(newLockClient(t, cluster), "job", &mutex.Options{TTL: time.Minute, MinRetryDelay: 5 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got <- waiter.Lock(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // let it find the lock held and wait
	code, _, _ = ops(t, cluster, "release", "-force", "job")
	require.Equal(t, 0, code)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(3 * time.Second): // its retry delay is 5s and more: only the wake-up is this fast
		t.Fatal("the waiter did not get the lock after the forced release")
	}
	assert.Greater(t, waiter.Current().Token(), stuck.Token())
	require.NoError(t, waiter.Unlock(ctx))
}

func TestVerify(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	code, out, _ := ops(t, cluster, "verify", "-json")
	require.Equal(t, 0, code, out)
	var r VerifyResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.True(t, r.OK)
	assert.Empty(t, r.Problems)
	require.Len(t, r.Clocks, 3)
	assert.LessOrEqual(t, r.SpreadUs, r.AllowanceUs)
	assert.Equal(t, (100*time.Millisecond + 2*time.Millisecond).Microseconds(), r.AllowanceUs, "10s × 0.01 + 2ms")

	code, out, _ = ops(t, cluster, "verify")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "ok: 3 masters answer")

	// A master given twice is one master.
	a := cluster.Addrs()
	var stdout, stderr bytes.Buffer
	code = opsCLI(t.Context(), []string{"verify", "-masters", a[0] + "," + a[1] + "," + a[0]}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout.String(), "problem: ")
	assert.Contains(t, stdout.String(), "are the same master")

	// A replica is not a master.
	require.NoError(t, cluster.Admin(2).ReplicaOf(t.Context(), "127.0.0.1", strings.Split(a[0], ":")[1]).Err())
	stdout.Reset()
	code = opsCLI(t.Context(), []string{"verify", "-masters", strings.Join(a, ",")}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout.String(), "problem: redlock: master 2")
	assert.Contains(t, stdout.String(), "replica")
}

// TestVerifyClockOffset: one master's clock 1s ahead (libfaketime) is far
// beyond the drift allowance of a 10s TTL.
func TestVerifyClockOffset(t *testing.T) {
	lib := findFaketime(t)
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{EnvFor: func(i int) []string {
		if i == 2 {
			return []string{"LD_PRELOAD=" + lib, "FAKETIME=+1s"}
		}
		return nil
	}})
	code, out, _ := ops(t, cluster, "verify", "-json")
	assert.Equal(t, 1, code)
	var r VerifyResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.False(t, r.OK)
	assert.Greater(t, r.SpreadUs, (900 * time.Millisecond).Microseconds())
	require.NotEmpty(t, r.Problems)
	assert.Contains(t, r.Problems[len(r.Problems)-1], "drift allowance")
}

// findFaketime returns the preload list for libfaketime (with glibc after
// it, as jemalloc needs), skipping the test if it is missing unless
// integration tests are required.
func findFaketime(t *testing.T) string {
	t.Helper()
	libs, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	libc, _ := filepath.Glob("/lib/*/libc.so.6")
	if len(libs) == 0 || len(libc) == 0 {
		if os.Getenv(harness.EnvRequire) == "1" {
			t.Fatalf("libfaketime not found (%s=1): apt-get install -y faketime", harness.EnvRequire)
		}
		t.Skip("libfaketime not found: apt-get install -y faketime")
	}
	return libs[0] + ":" + libc[0]
}
