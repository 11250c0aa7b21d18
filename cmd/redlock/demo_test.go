package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // dials to a killed master are expected
	goleak.VerifyTestMain(m)
}

// TestDemo runs the demo with its fault injection on five harness masters
// and checks mutual exclusion held while the lock changed hands.
func TestDemo(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	cfg := defaultConfig()
	cfg.workers, cfg.duration, cfg.ttl = 3, 3*time.Second, 500*time.Millisecond
	cfg.cluster = cluster
	var out bytes.Buffer
	start := time.Now()
	sum, err := run(t.Context(), cfg, &out)
	t.Logf("demo output:\n%s", out.String())
	require.NoError(t, err)

	assert.Less(t, time.Since(start), 15*time.Second, "run must end soon after its duration")
	assert.Zero(t, sum.overlaps, "overlapping critical sections")
	assert.Zero(t, sum.lost, "lost updates")
	assert.Positive(t, sum.acquired)
	assert.Equal(t, sum.acquired, sum.done, "every acquisition ran one critical section")
	assert.True(t, sum.ok())
	assert.False(t, sum.interrupted)

	require.Len(t, sum.events, 4, "kill, restart, pause, resume")
	for i, verb := range []string{"kill m2", "restart m2", "pause m4", "resume m4"} {
		assert.Contains(t, sum.events[i], verb)
	}
	for _, m := range cluster.Masters {
		assert.True(t, m.Running(), "%s must run again after the demo", m.Name())
	}
	text := out.String()
	assert.Contains(t, text, "t=1s acquired=")
	assert.Contains(t, text, "EVENT ")
	assert.Contains(t, text, "--- summary ---")
	assert.Contains(t, text, "PASS")
}

// TestDemoInterrupted checks that cancelling the context stops a long run
// promptly and still yields a summary.
func TestDemoInterrupted(t *testing.T) {
	cfg := defaultConfig()
	cfg.workers, cfg.duration = 2, time.Minute
	cfg.cluster = harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	var out bytes.Buffer
	sum, err := run(ctx, cfg, &out)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.True(t, sum.interrupted)
	assert.Empty(t, sum.events, "no fault is due within the first second")
	assert.Zero(t, sum.overlaps)
	assert.Zero(t, sum.lost)
	assert.Contains(t, out.String(), "(interrupted)")
}

// TestDemoRefusesMastersThatAreNotIndependent: the demo verifies its
// masters first and stops if one is a replica (of another master here).
func TestDemoRefusesMastersThatAreNotIndependent(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	host, port, err := net.SplitHostPort(cluster.Masters[0].Addr())
	require.NoError(t, err)
	require.NoError(t, cluster.Admin(2).Do(t.Context(), "REPLICAOF", host, port).Err())
	cfg := defaultConfig()
	cfg.workers, cfg.duration = 2, 2*time.Second
	cfg.cluster = cluster
	var out bytes.Buffer
	_, err = run(t.Context(), cfg, &out)
	require.ErrorIs(t, err, redlock.ErrReplica)
	assert.ErrorContains(t, err, "master 2 ("+cluster.Masters[2].Addr()+")")
	assert.NotContains(t, out.String(), "--- summary ---")
}

