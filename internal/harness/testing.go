package harness

import (
	"errors"
	"os"
	"testing"
)

// EnvRequire, when "1", turns a missing redis-server (process backend) or
// an unreachable Docker or missing image (container backend) into a test
// failure instead of a skip (for CI, where silence would hide a broken
// setup).
const EnvRequire = "REDLOCK_REQUIRE_INTEGRATION"

// NewProcessCluster starts n redis-server processes for a test (see
// StartProcesses) and stops them with t.Cleanup, even when the test fails.
// A missing redis-server skips the test (see EnvRequire). Starting is bounded by
// t.Context and by 10s per master. When the test has failed, the cleanup logs the end of every master's log.
func NewProcessCluster(t testing.TB, n int, opts ProcessOptions) *Cluster {
	t.Helper()
	c, err := StartProcesses(t.Context(), n, opts)
	if errors.Is(err, ErrNoRedisServer) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("harness: %v (%s=1)", err, EnvRequire)
		}
		t.Skipf("harness: %v", err)
	}
	if err != nil {
		t.Fatalf("harness: starting %d masters: %v", n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Masters {
				if pm, ok := m.(*processMaster); ok {
					t.Logf("--- end of %s log (%s) ---\n%s", pm.name, pm.addr, ReadTail(pm.logPath(), 0, LogTailLines))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("harness: closing cluster: %v", err)
		}
	})
	return c
}

// NewRedisCluster starts a Redis Cluster for a test (see
// StartRedisCluster) and stops it with t.Cleanup, even when the test
// fails. A missing redis-server skips the test (see EnvRequire). When the
// test has failed, the cleanup logs the end of every node's log.
func NewRedisCluster(t testing.TB, opts RedisClusterOptions) *RedisCluster {
	t.Helper()
	rc, err := StartRedisCluster(t.Context(), opts)
	if errors.Is(err, ErrNoRedisServer) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("harness: %v (%s=1)", err, EnvRequire)
		}
		t.Skipf("harness: %v", err)
	}
	if err != nil {
		t.Fatalf("harness: starting a Redis Cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range rc.Servers.Masters {
				if pm, ok := m.(*processMaster); ok {
					t.Logf("--- end of %s log (%s) ---\n%s", pm.name, pm.addr, ReadTail(pm.logPath(), 0, LogTailLines))
				}
			}
		}
		if err := rc.Close(); err != nil {
			t.Errorf("harness: closing the Redis Cluster: %v", err)
		}
	})
	return rc
}
