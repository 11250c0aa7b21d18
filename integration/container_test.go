package integration

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// containerOptions returns options for the container tests: the image from
// REDLOCK_REDIS_IMAGE (or the default), testcontainers' messages to t.Logf.
func containerOptions(t *testing.T) ContainerOptions {
	return ContainerOptions{Logf: t.Logf}
}

// skipWithoutDocker skips (or, with REDLOCK_REQUIRE_INTEGRATION=1, fails)
// when err says the container backend is unavailable.
func skipWithoutDocker(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNoDocker) {
		if Backend() == BackendContainer && os.Getenv(EnvRequire) == "1" {
			t.Fatalf("integration: %v", err)
		}
		t.Skipf("integration: %v", err)
	}
}

func TestContainerMissingImage(t *testing.T) {
	t.Setenv(EnvImage, "redlock-no-such-image:missing")
	_, err := StartContainers(testCtx(t), 2, ContainerOptions{})
	skipWithoutDocker(t, err)
	require.ErrorIs(t, err, ErrNoImage)
	assert.Contains(t, err.Error(), "redlock-no-such-image:missing", "the error must name the image")
	assert.Contains(t, err.Error(), "make image", "the error must say how to build one")
}

func TestContainerStartFailureQuotesLog(t *testing.T) {
	if Backend() != BackendContainer {
		t.Skipf("needs the container image; %s=%s", EnvBackend, Backend())
	}
	opts := containerOptions(t)
	opts.Args = []string{"--no-such-directive", "x"}
	c, err := StartContainers(testCtx(t), 2, opts)
	skipWithoutDocker(t, err)
	if c != nil {
		require.NoError(t, c.Close())
	}
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoImage)
	assert.Contains(t, err.Error(), "no-such-directive", "the error must quote the log")
}

func TestContainerCloseRemovesEverything(t *testing.T) {
	if Backend() != BackendContainer {
		t.Skipf("container-specific; %s=%s", EnvBackend, Backend())
	}
	ctx := testCtx(t)
	c := NewContainerCluster(t, 3, containerOptions(t))
	require.NoError(t, c.Masters[1].Pause(ctx), "a paused master must be removed too")
	require.NoError(t, c.Masters[2].Kill(ctx))
	docker := c.Masters[0].(*containerMaster).docker
	ids := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		cm := m.(*containerMaster)
		ids[i] = cm.id
		res, err := docker.ContainerInspect(ctx, cm.id, client.ContainerInspectOptions{})
		require.NoError(t, err)
		assert.Equal(t, m.Name(), res.Container.Config.Labels[ContainerLabel])
		for _, b := range res.Container.HostConfig.PortBindings {
			for _, pb := range b {
				assert.Equal(t, "127.0.0.1", pb.HostIP.String(), "ports must be published on loopback only")
			}
		}
	}
	addrs := c.Addrs()

	require.NoError(t, c.Close())
	check, err := dockerClient(ctx)
	require.NoError(t, err)
	defer check.Close()
	for i, id := range ids {
		_, err := check.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		assert.True(t, cerrdefs.IsNotFound(err), "container %.12s still exists (err %v)", id, err)
		assert.False(t, c.Masters[i].Running())
		requireRefused(t, addrs[i])
	}
	assert.NoError(t, c.Close(), "Close must be idempotent")
	assert.ErrorIs(t, c.Clients()[0].Ping(ctx).Err(), redis.ErrClosed)
}

func TestContainerRestartKeepsAddrAndEmptiesData(t *testing.T) {
	if Backend() != BackendContainer {
		t.Skipf("container-specific; %s=%s", EnvBackend, Backend())
	}
	ctx := testCtx(t)
	c := NewContainerCluster(t, 1, containerOptions(t))
	m := c.Masters[0].(*containerMaster)
	require.NoError(t, c.Admin(0).Set(ctx, "k", "v", 0).Err())
	id := m.id

	// Paused, then killed: the kill must still work and the data go.
	require.NoError(t, m.Pause(ctx))
	require.NoError(t, m.Kill(ctx))
	require.NoError(t, m.Restart(ctx))
	assert.Equal(t, id, m.id, "Restart reuses the container")
	n, err := c.Admin(0).DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	// Keys written to disk by hand (SAVE) do not survive either: /data is a
	// tmpfs that is new at every start.
	require.NoError(t, c.Admin(0).Set(ctx, "k", "v", 0).Err())
	require.NoError(t, c.Admin(0).Save(ctx).Err())
	require.NoError(t, m.Restart(ctx))
	n, err = c.Admin(0).DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "an RDB file written before the restart must be gone")
}

// TestContainerNetworks runs the master life cycle in both network modes,
// whatever REDLOCK_CONTAINER_NETWORK says.
func TestContainerNetworks(t *testing.T) {
	if Backend() != BackendContainer {
		t.Skipf("container-specific; %s=%s", EnvBackend, Backend())
	}
	for _, mode := range []string{NetworkPublished, NetworkHost} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			opts := containerOptions(t)
			opts.Network = mode
			c := NewContainerCluster(t, 1, opts)
			m := c.Masters[0]
			addr := m.Addr()
			require.NoError(t, c.Admin(0).Set(ctx, "k", "v", 0).Err())

			require.NoError(t, m.Kill(ctx))
			requireRefused(t, addr)
			squatter, err := net.Listen("tcp", addr)
			require.NoError(t, err)
			err = m.Restart(ctx)
			squatter.Close()
			require.ErrorIs(t, err, harness.ErrAddrInUse, "a taken port must be reported as such")
			assert.False(t, m.Running())

			require.NoError(t, m.Restart(ctx))
			assert.Equal(t, addr, m.Addr())
			n, err := c.Admin(0).DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "a restarted master must be empty")
		})
	}
}

func TestContainerUnknownNetwork(t *testing.T) {
	_, err := StartContainers(testCtx(t), 1, ContainerOptions{Network: "overlay"})
	require.ErrorContains(t, err, `unknown container network "overlay"`)
}

// testCtx bounds a whole test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
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
