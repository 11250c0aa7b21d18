package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LeasePort picks a port no outgoing connection can take: below the
// kernel's ephemeral range, where the kernel tells it.
func TestLeasePortIsNotEphemeral(t *testing.T) {
	low := ephemeralLow()
	if low <= minFixedPort {
		t.Skipf("no ephemeral range below which to pick (lowest ephemeral port %d)", low)
	}
	for range 20 {
		l, err := LeasePort()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, l.Port(), minFixedPort)
		assert.Less(t, l.Port(), low, "a port of the ephemeral range")
		require.NoError(t, l.Release())
	}
}

// only offers port to leasePort, every time.
func only(port int) func() (int, error) {
	return func() (int, error) { return port, nil }
}

// portOf returns the port of master i of a process cluster.
func portOf(t *testing.T, c *Cluster, i int) int {
	return c.Masters[i].(*processMaster).lease.Port()
}

// A killed master's port is free on the host, yet no other harness user
// gets it: neither in this process nor in another. Its Restart gets it
// back. Without the lease, leasePort would hand the dead master's port
// out, as nothing listens there.
func TestKilledMastersPortStaysLeased(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	m := c.Masters[0]
	port := portOf(t, c, 0)
	require.Equal(t, strconv.Itoa(port), m.Addr()[strings.LastIndexByte(m.Addr(), ':')+1:])
	require.NoError(t, m.Kill(ctx))
	requireRefused(t, m.Addr())

	// Another user offered only this port finds nothing to lease.
	_, err := leasePort(only(port))
	require.ErrorIs(t, err, ErrNoFreePort)
	require.ErrorIs(t, err, errLeased)

	// A chooser that offers it first moves on to the next port.
	offers := []int{port, port, 0}
	next := 0
	l, err := leasePort(func() (int, error) {
		p := offers[next]
		next++
		if p == 0 {
			return kernelPort()
		}
		return p, nil
	})
	require.NoError(t, err)
	assert.NotEqual(t, port, l.Port())
	assert.Equal(t, len(offers), next, "the leased port was offered twice")
	require.NoError(t, l.Release())

	// So does another process: flock reserves across processes too.
	out, err := leaseInChild(t, port)
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "refused: ")
	assert.Contains(t, out, errLeased.Error())

	require.NoError(t, m.Restart(ctx))
	require.NoError(t, c.Admin(0).Ping(ctx).Err())
	assert.Equal(t, port, portOf(t, c, 0), "the restart took its own port")

	// Close gives the port up, and removes its lock file.
	require.NoError(t, c.Close())
	assert.NoFileExists(t, filepath.Join(os.TempDir(), "redlock-ports", strconv.Itoa(port)))
	l, err = leasePort(only(port))
	require.NoError(t, err, "the port of a closed cluster must be free to lease")
	assert.Equal(t, port, l.Port())
	require.NoError(t, l.Release())
}

// leaseEnv names the port TestLeaseInChild tries to lease.
const leaseEnv = "REDLOCK_HARNESS_LEASE_PORT"

// leaseInChild runs TestLeaseInChild in a new process of this test binary,
// which tries to lease port, and returns its output.
func leaseInChild(t *testing.T, port int) (string, error) {
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^TestLeaseInChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", leaseEnv, port))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLeaseInChild is leaseInChild's other half: it prints whether it
// could lease the port. It is skipped where it is not called for.
func TestLeaseInChild(t *testing.T) {
	port, err := strconv.Atoi(os.Getenv(leaseEnv))
	if err != nil {
		t.Skip("runs only in the child of TestKilledMastersPortStaysLeased")
	}
	l, err := leasePort(only(port))
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	t.Logf("leased %d", l.Port())
	require.NoError(t, l.Release())
}

// A contender that opened the lock file before a release removed it
// gets no lease: its flock is on a file no other user sees. Without that
// check two users would hold one port.
func TestLeaseOnRemovedFileIsRefused(t *testing.T) {
	port, err := kernelPort()
	require.NoError(t, err)
	dir := filepath.Join(os.TempDir(), "redlock-ports")
	require.NoError(t, mkdirShared(dir))
	first, err := lockPort(dir, port)
	require.NoError(t, err)
	stale, err := os.Open(filepath.Join(dir, strconv.Itoa(port)))
	require.NoError(t, err)
	require.NoError(t, first.Release())
	second, err := lockPort(dir, port)
	require.NoError(t, err, "the file is gone: the next user creates it anew")
	t.Cleanup(func() { _ = second.Release() })

	_, err = lockOpened(stale, port) // closes stale
	require.ErrorIs(t, err, errLeased, "two users hold one port")
	assert.NoError(t, second.Release())
	assert.NoError(t, second.Release(), "Release must be idempotent")
}