func TestClassify(t *testing.T) {
	refused := redlock.MasterResult{Master: "m", Err: redlock.ErrHeldElsewhere}
	agreed := redlock.MasterResult{Master: "m", Agreed: true}
	noReply := redlock.MasterResult{Master: "m", Err: redlock.ErrNoReply}
	timeout := redlock.MasterResult{Master: "m", Err: redlock.ErrMasterTimeout}
	dial := redlock.MasterResult{Master: "m", Err: errors.New("dial tcp: connection refused")}
	quorumErr := func(expired bool, ms ...redlock.MasterResult) error {
		return &redlock.QuorumError{Op: "acquire", Key: "k", Quorum: 3, Expired: expired, Masters: ms}
	}
	for _, tc := range []struct {
		name string
		err  error
		want cause
	}{
		{"refused by a quorum", quorumErr(false, refused, refused, refused, noReply, noReply), causeHeld},
		{"refusals decide despite a dead master", quorumErr(false, refused, refused, refused, dial, noReply), causeHeld},
		{"dead masters decide", quorumErr(false, agreed, refused, refused, dial, timeout), causeNoQuorum},
		{"all timed out", quorumErr(false, timeout, timeout, timeout, timeout, timeout), causeNoQuorum},
		{"expired", quorumErr(true, agreed, agreed, agreed, refused, refused), causeExpired},
		{"context", errors.Join(quorumErr(false, refused, refused, refused, noReply, noReply), context.Canceled), causeCtx},
		{"wrapped", errors.Join(errors.New("outer"), quorumErr(false, timeout, timeout, timeout, refused, refused)), causeNoQuorum},
		{"not a quorum error", io.ErrUnexpectedEOF, causeOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, causeNames[tc.want], causeNames[classify(tc.err)])
		})
	}
}

// TestReleaseFailedCountsNoQuorumAsNotHeld: a release that too few
// masters answered is a failed release, as the legend says (not-held),
// not an unexplained error.
func TestReleaseFailedCountsNoQuorumAsNotHeld(t *testing.T) {
	s := newStats(1)
	s.releaseFailed(fmt.Errorf("%w: release", redlock.ErrNoQuorum))
	s.releaseFailed(fmt.Errorf("%w: release", redlock.ErrNotHeld))
	assert.Equal(t, int64(2), s.failed[causeNotHeld].Load())
	assert.Zero(t, s.failed[causeOther].Load())
}

func TestCLI(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{nil, 2, "usage"},
		{[]string{"serve"}, 2, "usage"},
		{[]string{"demo", "-workers", "0"}, 2, "-workers 0"},
		{[]string{"demo", "-ttl", "10ms"}, 2, "-ttl 10ms"},
		{[]string{"demo", "-ttl", "199ms"}, 2, "-ttl 199ms: must be at least 4 times the master timeout 50ms (200ms)"},
		{[]string{"demo", "extra"}, 2, "unexpected arguments"},
		// Nothing listens on port 1: the demo fails before any worker starts.
		{[]string{"demo", "-masters", "127.0.0.1:1,127.0.0.1:2"}, 1, "masters answer PING"},
	} {
		var stdout, stderr bytes.Buffer
		got := cli(tc.args, &stdout, &stderr)
		assert.Equal(t, tc.want, got, "%q", tc.args)
		assert.Contains(t, stderr.String(), tc.msg, "%q", tc.args)
		assert.False(t, strings.Contains(stdout.String(), "--- summary ---"), "%q", tc.args)
	}
}

// TestDemoWithoutRedisServer runs the demo as a user without redis-server
// would: PATH holds nothing, so it runs on in-process masters, says so
// first, injects the same faults and passes its own checks.
func TestDemoWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := cli([]string{"demo", "-workers", "3", "-duration", "3s", "-ttl", "500ms"}, &stdout, &stderr)
	t.Logf("demo output:\n%s%s", stdout.String(), stderr.String())
	require.Equal(t, 0, code, "the demo's own checks failed")

	text := stdout.String()
	first, _, _ := strings.Cut(text, "\n")
	assert.Equal(t, "redlock demo: redis-server is not in PATH: running on 5 in-process masters "+
		"(package redlocktest); `make deps` installs redis-server for real ones", first)
	assert.Contains(t, text, "running on 5 in-process masters: ")
	assert.NotContains(t, text, "not verified", "in-process masters need no Verify")
	for _, event := range []string{"EVENT t=", "kill m2 (", "restart m2", "pause m4 (", "resume m4"} {
		assert.Contains(t, text, event)
	}
	assert.Regexp(t, `(?m)^overlaps +0$`, text)
	assert.Regexp(t, `(?m)^lost updates +0 `, text)
	assert.Contains(t, text, "result           PASS")
	assert.Empty(t, stderr.String())
}
