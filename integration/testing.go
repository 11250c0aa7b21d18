package integration

import (
	"errors"
	"os"
	"testing"
)

// Environment variables read by NewCluster and NewProcessCluster.
const (
	// EnvBackend selects the backend: "" or "process" for local processes.
	EnvBackend = "REDLOCK_BACKEND"
	// EnvRequire, when "1", turns a missing redis-server into a test failure
	// instead of a skip (for CI, where silence would hide a broken setup).
	EnvRequire = "REDLOCK_REQUIRE_INTEGRATION"
)

// NewCluster starts n masters for a test with the backend chosen by
// REDLOCK_BACKEND and stops them with t.Cleanup, even when the test fails.
// It blocks until every master answers PING. An unknown backend fails the
// test; a missing redis-server skips it (see EnvRequire).
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	switch backend := os.Getenv(EnvBackend); backend {
	case "", "process":
		return NewProcessCluster(t, n, ProcessOptions{})
	default:
		t.Fatalf("integration: unknown %s %q (known: \"process\")", EnvBackend, backend)
		return nil
	}
}

// NewProcessCluster is NewCluster with the process backend and the given
// options. Starting is bounded by t.Context and by 10s per master. When the
// test has failed, the cleanup logs the end of every master's log.
func NewProcessCluster(t testing.TB, n int, opts ProcessOptions) *Cluster {
	t.Helper()
	c, err := StartProcesses(t.Context(), n, opts)
	if errors.Is(err, ErrNoRedisServer) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("integration: %v (%s=1)", err, EnvRequire)
		}
		t.Skipf("integration: %v", err)
	}
	if err != nil {
		t.Fatalf("integration: starting %d masters: %v", n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Masters {
				if pm, ok := m.(*processMaster); ok {
					t.Logf("--- end of %s log (%s) ---\n%s", pm.name, pm.addr, readTail(pm.logPath(), 0, logTailLines))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("integration: closing cluster: %v", err)
		}
	})
	return c
}
