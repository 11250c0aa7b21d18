package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/redlocktest"
)

const mastersUsage = `usage: redlock masters [-n 5] [-port 7001] [-in-process]

masters serves n independent Redis masters on 127.0.0.1, at -port and the
ports after it, until interrupted: the masters the README's first program
expects. They are redis-server processes where redis-server is in PATH, else
in-process masters (package redlocktest). Their data lives in memory only.
Flags:`

// mastersCLI runs redlock masters with args (args[0] is "masters") and
// returns the exit status. It blocks until ctx ends, then stops the
// masters.
func mastersCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("masters", mastersUsage, stderr)
	n := fs.Int("n", 5, "how many masters")
	port := fs.Int("port", 7001, "the first master's port; the others follow it")
	inProcess := fs.Bool("in-process", false, "serve in-process masters even where redis-server is installed")
	rest, err := parseArgs(fs, args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	case len(rest) > 0:
		fmt.Fprintf(stderr, "redlock masters: unexpected argument %q\n", rest[0])
		fs.Usage()
		return 2
	case *n < 1 || *port < 1 || *port+*n-1 > 65535:
		fmt.Fprintf(stderr, "redlock masters: -n %d from -port %d: need 1 or more masters on ports up to 65535\n", *n, *port)
		fs.Usage()
		return 2
	}
	addrs := make([]string, *n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(*port+i))
	}

	what, stop, err := serveMasters(ctx, addrs, *inProcess)
	if err != nil {
		fmt.Fprintf(stderr, "redlock masters: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d %s at %s; interrupt (Ctrl-C) stops them\n", *n, what, strings.Join(addrs, ","))
	<-ctx.Done()
	if err := stop(); err != nil {
		fmt.Fprintf(stderr, "redlock masters: stopping: %v\n", err)
		return 1
	}
	return 0
}

// serveMasters starts a master on each of addrs and returns what they
// are, and how to stop them. It stops those it started if one fails.
func serveMasters(ctx context.Context, addrs []string, inProcess bool) (string, func() error, error) {
	bin, lookErr := exec.LookPath("redis-server")
	if inProcess || lookErr != nil {
		ms, err := redlocktest.StartMastersAt(addrs)
		if err != nil {
			return "", nil, err
		}
		stop := func() error {
			for _, m := range ms {
				m.Close()
			}
			return nil
		}
		return "in-process masters", stop, nil
	}
	var cmds []*exec.Cmd
	stop := func() error {
		var errs []error
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGTERM)
			if err := c.Wait(); err != nil && !isSignalled(err) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		dir, err := os.MkdirTemp("", "redlock-masters-")
		if err != nil {
			return "", nil, errors.Join(err, stop())
		}
		c := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		// Its own process group: Ctrl-C reaches redlock masters alone,
		// which then stops each server once, with SIGTERM.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			return "", nil, errors.Join(err, stop())
		}
		cmds = append(cmds, c)
		if err := awaitPing(ctx, addr); err != nil {
			return "", nil, errors.Join(fmt.Errorf("redis-server on %s: %w", addr, err), stop())
		}
		// The process keeps its open directory; its files go now.
		_ = os.RemoveAll(dir)
	}
	return "redis-server masters", stop, nil
}

// awaitPing waits up to 5s for addr to answer PING.
func awaitPing(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer to PING within 5s: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// isSignalled reports whether err says the process ended by a signal, as
// the SIGTERM stop sends.
func isSignalled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
