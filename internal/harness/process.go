package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrNoRedisServer is returned (wrapped) by StartProcesses when the
// redis-server binary cannot be found.
var ErrNoRedisServer = errors.New("redis-server binary not found; install it with `apt-get install -y redis-server`")

// ProcessOptions configures StartProcesses. The zero value is ready to use.
type ProcessOptions struct {
	// Binary is the redis-server executable; default "redis-server" in PATH.
	Binary string
	// Env is extra environment for every master (for example LD_PRELOAD for
	// libfaketime), appended to os.Environ().
	Env []string
	// EnvFor, if not nil, returns extra environment for master i, appended
	// after Env.
	EnvFor func(i int) []string
	// Args are extra redis-server arguments, appended after the harness's
	// own so they can override them.
	Args []string
	// Config, if not empty, is written to a config file in each master's
	// directory, given before every argument. redis-sentinel needs one:
	// it rewrites it with what it learns.
	Config string
}

const (
	StartTimeout  = 10 * time.Second       // a start must answer PING within this
	StartAttempts = 5                      // fresh ports StartProcesses tries per master
	rebindTimeout = 2 * time.Second        // how long Restart retries a busy port
	rebindWait    = 100 * time.Millisecond // pause between those retries
	probeTimeout  = 500 * time.Millisecond // one readiness probe
	PollInterval  = 10 * time.Millisecond  // between readiness probes
	LogTailLines  = 20                     // log lines quoted in a start error
	logFileName   = "redis.log"
)

// ErrAddrInUse marks a start that failed because the port was taken.
var ErrAddrInUse = errors.New("address already in use")

// StartProcesses starts n redis-server processes, each listening on a free
// 127.0.0.1 port, with its own temporary directory, no persistence and
// protected mode off. It blocks until every master answers PING; each start
// is bounded by ctx and by 10s. The processes outlive ctx: stop them with
// Cluster.Close. On failure everything already started is stopped and the
// error includes the last lines of the failing master's log.
func StartProcesses(ctx context.Context, n int, opts ProcessOptions) (*Cluster, error) {
	bin := opts.Binary
	if bin == "" {
		bin = "redis-server"
	}
	bin, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoRedisServer, err)
	}
	root, err := os.MkdirTemp("", "redlock-integration-*")
	if err != nil {
		return nil, err
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	var c *Cluster
	c = New(make([]Master, 0, n), func() error {
		// After the kills: a port is free again once its master is gone.
		errs := []error{os.RemoveAll(root)}
		for _, m := range c.Masters {
			errs = append(errs, m.(*processMaster).lease.Release())
		}
		return errors.Join(errs...)
	})
	for i := range n {
		env := append(os.Environ(), opts.Env...)
		if opts.EnvFor != nil {
			env = append(env, opts.EnvFor(i)...)
		}
		name := fmt.Sprintf("m%d", i)
		m, err := startProcessMaster(ctx, name, filepath.Join(root, name), bin, env, opts.Args, opts.Config)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.Masters = append(c.Masters, m)
	}
	return c, nil
}

// startProcessMaster starts a master working in dir on a leased port,
// trying another port if the chosen one is taken before redis binds it.
// The master keeps the lease until its cluster's Close.
func startProcessMaster(ctx context.Context, name, dir, bin string, env, extraArgs []string, config string) (*processMaster, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var first []string
	if config != "" {
		path := filepath.Join(dir, "server.conf")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			return nil, err
		}
		first = []string{path}
	}
	var err error
	for range StartAttempts {
		var lease *PortLease
		if lease, err = LeasePort(); err != nil {
			return nil, err
		}
		port := lease.Port()
		m := &processMaster{
			lease:  lease,
			name:   name,
			addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			dir:    dir,
			binary: bin,
			env:    env,
		}
		m.args = append(append(first[:len(first):len(first)],
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", filepath.Join(m.dir, "data"),
			"--logfile", m.logPath(),
		), extraArgs...)
		m.mu.Lock()
		err = m.start(ctx)
		m.mu.Unlock()
		if err == nil {
			return m, nil
		}
		err = errors.Join(err, lease.Release())
		if !errors.Is(err, ErrAddrInUse) {
			return nil, err
		}
	}
	return nil, err
}

// processMaster is a Master backed by a local redis-server process.
type processMaster struct {
	name, addr string
	dir        string     // holds the log file and the data directory
	binary     string     // absolute path of redis-server
	args       []string   // full redis-server command line after the binary; guarded by mu
	env        []string   // full environment
	lease      *PortLease // keeps addr's port ours while the master is down

	mu   sync.Mutex              // serialises Kill, Restart, Pause and Resume
	proc atomic.Pointer[process] // the live process; nil when killed
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been reaped
}

func (m *processMaster) Name() string    { return m.name }
func (m *processMaster) Addr() string    { return m.addr }
func (m *processMaster) logPath() string { return filepath.Join(m.dir, logFileName) }

