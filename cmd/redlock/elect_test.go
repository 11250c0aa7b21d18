package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/internal/harness"
)

// electRun runs redlock leader or observe against cluster's masters with
// args, and returns its exit status, stdout and stderr.
func electRun(ctx context.Context, cluster *harness.Cluster, stdout *syncBuffer, args ...string) (int, string) {
	var stderr syncBuffer
	full := append([]string{args[0], "-masters", strings.Join(cluster.Addrs(), ","), "-master-timeout", "200ms"}, args[1:]...)
	code := electCLI(ctx, full, stdout, &stderr)
	return code, stderr.String()
}

// tokensIn returns the tokens of the lines "what TOKEN" in the file at
// path, in order, each a positive decimal number.
func tokensIn(t *testing.T, path, what string) []uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tokens []uint64
	for line := range strings.Lines(string(b)) {
		token, ok := strings.CutPrefix(strings.TrimSpace(line), what+" ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(token, 10, 64)
		require.NoError(t, err, "%s: %q", path, line)
		require.Positive(t, n, "%s: %q", path, line)
		tokens = append(tokens, n)
	}
	return tokens
}

// countIn returns how many times s occurs in the file at path.
func countIn(path, s string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), s)
}

// The leader's lock is released from under the first run's child: the
// child gets SIGTERM, the waiting second run leads and runs its child,
// which exits, so it resigns; the first run then leads again and runs
// its child again, until it is interrupted. Its exit status is its
// child's last. Each child gets its lead's epoch as the fencing token:
// the second run's is larger than the first lead's, and the first run's
// new lead has a new one, larger still.
func TestRunElectLossAndHandOver(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	ctx := t.Context()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	// sh runs the trap once the sleep under way ends.
	script := `trap 'echo TERM >> "$0"; exit 7' TERM; echo "started $REDLOCK_FENCING_TOKEN" >> "$0"; while :; do sleep 0.05; done`

	type result struct {
		code   int
		stderr string
	}
	firstCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	firstDone, secondDone := make(chan result, 1), make(chan result, 1)
	go func() {
		code, stderr := runRun(firstCtx, cluster, "-elect", "job", "-value", "a", "-ttl", "1500ms", "-grace", "500ms", "--", "sh", "-c", script, first)
		firstDone <- result{code, stderr}
	}()
	require.Eventually(t, func() bool { return countIn(first, "started") == 1 }, 10*time.Second, 10*time.Millisecond, "the first child did not start")

	var out syncBuffer
	code, stderr := electRun(ctx, cluster, &out, "leader", "job")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out.String(), `leader "a" epoch `)
	lead1 := tokensIn(t, first, "started")
	require.Len(t, lead1, 1)
	assert.Contains(t, out.String(), fmt.Sprintf(`leader "a" epoch %d `, lead1[0]), "the first child's token is not its lead's epoch")

	go func() {
		code, stderr := runRun(ctx, cluster, "-elect", "job", "-value", "b", "-ttl", "1500ms", "--", "sh", "-c", `echo "second $REDLOCK_FENCING_TOKEN" >> "$0"`, second)
		secondDone <- result{code, stderr}
	}()
	// The second run waits while the first leads, over several renewals
	// (one per half second).
	time.Sleep(1500 * time.Millisecond)
	assert.NoFileExists(t, second, "the second child ran while the first led")

	code, o, e := ops(t, cluster, "release", "-force", "job")
	require.Equal(t, 0, code, o+e)

	var r result
	select {
	case r = <-secondDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the second run did not end within 20s of the loss")
	}
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 1, countIn(second, "second"))
	assert.Contains(t, r.stderr, "leading \"job\"")
	// The first run learns of the loss at its next renewal, a third of
	// the TTL at most after the release.
	require.Eventually(t, func() bool { return countIn(first, "TERM") == 1 }, 10*time.Second, 10*time.Millisecond, "the first child got no SIGTERM")

	// The second resigned: the first leads again and starts its child.
	require.Eventually(t, func() bool { return countIn(first, "started") == 2 }, 10*time.Second, 10*time.Millisecond, "the first run did not lead again")
	interrupt() // as SIGINT to redlock run
	select {
	case r = <-firstDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run did not end within 20s")
	}
	assert.Equal(t, 7, r.code, "the child's last exit status: %s", r.stderr)
	assert.Contains(t, r.stderr, "campaigning again")
	assert.Equal(t, 2, countIn(first, "TERM"))
	leads := tokensIn(t, first, "started")
	handedOver := tokensIn(t, second, "second")
	require.Len(t, leads, 2)
	require.Len(t, handedOver, 1)
	assert.Less(t, leads[0], handedOver[0], "the second leader's epoch")
	assert.Less(t, handedOver[0], leads[1], "the first run's new lead's epoch")

	out = syncBuffer{}
	code, _ = electRun(ctx, cluster, &out, "leader", "job")
	assert.Equal(t, exitNoLeader, code)
	assert.Equal(t, "no leader\n", out.String())
	assertNoLock(t, cluster, "job")
}

