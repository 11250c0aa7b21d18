// Package redlocktest runs Redlock masters inside a test process, with no
// Redis binary: NewMasters starts N in-process servers that speak the Redis
// protocol (github.com/alicebob/miniredis/v2) and run redlock's real Lua
// scripts, with keys expiring in real time, and returns them with go-redis
// clients, all closed by t.Cleanup. StartMasters starts them outside a
// test, for a program (the redlock demo) that closes them itself.
//
//	masters := redlocktest.NewMasters(t, 5)
//	client, err := redlock.New(redlocktest.Clients(masters),
//		&redlock.Options{MasterTimeout: 500 * time.Millisecond})
//
// The masters share the test's CPUs. A client's first round on them dials,
// loads the scripts and compiles them (about 10ms on an idle machine), and
// a busy CI machine can stretch that past the default MasterTimeout (50ms):
// a test that is not about timeouts should give the masters a generous one,
// at most a quarter of the TTLs of its fenced locks.
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
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/harness"
)

// Master is one in-process master behind a proxy of its own, which the
// clients dial: the proxy is what Kill, Pause and Slow act on. Its methods
// are safe for concurrent use, and block until the change is in effect.
type Master struct {
	name  string
	addr  string             // the proxy's, the same across Kill and Restart
	lease *harness.PortLease // keeps addr's port ours while killed, until Close

	mu      sync.Mutex
	ln      net.Listener         // the proxy's; nil while killed
	gen     uint64               // counts kills: a connection accepted before one is not served
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
		t.Cleanup(m.Close)
		ms[i] = m
	}
	return ms
}

// StartMasters starts n masters, named m0, m1, ..., outside a test: a
// program such as a demo, which stops each one with Close. It returns an
// error if one cannot start, having stopped those already started.
func StartMasters(n int) ([]*Master, error) {
	ms := make([]*Master, 0, n)
	for i := range n {
		m, err := start(fmt.Sprintf("m%d", i))
		if err != nil {
			for _, m := range ms {
				m.Close()
			}
			return nil, fmt.Errorf("redlocktest: %w", err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// StartMastersAt starts one master listening on each of addrs, named m0,
// m1, ..., for a program that serves them where its users expect them.
// Close stops each one. It returns an error if an address is taken,
// having stopped those already started.
func StartMastersAt(addrs []string) ([]*Master, error) {
	ms := make([]*Master, 0, len(addrs))
	for i, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			var m *Master
			if m, err = startOn(fmt.Sprintf("m%d", i), ln, nil); err == nil {
				ms = append(ms, m)
				continue
			}
		}
		for _, m := range ms {
			m.Close()
		}
		return nil, fmt.Errorf("redlocktest: %w", err)
	}
	return ms, nil
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
	ln, lease, err := listenLeased()
	if err != nil {
		return nil, err
	}
	return startOn(name, ln, lease)
}

// startOn starts a master whose proxy accepts on ln, keeping lease (nil
// for a port given by the caller) until Close. It closes ln and lets the
// lease go if the master cannot start.
func startOn(name string, ln net.Listener, lease *harness.PortLease) (*Master, error) {
	m := &Master{name: name, addr: ln.Addr().String(), lease: lease, conns: map[net.Conn]struct{}{}}
	if err := m.startServer(); err != nil {
		err = errors.Join(err, ln.Close())
		if lease != nil {
			err = errors.Join(err, lease.Release())
		}
		return nil, err
	}
	m.client = redis.NewClient(&redis.Options{
		Addr:                  m.addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a failed command is reported, never replayed
		DialTimeout:           time.Second,
	})
	m.serveOn(ln)
	return m, nil
}

// listenLeased listens on a port of 127.0.0.1 leased from the harness:
// below the kernel's range of ephemeral ports, and reserved across the
// processes of this machine. A killed master closes its listener, and
// Restart opens the port again. Meanwhile neither an outgoing connection
// nor another test binary's master can take it. A port taken by another
// program between the lease and the listen is a clash: try another.
func listenLeased() (net.Listener, *harness.PortLease, error) {
	var err error
	for range leaseAttempts {
		var lease *harness.PortLease
		if lease, err = harness.LeasePort(); err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lease.Port()))); err == nil {
			return ln, lease, nil
		}
		err = errors.Join(err, lease.Release())
	}
	return nil, nil, err
}

