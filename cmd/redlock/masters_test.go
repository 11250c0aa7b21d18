package main

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// redlock masters serves masters a Client can lock on, at the ports it
// says, until interrupted; then they are gone.
func TestMastersServesUntilInterrupted(t *testing.T) {
	backends := map[string][]string{"in-process": {"-in-process"}}
	if _, err := exec.LookPath("redis-server"); err == nil {
		backends["redis-server"] = nil
	}
	for name, extra := range backends {
		t.Run(name, func(t *testing.T) {
			port := twoFreePorts(t)
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			var out, errOut syncBuffer
			done := make(chan int, 1)
			args := append([]string{"masters", "-n", "2", "-port", strconv.Itoa(port)}, extra...)
			go func() { done <- mastersCLI(ctx, args, &out, &errOut) }()
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "interrupt") }, 20*time.Second, 10*time.Millisecond, errOut.String())
			assert.Contains(t, out.String(), "2 "+name+" masters at ")

			addrs := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1))}
			assert.Contains(t, out.String(), strings.Join(addrs, ","))
			masters := make([]*redis.Client, len(addrs))
			for i, a := range addrs {
				masters[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
			}
			c, err := redlock.New(masters, nil)
			require.NoError(t, err)
			l, err := c.Acquire(t.Context(), "job", 5*time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Release(t.Context()))
			require.NoError(t, c.Close())
			for _, m := range masters {
				_ = m.Close()
			}

			stop()
			select {
			case code := <-done:
				assert.Equal(t, 0, code, errOut.String())
			case <-time.After(20 * time.Second):
				t.Fatal("redlock masters did not stop within 20s of the interrupt")
			}
			for _, a := range addrs {
				c, err := net.DialTimeout("tcp", a, time.Second)
				if err == nil {
					_ = c.Close()
				}
				assert.Error(t, err, "%s still serves", a)
			}
		})
	}
}

// A taken port is an error that names it, and nothing is left serving.
func TestMastersPortTaken(t *testing.T) {
	port := twoFreePorts(t)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
	require.NoError(t, err)
	defer ln.Close()
	var out, errOut syncBuffer
	code := mastersCLI(t.Context(), []string{"masters", "-n", "2", "-port", strconv.Itoa(port), "-in-process"}, &out, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), strconv.Itoa(port+1))
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err == nil {
		_ = c.Close()
	}
	assert.Error(t, err, "the first master still serves")

	assert.Equal(t, 2, mastersCLI(t.Context(), []string{"masters", "-n", "0"}, &out, &errOut))
}

// twoFreePorts returns p such that p and p+1 were free a moment ago.
func twoFreePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := harness.LeasePort()
		require.NoError(t, err)
		p := l.Port()
		require.NoError(t, l.Release())
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1))); err == nil {
			_ = ln.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports in 50 tries")
	return 0
}