// leader prints the leader, or says there is none with its own status;
// observe prints each change in order until interrupted.
func TestLeaderAndObserve(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	ctx := t.Context()
	var out syncBuffer
	code, stderr := electRun(ctx, cluster, &out, "leader", "job")
	assert.Equal(t, exitNoLeader, code, stderr)
	assert.Equal(t, "no leader\n", out.String())

	octx, stop := context.WithCancel(ctx)
	defer stop()
	var observed syncBuffer
	observeDone := make(chan int, 1)
	go func() {
		code, _ := electRun(octx, cluster, &observed, "observe", "-json", "-ttl", "2s", "job")
		observeDone <- code
	}()
	require.Eventually(t, func() bool { return strings.Contains(observed.String(), `"vacant":true`) }, 10*time.Second, 10*time.Millisecond)

	e, err := election.New(newLockClient(t, cluster), "job", &election.Options{TTL: 2 * time.Second})
	require.NoError(t, err)
	l, err := e.Campaign(ctx, "x")
	require.NoError(t, err)

	out = syncBuffer{}
	code, stderr = electRun(ctx, cluster, &out, "leader", "-json", "job")
	require.Equal(t, 0, code, stderr)
	var v LeaderView
	require.NoError(t, json.Unmarshal([]byte(out.String()), &v))
	assert.Equal(t, "x", v.Value)
	assert.Equal(t, l.Epoch(), v.Epoch)
	require.NotNil(t, v.Until)
	assert.True(t, v.Until.After(v.Time), "until %v is after the read at %v", v.Until, v.Time)

	require.NoError(t, l.Proclaim(ctx, "y"))
	require.NoError(t, l.Resign(ctx))
	want := []string{"vacant", "x/0", "y/1", "vacant"}
	var got []string
	require.Eventually(t, func() bool {
		got = got[:0]
		for line := range strings.Lines(observed.String()) {
			var v LeaderView
			require.NoError(t, json.Unmarshal([]byte(line), &v))
			if v.Vacant {
				got = append(got, "vacant")
			} else {
				got = append(got, fmt.Sprintf("%s/%d", v.Value, v.Seq))
			}
		}
		return len(got) >= len(want)
	}, 10*time.Second, 10*time.Millisecond, "observed %q", observed.String())
	assert.Equal(t, want, got)
	stop()
	select {
	case code := <-observeDone:
		assert.Equal(t, 0, code)
	case <-time.After(10 * time.Second):
		t.Fatal("observe did not end when interrupted")
	}
}

func TestElectUsage(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	ctx := t.Context()
	for name, args := range map[string][]string{
		"lock and elect":    {"-lock", "job", "-elect", "job", "--", "true"},
		"value without":     {"-lock", "job", "-value", "v", "--", "true"},
		"elect, no command": {"-elect", "job"},
		"elect, short TTL":  {"-elect", "job", "-ttl", "1ms", "--", "true"},
	} {
		code, stderr := runRun(ctx, cluster, args...)
		assert.Equal(t, 2, code, name)
		assert.Contains(t, stderr, "usage: redlock run", name)
	}
	for name, args := range map[string][]string{
		"leader, no name":   {"leader"},
		"observe, two":      {"observe", "a", "b"},
		"leader, bad flag":  {"leader", "-nope", "job"},
		"observe, bad TTL":  {"observe", "-ttl", "1ms", "job"},
		"leader, no master": {"leader", "-masters", "", "job"},
	} {
		var out, stderr syncBuffer
		full := append([]string{args[0], "-masters", strings.Join(cluster.Addrs(), ",")}, args[1:]...)
		assert.Equal(t, 2, electCLI(ctx, full, &out, &stderr), name)
		assert.Contains(t, stderr.String(), "usage: redlock leader|observe", name)
	}
	var out, stderr syncBuffer
	assert.Equal(t, 0, electCLI(ctx, []string{"leader", "-h"}, &out, &stderr))
	assert.Contains(t, stderr.String(), "usage: redlock leader|observe")
	assert.Equal(t, 0, runCLI(ctx, []string{"run", "-h"}, nil, &out, &stderr))
	assert.Contains(t, stderr.String(), "-elect NAME")
	assertNoLock(t, cluster, "job")
}

// The child of an elected leader gets its epoch as the fencing token, as
// redlock leader reads it while the child runs.
func TestRunElectFencingToken(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	epoch := func(token string) {
		var out syncBuffer
		code, stderr := electRun(t.Context(), cluster, &out, "leader", "-json", "job")
		require.Equal(t, 0, code, stderr)
		var v LeaderView
		require.NoError(t, json.Unmarshal([]byte(out.String()), &v))
		assert.Equal(t, "a", v.Value)
		assert.Positive(t, v.Epoch)
		assert.Equal(t, strconv.FormatUint(v.Epoch, 10), token)
	}
	_, code := runWithToken(t, cluster, epoch, "-elect", "job", "-value", "a")
	assert.Equal(t, 0, code)
	assertNoLock(t, cluster, "job")
}