// Running reports whether the process was started, not killed, and has not
// exited on its own. It does not block.
func (m *processMaster) Running() bool {
	p := m.proc.Load()
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pid returns the process id of the live process, or 0.
func (m *processMaster) pid() int {
	if p := m.proc.Load(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Kill sends SIGKILL and blocks until the process is reaped, bounded by ctx.
func (m *processMaster) Kill(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kill(ctx)
}

// kill implements Kill; m.mu must be held.
func (m *processMaster) kill(ctx context.Context) error {
	p := m.proc.Load()
	if p == nil {
		return nil
	}
	// SIGKILL ends a stopped process too; the SIGCONT is harmless insurance.
	// Errors only mean the process already exited, which the wait covers.
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
		m.proc.Store(nil)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for pid %d to die: %w", m.name, p.cmd.Process.Pid, ctx.Err())
	}
}

// Restart kills the process if needed and starts a new one on the same port
// with an empty data directory. It blocks until the new process answers
// PING, bounded by ctx and by 10s per attempt; a busy port is retried for a
// few seconds.
func (m *processMaster) Restart(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Restart(ctx, m.kill, m.start)
}

// RestartWith is Restart with args appended to the master's arguments,
// for this start and the later ones. A later argument overrides an
// earlier one: "--replicaof host port" makes it start as a replica.
func (m *processMaster) RestartWith(ctx context.Context, args ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.args = append(m.args[:len(m.args):len(m.args)], args...)
	return Restart(ctx, m.kill, m.start)
}

// Pause sends SIGSTOP and blocks until the kernel reports the process
// stopped, bounded by ctx.
func (m *processMaster) Pause(ctx context.Context) error {
	return m.signal(ctx, syscall.SIGSTOP, true)
}

// Resume sends SIGCONT and blocks until the process is no longer stopped,
// bounded by ctx.
func (m *processMaster) Resume(ctx context.Context) error {
	return m.signal(ctx, syscall.SIGCONT, false)
}

func (m *processMaster) signal(ctx context.Context, sig syscall.Signal, stopped bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc.Load()
	if p == nil || !m.Running() {
		return fmt.Errorf("%s: %v: %w", m.name, sig, ErrNotRunning)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", m.name, sig, err)
	}
	if err := waitStopped(ctx, p.cmd.Process.Pid, stopped); err != nil {
		return fmt.Errorf("%s: %v: %w", m.name, sig, err)
	}
	return nil
}

// start launches redis-server and waits until it answers PING, bounded by
// ctx and StartTimeout. On failure the process is killed and the error
// quotes the end of the log; it wraps ErrAddrInUse if the port was taken.
// m.mu must be held and no process may be live.
func (m *processMaster) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()

	data := filepath.Join(m.dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	// stdout and stderr go to the log file too: redis reports bad arguments
	// there before it opens --logfile.
	logf, err := os.OpenFile(m.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}

	// exec.Command, not CommandContext: the process must outlive ctx.
	cmd := exec.Command(m.binary, m.args...)
	cmd.Dir = m.dir
	cmd.Env = m.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // reap, so no zombie is left behind
		close(p.exited)
	}()
	m.proc.Store(p)

	err = waitReady(ctx, m.addr, cmd.Process.Pid, p.exited)
	if err == nil {
		return nil
	}
	killCtx, cancelKill := context.WithTimeout(context.Background(), KillTimeout)
	defer cancelKill()
	_ = m.kill(killCtx)
	tail := ReadTail(m.logPath(), logStart, LogTailLines)
	if strings.Contains(tail, "Address already in use") {
		err = fmt.Errorf("%w: %w", ErrAddrInUse, err)
	}
	return fmt.Errorf("%s: redis-server on %s did not start: %w\n--- end of its log ---\n%s",
		m.name, m.addr, err, tail)
}

// waitReady polls addr until the redis-server with the given pid answers,
// the process exits, or ctx is done.
func waitReady(ctx context.Context, addr string, pid int, exited <-chan struct{}) error {
	for {
		err := probe(ctx, addr, pid)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last probe: %v)", ctx.Err(), err)
		case <-time.After(PollInterval):
		}
	}
}

// probe sends PING and INFO server on a fresh connection. It succeeds if
// the server answers PONG and reports process_id pid, which rules out
// another server that happens to own the port.
func probe(ctx context.Context, addr string, pid int) error {
	return PingThen(ctx, addr, "INFO server\r\n", func(r *bufio.Reader) error {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || line[0] != '$' || size < 0 {
			return fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
		}
		info := make([]byte, size)
		if _, err := io.ReadFull(r, info); err != nil {
			return err
		}
		if !strings.Contains(string(info), "\r\nprocess_id:"+strconv.Itoa(pid)+"\r\n") {
			return fmt.Errorf("%s is served by a process other than pid %d", addr, pid)
		}
		return nil
	})
}

// ReadTail returns up to n last lines of the file written after offset.
func ReadTail(path string, offset int64, n int) string {
	const maxRead = 64 << 10
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size()-offset > maxRead {
		offset = st.Size() - maxRead
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, maxRead))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
