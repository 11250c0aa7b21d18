package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// TestDemoPrintsProgressAndLegend runs the demo on masters it starts itself
// and checks what it prints: the run first, then each master as it comes
// up, then the status lines, the legend and the summary with the verdict
// last; faults go to the masters by their place in the set.
func TestDemoPrintsProgressAndLegend(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOrFail(t, err)
	}
	cfg := defaultConfig()
	cfg.workers, cfg.duration, cfg.ttl = 2, 3*time.Second, 500*time.Millisecond
	var out bytes.Buffer
	sum, err := run(t.Context(), cfg, &out)
	t.Logf("demo output:\n%s", out.String())
	require.NoError(t, err)
	assert.True(t, sum.ok())

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Greater(t, len(lines), 9)
	assert.Equal(t, `redlock demo: 2 workers, each with its own client, compete for lock key "redlock-demo" (ttl 500ms) for 3s`, lines[0])
	assert.Regexp(t, `^starting 5 masters \(redis-server [0-9]+\.[0-9]+\.[0-9]+\)\.\.\.$`, lines[1])
	var addrs []string
	for i := range localMasters {
		m := regexp.MustCompile(fmt.Sprintf(`^  m%d (127\.0\.0\.1:[0-9]+) up \([0-9]+ms\)$`, i)).FindStringSubmatch(lines[2+i])
		if assert.NotNil(t, m, "line %d: %q", 2+i, lines[2+i]) {
			addrs = append(addrs, m[1])
		}
	}
	assert.Equal(t, "verified 5 independent masters", lines[7])
	assert.Regexp(t, `^scripts loaded on 5 masters \([0-9]+ms\)$`, lines[8])
	assert.True(t, strings.HasPrefix(lines[9], "running on 5 local redis-server masters: "), lines[9])

	text := out.String()
	for i, verb := range []string{"kill m2 (" + addrs[2], "restart m2", "pause m4 (" + addrs[4], "resume m4"} {
		if assert.Len(t, sum.events, 4) {
			assert.Contains(t, sum.events[i], verb)
		}
	}
	assert.Regexp(t, `(?m)^t=1s acquired=[0-9]+ .* \| masters up [0-9]/5( \(down: [m0-9 ]+\))? \| overlaps=0 lost=0$`, text)

	legend := strings.Index(text, "--- what the counters mean ---")
	summary := strings.Index(text, "--- summary ---")
	require.Positive(t, legend, "no legend")
	require.Greater(t, summary, legend, "the legend comes just before the summary")
	for _, label := range []string{"acquired", "  held", "  no-quorum", "  expired", "  ctx", "  not-held", "masters up", "overlaps", "lost updates"} {
		assert.Regexp(t, "(?m)^"+label+" +[a-z]", text[legend:summary], "legend entry %q", label)
	}
	assert.Contains(t, text[legend:summary], "Split votes")
	assert.Contains(t, text[legend:summary], "3 of 5 masters agreed")
	assert.True(t, strings.HasPrefix(lines[len(lines)-1], "result           PASS"), "the verdict comes last: %q", lines[len(lines)-1])

	// run stopped the masters it started.
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		assert.Error(t, err, "%s still listens after the demo", addr)
	}
}

// TestLegendNamesEveryCause keeps the legend in step with the counters.
func TestLegendNamesEveryCause(t *testing.T) {
	legend := fmt.Sprintf(legendFormat, 3, 5, time.Millisecond, time.Millisecond)
	assert.NotContains(t, legend, "%!", "legendFormat and its arguments disagree")
	for _, name := range causeNames {
		assert.Regexp(t, "(?m)^  "+regexp.QuoteMeta(name)+" +[a-z]", legend)
	}
}

// TestMastersUpIsFresh checks that the "masters up" figure asks each master
// anew, whatever the state of the clients' pools that the workers use: a
// master whose pool is busy counts as up, one killed or paused a moment ago
// as down, and one restarted a moment ago as up although its pool still
// remembers the failed dials. Not about timing: each state is set and
// waited for before the ping, and the BLPOPs that keep the pools busy block
// for 2s, ample for the first ping, which follows as soon as they started.
func TestMastersUpIsFresh(t *testing.T) {
	ctx := t.Context()
	c := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ms := clusterSet(c, "3 masters")
	// The workers' clients, with one connection each, held by a BLPOP.
	ms.clients = make([]*redis.Client, len(ms.addrs))
	for i, addr := range ms.addrs {
		opt := harness.MasterOptions(addr)
		opt.PoolSize = 1
		ms.clients[i] = redis.NewClient(opt)
		t.Cleanup(func() { ms.clients[i].Close() })
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, cl := range ms.clients {
		wg.Go(func() { cl.BLPop(context.WithoutCancel(ctx), 2*time.Second, "nothing") })
	}
	require.Eventually(t, func() bool {
		for i := range ms.addrs {
			list, err := c.Admin(i).ClientList(ctx).Result()
			if err != nil || !strings.Contains(list, "cmd=blpop") {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the BLPOPs did not start")

	upDown := func() string {
		up, down := ms.upDown(ms.ping(ctx))
		return fmt.Sprintf("%d up, down %v", up, down)
	}
	assert.Equal(t, "3 up, down []", upDown(), "pools busy")

	require.NoError(t, c.Masters[1].Kill(ctx))
	assert.Equal(t, "2 up, down [m1]", upDown(), "just killed")
	// A worker's attempt fails to dial m1. After PoolSize failed dials a
	// go-redis pool answers with the last dial error, without dialling,
	// until a background probe (once a second) gets through.
	require.Error(t, ms.clients[1].Ping(ctx).Err())
	require.NoError(t, c.Masters[1].Restart(ctx))
	assert.Equal(t, "3 up, down []", upDown(), "just restarted")

	require.NoError(t, c.Masters[2].Pause(ctx))
	assert.Equal(t, "2 up, down [m2]", upDown(), "paused")
	require.NoError(t, c.Masters[2].Resume(ctx))
	assert.Equal(t, "3 up, down []", upDown(), "resumed")
}

// skipOrFail skips a test that needs redis-server when it is missing,
// unless harness.EnvRequire asks for a failure.
func skipOrFail(t *testing.T, err error) {
	t.Helper()
	if os.Getenv(harness.EnvRequire) == "1" {
		t.Fatalf("%v (%s=1)", err, harness.EnvRequire)
	}
	t.Skip(err)
}
