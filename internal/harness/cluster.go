// Package harness starts and controls independent Redis masters as local
// redis-server processes, for the tests, examples and demo of redlock. It
// needs only the standard library and go-redis, so that the root module's
// own tests can use it; package integration (a nested module) adds the
// container backend and the fault tools.
//
// The core (Cluster, Master, StartProcesses) does not depend on package
// testing; NewProcessCluster wraps it for tests.
package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Master is one Redis master under test control. Implementations are safe
// for concurrent use.
type Master interface {
	// Name is a short label such as "m0".
	Name() string
	// Addr is the host:port clients dial. It is stable across Restart.
	Addr() string
	// Kill stops the master hard (like SIGKILL); its data is lost. It blocks
	// until the master is gone, bounded by ctx. A paused master dies too;
	// killing a master that is not running is a no-op.
	Kill(ctx context.Context) error
	// Restart starts the master again on the same Addr with empty data,
	// killing it first if it is running. It blocks until the master answers
	// PING, bounded by ctx.
	Restart(ctx context.Context) error
	// Pause freezes the master (like SIGSTOP): connections stay open but
	// nothing is answered. It blocks until the master is frozen, bounded by ctx.
	Pause(ctx context.Context) error
	// Resume unfreezes a paused master (like SIGCONT), bounded by ctx.
	Resume(ctx context.Context) error
	// Running reports whether the master was started and not killed since.
	// A paused master is still running.
	Running() bool
}

// ErrNotRunning is returned (wrapped) by Pause and Resume on a master that
// is not running.
var ErrNotRunning = errors.New("master is not running")

// Timeouts. Those of Clients are small, so that a dead or frozen master
// costs a Redlock attempt little time.
const (
	clientTimeout   = 200 * time.Millisecond
	keyCountTimeout = 200 * time.Millisecond
	KillTimeout     = 10 * time.Second
)

// Cluster is a set of independent masters (no replication between them)
// plus cached clients for them. Its methods are safe for concurrent use.
type Cluster struct {
	// Masters are the masters in index order; do not modify the slice.
	Masters []Master

	cleanup []func() error // backend resources, released by Close after the kills

	mu       sync.Mutex
	clients  []*redis.Client
	admins   map[int]*redis.Client
	closed   bool
	closeErr error
}

// New wraps masters; cleanup runs in Close after every master is killed.
func New(masters []Master, cleanup ...func() error) *Cluster {
	return &Cluster{Masters: masters, cleanup: cleanup}
}

// Addrs returns the address of every master, in index order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Clients returns one go-redis client per master, configured for Redlock:
// context deadlines are honoured, dial/read/write timeouts are 200ms, and
// neither commands nor dials are retried. The same slice is returned on
// every call; do not close the clients, Close does. Clients requested after
// Close are already closed.
func (c *Cluster) Clients() []*redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clients == nil {
		c.clients = make([]*redis.Client, len(c.Masters))
		for i, m := range c.Masters {
			c.clients[i] = c.newClientLocked(MasterOptions(m.Addr()))
		}
	}
	return c.clients
}

// CommandCalls returns how many times master i ran each command so far,
// from INFO commandstats. Commands that scripts run count there too.
func (c *Cluster) CommandCalls(ctx context.Context, i int) (map[string]int, error) {
	info, err := c.Admin(i).Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		end := strings.IndexByte(rest, ',')
		if end < 0 {
			return nil, fmt.Errorf("harness: INFO commandstats line %q", line)
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil {
			return nil, fmt.Errorf("harness: INFO commandstats line %q: %w", line, err)
		}
		calls[name] = n
	}
	return calls, nil
}

// Admin returns a client to master i for inspecting data in tests. It has
// its own connection pool, default timeouts and no retries, and it honours
// context deadlines. Close closes it.
func (c *Cluster) Admin(i int) *redis.Client {
	m := c.Masters[i] // panics on a bad index, like a slice would
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.admins[i]; ok {
		return cl
	}
	if c.admins == nil {
		c.admins = make(map[int]*redis.Client)
	}
	cl := c.newClientLocked(withShared(&redis.Options{Addr: m.Addr()}))
	c.admins[i] = cl
	return cl
}

