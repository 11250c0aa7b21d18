package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/retry"
	"github.com/go-redlock/redlock/mutex"
)

const runUsage = `usage: redlock run -masters host:port,... -lock KEY [flags] -- CMD [ARGS...]
       redlock run -masters host:port,... -elect NAME [-value V] [flags] -- CMD [ARGS...]

-lock: runs CMD while holding the lock KEY, renewed automatically. If the lock
is lost, or its validity would run out within -grace, CMD gets SIGTERM, then
SIGKILL after -grace: it is gone before the validity ends. CMD runs in a process
group of its own; signals go to the whole group, and what is left of the group
when CMD exits is killed before the lock is released. Without -wait, a lock held
elsewhere ends it at once.

-elect: campaigns in the election NAME with -value, and runs CMD while leading
(see package election). If the lead is lost, CMD gets SIGTERM, then SIGKILL
after -grace, and redlock run campaigns again, until it is interrupted. When
CMD exits on its own, redlock run resigns and exits. redlock leader NAME shows
the leader.

CMD finds the fencing token in $REDLOCK_FENCING_TOKEN: the lock's (-lock), or
the leader's epoch (-elect), new at each lead. What CMD writes to must reject a
token below one it has seen.

Exit status: CMD's (its last run's with -elect), or 128+N if signal N ended it;
1 if the lock or the lead was not obtained or CMD could not be started (127 if
it was not found); 2 on a usage error.
Flags:`

// runCmd is one run of redlock run.
type runCmd struct {
	masters       []string
	prefix        string
	key           string
	elect         string // the election's name, instead of key
	value         string // the leader's value
	ttl           time.Duration
	grace         time.Duration
	masterTimeout time.Duration
	wait          bool
	argv          []string

	stdin          io.Reader
	stdout, stderr io.Writer
}

// tokenEnv is the environment variable that gives CMD the hold's fencing
// token: the lock's (-lock) or the leader's epoch (-elect). The resource
// CMD writes to rejects a token below one it has seen.
const tokenEnv = "REDLOCK_FENCING_TOKEN"

// holder runs child while something is held, and returns child's error
// joined with its own: a lock (-lock) or a leadership (-elect). child's
// context ends when the hold is lost or about to run out. token is the
// hold's fencing token; until tells its validity, which renewals move.
type holder func(ctx context.Context, child func(ctx context.Context, token uint64, until func() time.Time) error) error

// runCLI runs redlock run with args (args[0] is "run") and returns the
// exit status. It blocks until CMD has exited and the lock is released,
// or, without the lock, until ctx ends (-wait) or at once.
func runCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &runCmd{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := newFlags("run", runUsage, stderr)
	masters := mastersFlags(fs, &c.prefix, "")
	fs.StringVar(&c.key, "lock", "", "the lock's name (required)")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "the lock's TTL; it is renewed every third of it")
	fs.StringVar(&c.elect, "elect", "", "run CMD as the leader of this election, instead of -lock")
	fs.StringVar(&c.value, "value", "", "-elect: the leader's value, shown by redlock leader (default host:pid)")
	fs.BoolVar(&c.wait, "wait", false, "wait for the lock instead of exiting 1 when it is held elsewhere (-elect always waits)")
	fs.DurationVar(&c.grace, "grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lock is lost; at most a third of -ttl (the default is cut to it)")
	fs.DurationVar(&c.masterTimeout, "master-timeout", redlock.DefaultMasterTimeout, "redlock.Options.MasterTimeout")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "redlock run: %s\n", fmt.Sprintf(format, a...))
		fs.Usage()
		return 2
	}
	c.masters = masters()
	c.argv = fs.Args()
	valueSet, graceSet := false, false
	fs.Visit(func(f *flag.Flag) {
		valueSet = valueSet || f.Name == "value"
		graceSet = graceSet || f.Name == "grace"
	})
	if !graceSet {
		c.grace = min(c.grace, c.ttl/3)
	}
	switch {
	case len(c.masters) == 0:
		return usage(noMasters)
	case (c.key == "") == (c.elect == ""):
		return usage("give -lock KEY or -elect NAME, one of them")
	case valueSet && c.elect == "":
		return usage("-value is the leader's: give -elect NAME")
	case len(c.argv) == 0:
		return usage("no command: give it after --")
	case c.ttl < 4*c.masterTimeout:
		// A fenced acquire counts only if decided within a quarter of
		// the TTL; a round may take the whole MasterTimeout.
		return usage("-ttl %v must be at least 4 times -master-timeout %v (%v)", c.ttl, c.masterTimeout, 4*c.masterTimeout)
	case c.grace < 0:
		return usage("-grace %v must not be negative", c.grace)
	case c.grace > c.ttl/3:
		// Renewals keep about two thirds of the TTL ahead. A longer
		// grace would stop CMD while the lock is healthy.
		return usage("-grace %v must be at most a third of -ttl %v", c.grace, c.ttl)
	}

	if c.elect != "" && !valueSet {
		host, _ := os.Hostname()
		c.value = fmt.Sprintf("%s:%d", host, os.Getpid())
	}

	client, closeClient, err := newClient(c.masters, c.prefix, c.masterTimeout)
	if err != nil {
		return usage("%v", err)
	}
	defer closeClient()
	hold, what := c.lockHolder, fmt.Sprintf("%q not obtained", c.key)
	if c.elect != "" {
		hold, what = c.electHolder, fmt.Sprintf("election %q not led", c.elect)
	}
	held, err := hold(client)
	if err != nil {
		return usage("%v", err)
	}

	status, ran := 1, false
	err = held(ctx, func(ctx context.Context, token uint64, until func() time.Time) error {
		ran = true
		ctx, stop := beforeValidity(ctx, until, c.grace)
		defer stop()
		var err error
		status, err = c.child(ctx, token)
		return err
	})
	switch {
	case !ran:
		fmt.Fprintf(stderr, "redlock run: %s: %v\n", what, err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
	}
	return status
}

