package integration

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/go-redlock/redlock/internal/harness"
)

// Environment variables read by NewCluster and NewProcessCluster.
const (
	// EnvBackend selects the backend: "" or "process" for local processes,
	// "container" for Docker containers (image from REDLOCK_REDIS_IMAGE).
	EnvBackend = "REDLOCK_BACKEND"
	// EnvRequire, when "1", turns a missing redis-server (process backend) or
	// an unreachable Docker or missing image (container backend) into a test
	// failure instead of a skip (for CI, where silence would hide a broken
	// setup).
	EnvRequire = harness.EnvRequire
)

// Backend names accepted in REDLOCK_BACKEND.
const (
	BackendProcess   = "process"
	BackendContainer = "container"
)

// Backend returns the backend NewCluster uses: BackendProcess or
// BackendContainer (or the unknown value of REDLOCK_BACKEND, which makes
// NewCluster fail the test).
func Backend() string {
	if b := os.Getenv(EnvBackend); b != "" {
		return b
	}
	return BackendProcess
}

// NewCluster starts n masters for a test with the backend chosen by
// REDLOCK_BACKEND and stops them with t.Cleanup, even when the test fails.
// It blocks until every master answers PING. An unknown backend fails the
// test; a missing redis-server, Docker daemon or image skips it (see
// EnvRequire).
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	switch backend := Backend(); backend {
	case BackendProcess:
		return NewProcessCluster(t, n, ProcessOptions{})
	case BackendContainer:
		return NewContainerCluster(t, n, ContainerOptions{})
	default:
		t.Fatalf("integration: unknown %s %q (known: %q, %q)", EnvBackend, backend, BackendProcess, BackendContainer)
		return nil
	}
}

// NewContainerCluster is NewCluster with the container backend and the
// given options; testcontainers' messages go to t.Logf. Starting is bounded
// by t.Context and by 10s per master. The cleanup removes every container;
// when the test has failed, it first logs the end of every container's log.
func NewContainerCluster(t testing.TB, n int, opts ContainerOptions) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := StartContainers(t.Context(), n, opts)
	if errors.Is(err, ErrNoDocker) || errors.Is(err, ErrNoImage) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("integration: %v (%s=1)", err, EnvRequire)
		}
		t.Skipf("integration: container backend unavailable: %v", err)
	}
	if err != nil {
		t.Fatalf("integration: starting %d containers: %v", n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
			defer cancel()
			for _, m := range c.Masters {
				if cm, ok := m.(*containerMaster); ok {
					t.Logf("--- end of %s log (%s, container %.12s) ---\n%s", cm.name, cm.addr, cm.id, cm.logTail(ctx, harness.LogTailLines))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("integration: closing cluster: %v", err)
		}
	})
	return c
}

// NewProcessCluster is NewCluster with the process backend and the given
// options.
func NewProcessCluster(t testing.TB, n int, opts ProcessOptions) *Cluster {
	t.Helper()
	return harness.NewProcessCluster(t, n, opts)
}
