package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		s    string
		b    bool
	}{
		{[]string{"-s", "v", "k"}, []string{"k"}, "v", false},
		{[]string{"k", "-s", "v"}, []string{"k"}, "v", false},
		{[]string{"a", "-b", "b", "-s=v", "c"}, []string{"a", "b", "c"}, "v", true},
		{[]string{"k", "--", "-s", "v"}, []string{"k", "-s", "v"}, "", false},
		{[]string{"--", "-k"}, []string{"-k"}, "", false},
		{[]string{"-b", "--", "-k"}, []string{"-k"}, "", true},
		{[]string{"-s", "--", "k", "-b"}, []string{"k"}, "--", true}, // "--" as a value
		{[]string{"k", "-"}, []string{"k", "-"}, "", false},
		{nil, nil, "", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		s := fs.String("s", "", "")
		b := fs.Bool("b", false, "")
		pos, err := parseArgs(fs, tc.args)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.pos, pos, "%q", tc.args)
		assert.Equal(t, tc.s, *s, "%q", tc.args)
		assert.Equal(t, tc.b, *b, "%q", tc.args)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	_, err := parseArgs(fs, []string{"k", "-nope"})
	assert.ErrorContains(t, err, "-nope", "an unknown flag after KEY is an error too")
}

// TestFlagsAfterKey: every command that takes a KEY or NAME honours the
// flags after it, as `redlock release KEY -force -masters ...`.
func TestFlagsAfterKey(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	masters := strings.Join(cluster.Addrs(), ",")
	c := newLockClient(t, cluster)
	l, err := c.AcquireAs(t.Context(), "job", "alice", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { w := mustView(t, cluster, "job").Writer; return w != nil && w.Masters == 3 },
		5*time.Second, 10*time.Millisecond, "on every master")

	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, stderr := run("inspect", "job", "-masters", masters, "-json")
	require.Equal(t, 0, code, stderr)
	var v LockView
	require.NoError(t, json.Unmarshal([]byte(out), &v), "-json after KEY: %s", out)
	require.NotNil(t, v.Writer)
	assert.Equal(t, "alice", v.Writer.Owner)

	code, out, stderr = run("watch", "job", "-count", "1", "-masters", masters)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "quorum: held by alice")

	code, out, stderr = run("release", "job", "-masters", masters, "-force")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, `released "job" on 3 of 3 masters`)
	assert.Nil(t, mustView(t, cluster, "job").Writer)

	code, out, stderr = run("leader", "election", "-masters", masters, "-json")
	assert.Equal(t, exitNoLeader, code, stderr)
	assert.Contains(t, out, `"vacant":true`)

	code, _, stderr = run("inspect", "job", "extra", "-masters", masters)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "want one KEY, got 2 arguments")
	assert.ErrorIs(t, l.Release(t.Context()), redlock.ErrNotHeld, "released by force")
}

func TestHelpAndUnknownCommand(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"-help"}, {"--help"}, {"help"},
		{"demo", "-h"}, {"inspect", "-h"}, {"inspect", "job", "-h"}, {"watch", "-h"},
		{"release", "-h"}, {"verify", "-h"}, {"run", "-h"}, {"leader", "-h"},
		{"observe", "name", "--help"},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 0, cli(args, &stdout, &stderr), "%q", args)
		assert.Contains(t, stderr.String(), "usage: redlock", "%q", args)
	}

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, cli([]string{"serve", "-masters", "x"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `redlock: unknown command "serve"; the commands are demo, inspect, watch, release, verify, run, leader, observe`)
	assert.Empty(t, stdout.String())
}

// TestVerifyMasterDown: a master that does not answer is one problem,
// reported once, and the count is in the singular.
func TestVerifyMasterDown(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	require.NoError(t, cluster.Masters[1].Kill(t.Context()))
	code, out, stderr := ops(t, cluster, "verify", "-timeout", "500ms")
	assert.Equal(t, 1, code)
	t.Logf("stdout:\n%s", out)
	assert.Equal(t, 1, strings.Count(out, "problem: "), "one master down, one problem")
	assert.Contains(t, out, "problem: redlock: master 1 ("+cluster.Masters[1].Addr()+")")
	assert.Contains(t, out, cluster.Masters[1].Addr()+"  error: ", "the clock table still shows it")
	assert.Equal(t, "redlock verify: 1 problem\n", stderr)

	code, out, _ = ops(t, cluster, "verify", "-json", "-timeout", "500ms")
	assert.Equal(t, 1, code)
	var r VerifyResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Len(t, r.Problems, 1)
	assert.NotEmpty(t, r.Clocks[1].Error)
}
