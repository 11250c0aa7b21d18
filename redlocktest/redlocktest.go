// Package redlocktest runs Redlock masters inside a test process, with no
// Redis binary: NewMasters starts N in-process servers that speak the Redis
// protocol (github.com/alicebob/miniredis/v2) and run redlock's real Lua
// scripts, with keys expiring in real time, and returns them with go-redis
// clients, all closed by t.Cleanup.
//
//	masters := redlocktest.NewMasters(t, 5)
//	client, err := redlock.New(redlocktest.Clients(masters),
//		&redlock.Options{MasterTimeout: time.Second})
//
// The masters share the test's CPUs. A client's first round on them dials,
// loads the scripts and compiles them (about 10ms on an idle machine), and
// a busy CI machine can stretch that past the default MasterTimeout (50ms):
// a test that is not about timeouts should give the masters a generous one.
//
// Each master can be killed, restarted empty, paused and slowed, to test
// how code behaves when masters fail. A conformance suite runs the same
// lock tests on these masters and on real redis-server masters.
//
// What differs from redis-server: INFO has neither run_id nor role, so
// redlock.Client.Verify reports the masters as unidentified (locks work:
// rounds count them, but cannot tell two addresses of one server apart);
// and a script runs on miniredis's Lua (gopher-lua), which the
// conformance suite checks against the real thing.
package redlocktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Master is one in-process master behind a proxy of its own, which the
// clients dial: the proxy is what Kill, Pause and Slow act on. Its methods
// are safe for concurrent use, and block until the change is in effect.
type Master struct {
	name string
	ln   net.Listener // the proxy's; open from NewMasters to the cleanup

	mu      sync.Mutex
	srv     *miniredis.Miniredis // nil while killed
	conns   map[net.Conn]struct{}
	paused  chan struct{} // closed on Resume; nil when not paused
	delay   time.Duration
	client  *redis.Client
	closing bool
	wg      sync.WaitGroup
}

// NewMasters starts n masters, named m0, m1, ..., and registers their
// cleanup with t. It fails the test if one cannot start.
func NewMasters(t testing.TB, n int) []*Master {
	t.Helper()
	ms := make([]*Master, n)
	for i := range ms {
		m, err := start(fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatalf("redlocktest: %v", err)
		}
		t.Cleanup(m.close)
		ms[i] = m
	}
	return ms
}

// Clients returns each master's go-redis client (see Master.Client).
func Clients(ms []*Master) []*redis.Client {
	out := make([]*redis.Client, len(ms))
	for i, m := range ms {
		out[i] = m.Client()
	}
	return out
}

func start(name string) (*Master, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &Master{name: name, ln: ln, conns: map[net.Conn]struct{}{}}
	if err := m.startServer(); err != nil {
		_ = ln.Close()
		return nil, err
	}
	m.client = redis.NewClient(&redis.Options{
		Addr:                  ln.Addr().String(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a failed command is reported, never replayed
		DialTimeout:           time.Second,
	})
	m.wg.Add(1)
	go m.accept()
	return m, nil
}

// startServer starts an empty miniredis with keys expiring in real time.
func (m *Master) startServer() error {
	srv := miniredis.NewMiniRedis()
	srv.ClockTTL(true)
	if err := srv.Start(); err != nil {
		return err
	}
	m.srv = srv
	return nil
}

// Name returns "m0", "m1", ...
func (m *Master) Name() string { return m.name }

// Addr returns the host:port clients dial. It stays the same across Kill
// and Restart.
func (m *Master) Addr() string { return m.ln.Addr().String() }

// Client returns a go-redis client for the master, with ContextTimeoutEnabled
// and no retries, as redlock wants; the cleanup closes it.
func (m *Master) Client() *redis.Client { return m.client }

// Miniredis returns the server currently behind the master, nil while it
// is killed: to read or set keys directly.
func (m *Master) Miniredis() *miniredis.Miniredis {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv
}

// Running reports whether the master is up (a paused master is).
func (m *Master) Running() bool { return m.Miniredis() != nil }

// Kill stops the master as SIGKILL would: its connections close, new ones
// are refused (closed at once), and its data is gone. Killing a killed
// master does nothing. The context is not used: it returns at once.
func (m *Master) Kill(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killLocked()
	return nil
}

func (m *Master) killLocked() {
	for c := range m.conns {
		_ = c.Close()
	}
	if m.paused != nil {
		close(m.paused)
		m.paused = nil
	}
	if m.srv != nil {
		m.srv.Close()
		m.srv = nil
	}
}

// Restart starts the master again with no data and no cached scripts, as a
// redis-server without persistence would come back, killing it first if
// it runs. After the test's cleanup it fails.
func (m *Master) Restart(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return fmt.Errorf("redlocktest: %s: restart after cleanup", m.name)
	}
	m.killLocked()
	return m.startServer()
}

// Pause freezes the master as SIGSTOP would: connections stay open, but
// nothing is answered, and new connections are not served, until Resume.
func (m *Master) Pause(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused == nil {
		m.paused = make(chan struct{})
	}
	return nil
}

// Resume unfreezes a paused master; what was sent meanwhile is answered.
func (m *Master) Resume(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused != nil {
		close(m.paused)
		m.paused = nil
	}
	return nil
}

// Slow delays every reply of the master by d from now on; 0 ends it.
func (m *Master) Slow(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delay = d
}

// gate blocks while the master is paused, and returns its delay and
// server address ("" when killed), or ok false when it is closing.
func (m *Master) gate() (delay time.Duration, addr string, ok bool) {
	for {
		m.mu.Lock()
		p, closing := m.paused, m.closing
		delay = m.delay
		if m.srv != nil {
			addr = m.srv.Addr()
		}
		m.mu.Unlock()
		if closing {
			return 0, "", false
		}
		if p == nil {
			return delay, addr, true
		}
		<-p
	}
}

func (m *Master) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: try again
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m.wg.Add(1)
		go m.serve(c)
	}
}

// serve relays one client connection to the server, through the gate.
func (m *Master) serve(c net.Conn) {
	defer m.wg.Done()
	_, addr, ok := m.gate()
	if !ok || addr == "" {
		_ = c.Close()
		return
	}
	s, err := net.Dial("tcp", addr)
	if err != nil {
		_ = c.Close()
		return
	}
	m.mu.Lock()
	if m.closing || m.srv == nil || m.srv.Addr() != addr {
		m.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	m.conns[c] = struct{}{}
	m.conns[s] = struct{}{}
	m.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { m.pipe(s, c, false); done <- struct{}{} }()
	go func() { m.pipe(c, s, true); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
	m.mu.Lock()
	delete(m.conns, c)
	delete(m.conns, s)
	m.mu.Unlock()
}

// pipe copies from src to dst, waiting at the gate before each write, and
// for replies (src is the server) the delay too.
func (m *Master) pipe(dst, src net.Conn, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay, _, ok := m.gate()
			if !ok {
				return
			}
			if reply && delay > 0 {
				time.Sleep(delay)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the connection was closed or reset
		}
	}
}

// close stops everything the master started: the client, the proxy and
// its connections, and the server.
func (m *Master) close() {
	_ = m.client.Close()
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	_ = m.Kill(context.Background())
	_ = m.ln.Close()
	m.wg.Wait()
}