// lockHolder returns the holder of -lock: a Mutex renewed automatically.
// Without -wait it makes one attempt.
func (c *runCmd) lockHolder(client *redlock.Client) (holder, error) {
	m, err := mutex.New(client, c.key, &mutex.Options{TTL: c.ttl, AutoRenew: true})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, child func(context.Context, uint64, func() time.Time) error) error {
		run := func(ctx context.Context, l *redlock.Lock) error { return child(ctx, l.Token(), l.Until) }
		if c.wait {
			return m.Do(ctx, run)
		}
		if err := m.TryLock(ctx); err != nil {
			return err
		}
		return retry.Run(ctx, m.Current(), c.ttl/retry.MarginDivisor, c.ttl, run, m.Unlock)
	}, nil
}

// beforeValidity returns ctx, cancelled once until() is within grace.
// It reads until again whenever its timer fires, as renewals move it.
// SIGKILL, grace after SIGTERM, then lands before the validity ends.
// stop ends its goroutine.
func beforeValidity(ctx context.Context, until func() time.Time, grace time.Duration) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(time.Until(until()) - grace)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			u := until()
			if left := time.Until(u) - grace; left > 0 {
				t.Reset(left)
				continue
			}
			cancel(fmt.Errorf("%w: validity ends at %s, within the %v grace", redlock.ErrNotHeld, u.Format(time.RFC3339Nano), grace))
			return
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// child runs the command, with token in its environment, until it exits,
// and returns its exit status. When ctx ends, it sends SIGTERM to the
// command's process group, then SIGKILL after the grace. When the command exits, the rest of its group
// is killed: nothing it started works on without the lock.
func (c *runCmd) child(ctx context.Context, token uint64) (int, error) {
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	// The last of duplicates wins: an outer redlock run's token is replaced.
	cmd.Env = append(os.Environ(), tokenEnv+"="+strconv.FormatUint(token, 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	group := func(sig syscall.Signal) error { return syscall.Kill(-cmd.Process.Pid, sig) }
	cmd.Cancel = func() error {
		if c.grace == 0 {
			fmt.Fprintf(c.stderr, "redlock run: %v: sending SIGKILL to %s\n", context.Cause(ctx), c.argv[0])
			return group(syscall.SIGKILL)
		}
		fmt.Fprintf(c.stderr, "redlock run: %v: sending SIGTERM to %s (SIGKILL in %v)\n", context.Cause(ctx), c.argv[0], c.grace)
		time.AfterFunc(c.grace, func() { _ = group(syscall.SIGKILL) })
		return group(syscall.SIGTERM)
	}
	// Wait returns once the command is gone, though its group may hold
	// its output open.
	cmd.WaitDelay = c.grace + time.Second
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return 127, fmt.Errorf("start %s: %w", c.argv[0], err)
		}
		return 1, fmt.Errorf("start %s: %w", c.argv[0], err)
	}
	err := cmd.Wait()
	_ = group(syscall.SIGKILL) // ESRCH where nothing is left
	ps := cmd.ProcessState
	if ps == nil {
		return 1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}