// MasterOptions returns go-redis options for a Redlock master at addr:
// context deadlines honoured, 200ms dial/read/write timeouts, no retries of
// commands or dials, no CLIENT SETINFO or maintenance notifications. The
// demo and the benchmarks use them too.
func MasterOptions(addr string) *redis.Options {
	return withShared(&redis.Options{
		Addr:         addr,
		DialTimeout:  clientTimeout,
		ReadTimeout:  clientTimeout,
		WriteTimeout: clientTimeout,
	})
}

// withShared completes opt with the settings shared by every client.
func withShared(opt *redis.Options) *redis.Options {
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1   // a failed command is reported, never replayed
	opt.DialerRetries = 1 // one dial per attempt: a dead master fails fast
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt
}

// newClientLocked creates a client; c.mu must be held.
func (c *Cluster) newClientLocked(opt *redis.Options) *redis.Client {
	cl := redis.NewClient(opt)
	if c.closed {
		_ = cl.Close()
	}
	return cl
}

// KeyCounts returns the DBSIZE of every master, in index order. A master
// that is down, paused or otherwise unreachable reports -1. Masters are
// queried in parallel, each bounded by ctx and by 200ms.
func (c *Cluster) KeyCounts(ctx context.Context) []int {
	counts := make([]int, len(c.Masters))
	var wg sync.WaitGroup
	for i, m := range c.Masters {
		counts[i] = -1
		if !m.Running() {
			continue
		}
		admin := c.Admin(i)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, keyCountTimeout)
			defer cancel()
			if n, err := admin.DBSize(ctx).Result(); err == nil {
				counts[i] = int(n)
			}
		})
	}
	wg.Wait()
	return counts
}

// FlushAll runs FLUSHALL on every running master, bounded by ctx. Masters
// that are down are skipped; errors from the others are joined. A paused
// master blocks until ctx (or the admin read timeout) expires and reports
// an error.
func (c *Cluster) FlushAll(ctx context.Context) error {
	errs := make([]error, len(c.Masters))
	var wg sync.WaitGroup
	for i, m := range c.Masters {
		if !m.Running() {
			continue
		}
		admin := c.Admin(i)
		wg.Go(func() {
			err := admin.FlushAll(ctx).Err()
			if err != nil && m.Running() { // killed meanwhile: nothing to flush
				errs[i] = wrapMaster(m, "flushall", err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close closes every client, kills every master and releases the backend's
// resources (temporary directories). It blocks until the masters are gone.
// It is idempotent: later calls return the first call's error.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.closed = true

	var errs []error
	for _, cl := range c.clients {
		errs = append(errs, cl.Close())
	}
	for _, cl := range c.admins {
		errs = append(errs, cl.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), KillTimeout)
	defer cancel()
	for _, m := range c.Masters {
		if err := m.Kill(ctx); err != nil {
			errs = append(errs, wrapMaster(m, "kill", err))
		}
	}
	for _, f := range c.cleanup {
		errs = append(errs, f())
	}
	c.closeErr = errors.Join(errs...)
	return c.closeErr
}

// wrapMaster prefixes err with the master's name and the failed operation.
func wrapMaster(m Master, op string, err error) error {
	return fmt.Errorf("%s: %s: %w", m.Name(), op, err)
}

// restart kills a master and starts it again on its address, retrying a
// start that finds the port still busy for up to rebindTimeout.
func Restart(ctx context.Context, kill, start func(context.Context) error) error {
	if err := kill(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(rebindTimeout)
	for {
		err := start(ctx)
		if !errors.Is(err, ErrAddrInUse) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(rebindWait):
		}
	}
}

// PingThen sends PING and then more (raw RESP) on a fresh connection to
// addr, bounded by ctx and probeTimeout, expects +PONG, and lets then read
// the answers to more.
func PingThen(ctx context.Context, addr, more string, then func(*bufio.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	// PING as a RESP array, not inline: miniredis (package redlocktest)
	// reads only arrays, and closes the connection on an inline command.
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"+more); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	if then == nil {
		return nil
	}
	return then(r)
}