// leaseAttempts is how many leased ports listenLeased tries.
const leaseAttempts = 5

// serveOn makes ln the proxy's listener and accepts on it until it closes.
// m.mu must be held, or m not yet shared.
func (m *Master) serveOn(ln net.Listener) {
	m.ln = ln
	m.wg.Add(1)
	go m.accept(ln, m.gen)
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
func (m *Master) Addr() string { return m.addr }

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

// Kill stops the master as SIGKILL would: its connections close, dials
// are refused (the proxy stops listening: ECONNREFUSED), and its data is
// gone. Killing a killed master does nothing. The context is not used: it
// returns at once.
func (m *Master) Kill(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killLocked()
	return nil
}

func (m *Master) killLocked() {
	if m.ln != nil {
		_ = m.ln.Close() // dials are refused from here on
		m.ln = nil
		m.gen++
	}
	for c := range m.conns {
		_ = c.Close()
	}
	if m.paused != nil {
		close(m.paused)
		m.paused = nil
	}
	if m.srv != nil {
		// miniredis answers INFO without its lock, and its Close clears
		// the server under it: stop the connections, and wait for them,
		// first.
		m.srv.Server().Close()
		m.srv.Close()
		m.srv = nil
	}
}

// Restart starts the master again with no data and no cached scripts, as a
// redis-server without persistence would come back, killing it first if
// it runs. It listens on Addr again: where another process took the port
// meanwhile, it retries for up to 5s, bounded by ctx too, and then fails
// with the master still killed. After the test's cleanup it fails.
func (m *Master) Restart(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return fmt.Errorf("redlocktest: %s: restart after cleanup", m.name)
	}
	m.killLocked()
	ln, err := relisten(ctx, m.addr)
	if err != nil {
		return fmt.Errorf("redlocktest: %s: restart: %w", m.name, err)
	}
	if err := m.startServer(); err != nil {
		_ = ln.Close()
		return fmt.Errorf("redlocktest: %s: restart: %w", m.name, err)
	}
	m.serveOn(ln)
	return nil
}

// relisten listens on addr again, retrying every rebindWait for up to
// rebindTimeout while the port is taken, and no longer than ctx.
func relisten(ctx context.Context, addr string) (net.Listener, error) {
	deadline := time.Now().Add(rebindTimeout)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !time.Now().Before(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(rebindWait):
		}
	}
}

// How long, and how often, Restart tries to listen on a taken port again.
const (
	rebindTimeout = 5 * time.Second
	rebindWait    = 20 * time.Millisecond
)

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

// accept serves the connections of ln, the listener of generation gen,
// until Kill or the cleanup closes it.
func (m *Master) accept(ln net.Listener, gen uint64) {
	defer m.wg.Done()
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: try again
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m.wg.Add(1)
		go m.serve(c, gen)
	}
}

// serve relays one client connection, accepted in generation gen, to the
// server, through the gate. A kill since then closes it, as SIGKILL would.
func (m *Master) serve(c net.Conn, gen uint64) {
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
	if m.closing || m.gen != gen || m.srv == nil || m.srv.Addr() != addr {
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

// Close stops the master for good: its client, the proxy and its
// connections, and the server. Restart fails after it. NewMasters's
// cleanup calls it; a master from StartMasters needs a call. It blocks
// until every connection's goroutine is done. Calling it again does
// nothing more.
func (m *Master) Close() {
	_ = m.client.Close()
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	_ = m.Kill(context.Background()) // closes the listener too
	m.wg.Wait()
	if m.lease != nil {
		_ = m.lease.Release() // the port is free for others once nobody listens
	}
}
