package integration_test

// A fresh client's first round must be decided like any later one: the
// setup before a master's first call (dialing, loading the functions'
// library, identifying the server) must not spend MasterTimeout.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// slowSetupConn delays every write of a command that only setup sends
// (FUNCTION, INFO) by delay, holding the connection meanwhile, as a slow
// network or a busy machine would; the lock's own calls (EVALSHA, EVAL,
// FCALL) go at once.
type slowSetupConn struct {
	net.Conn
	delay time.Duration
}

var setupCommands = [][]byte{[]byte("$8\r\nfunction\r\n"), []byte("$4\r\ninfo\r\n")}

func (c *slowSetupConn) Write(b []byte) (int, error) {
	for _, cmd := range setupCommands {
		if bytes.Contains(bytes.ToLower(b), cmd) {
			time.Sleep(c.delay)
			break
		}
	}
	return c.Conn.Write(b)
}

// slowSetupClient returns a go-redis client for addr whose dials and setup
// commands each take delay more, closed when the test ends.
func slowSetupClient(t *testing.T, addr string, delay time.Duration) *redis.Client {
	t.Helper()
	o := integration.MasterOptions(addr)
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second, 10*time.Second
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowSetupConn{Conn: conn, delay: delay}, nil
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFirstAcquireSetupOutsideTimeout: each dial, library load and INFO
// takes 0.4*MasterTimeout, so a fresh client's setup (a dial and a load,
// then INFO on both pools, the second dialed, and asked again for that
// dial: seven such steps, 2.8*MasterTimeout) far exceeds MasterTimeout,
// while the lock call itself is fast. The first acquire must still
// succeed, with and without Verify first, and its round must be decided
// within MasterTimeout. Bounds: MasterTimeout 500ms; the setup, 1.4s by
// design, has 4*MasterTimeout (2s), a margin of 600ms; the round itself
// takes a few milliseconds, well under 500ms even on a busy machine.
func TestFirstAcquireSetupOutsideTimeout(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	const masterTimeout = 500 * time.Millisecond
	const delay = masterTimeout * 4 / 10
	for _, verify := range []bool{false, true} {
		for k := range 2 {
			t.Run(fmt.Sprintf("verify=%v/%d", verify, k), func(t *testing.T) {
				masters := make([]*redis.Client, len(cl.Masters))
				for i, addr := range cl.Addrs() {
					masters[i] = slowSetupClient(t, addr, delay)
				}
				var rounds roundLog
				c, err := redlock.New(masters, &redlock.Options{MasterTimeout: masterTimeout, Observer: &rounds})
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				ctx := t.Context()
				if verify {
					require.NoError(t, c.Verify(ctx))
				}
				l, err := c.Acquire(ctx, fmt.Sprintf("first-%v-%d", verify, k), 30*time.Second)
				require.NoError(t, err, "the first acquire of a fresh client")
				require.NoError(t, l.Release(ctx))
				first := rounds.first("acquire")
				require.NotNil(t, first)
				require.Less(t, first.Elapsed, masterTimeout, "the first round's decision")
			})
		}
	}
}

// roundLog is an Observer that keeps the rounds.
type roundLog struct {
	mu     sync.Mutex
	rounds []redlock.Round
}

func (o *roundLog) ObserveRound(_ context.Context, r redlock.Round) {
	o.mu.Lock()
	o.rounds = append(o.rounds, r)
	o.mu.Unlock()
}

func (o *roundLog) ObserveEvent(context.Context, redlock.Event) {}

// first returns the first round of op, nil if none.
func (o *roundLog) first(op string) *redlock.Round {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.rounds {
		if o.rounds[i].Op == op {
			return &o.rounds[i]
		}
	}
	return nil
}
