// Command redlock demonstrates the Redlock client under load and faults,
// and inspects and repairs locks on running masters.
//
//	cd cmd/redlock && go run . demo [-workers 8] [-duration 12s] [-ttl 1s] [-masters host:port,...]
//	redlock inspect|watch|release -force [-json] -masters host:port,... KEY
//	redlock verify [-json] [-ttl 10s] -masters host:port,...
//	redlock run -masters host:port,... -lock KEY [-ttl 10s] [-wait] [-grace 5s] -- CMD [ARGS...]
//	redlock run -masters host:port,... -elect NAME [-value V] [-ttl 10s] [-grace 5s] -- CMD [ARGS...]
//	redlock leader|observe [-json] -masters host:port,... NAME
//
// Flags may also follow KEY or NAME; after "--" everything is an argument.
//
// The demo runs workers that each own a redlock.Client and compete for one
// key, checks that their critical sections never overlap and that no update
// of a shared counter is lost, and, on masters it starts itself, kills,
// restarts and pauses masters meanwhile. It starts redis-server processes
// where redis-server is in PATH, else in-process masters (package
// redlocktest), and its first line says so. It prints each master as it
// comes up, a status line every second, and a summary with a legend of its
// counters. It exits 1 if an overlap or a lost update was seen, the lock
// was never acquired or the run failed, and 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// commands are the subcommands, as the unknown-command error lists them.
const commands = "demo, masters, inspect, watch, release, verify, run, leader, observe"

const usage = `usage: redlock demo [flags]
       redlock inspect|watch|release|verify [flags] [KEY]   (redlock inspect -h)
       redlock run [flags] -- CMD [ARGS...]                  (redlock run -h)
       redlock leader|observe [flags] NAME                   (redlock leader -h)
       redlock masters [-n 5] [-port 7001]                   (redlock masters -h)

demo runs workers that compete for one Redlock key and verifies mutual exclusion.
Flags:`

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs the command line args and returns the exit status. It blocks
// until the command ends or SIGINT/SIGTERM stops it.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "inspect", "watch", "release", "verify":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return opsCLI(ctx, args, stdout, stderr)
		case "run":
			// SIGINT or SIGTERM stops the child as a lost lock does.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runCLI(ctx, args, os.Stdin, stdout, stderr)
		case "masters":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return mastersCLI(ctx, args, stdout, stderr)
		case "leader", "observe":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return electCLI(ctx, args, stdout, stderr)
		}
	}
	fs := newFlags("demo", usage, stderr)
	cfg := defaultConfig()
	var masters string
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "number of workers, each with its own redlock.Client")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long the workers run")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "lock TTL")
	fs.StringVar(&masters, "masters", "", "comma-separated host:port of running masters to use instead of starting five local ones (no faults are injected)")
	switch {
	case len(args) == 0:
		fs.Usage()
		return 2
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fs.Usage()
		return 0
	case args[0] != "demo":
		fmt.Fprintf(stderr, "redlock: unknown command %q; the commands are %s\n\n", args[0], commands)
		fs.Usage()
		return 2
	}
	rest, err := parseArgs(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "redlock demo: unexpected arguments %q\n", rest)
		return 2
	}
	cfg.masters = splitMasters(masters)
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 2
	}

	// go-redis logs every failed dial; the status lines show masters down.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg, stdout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 1
	case !sum.ok():
		fmt.Fprintln(stderr, "redlock demo: FAILED (see the summary)")
		return 1
	}
	return 0
}

// newFlags returns the flag set of the command "redlock name", which
// prints its errors, and usage followed by its flags, to stderr.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("redlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// noMasters is the usage error of a command that reaches masters and was
// given none.
const noMasters = "no masters: give -masters host:port,... or set " + EnvMasters

// mastersFlags adds -masters and -prefix, the flags of every command that
// reaches running masters; note ends -masters' help. The function it
// returns gives the addresses of -masters once fs is parsed.
func mastersFlags(fs *flag.FlagSet, prefix *string, note string) func() []string {
	masters := fs.String("masters", os.Getenv(EnvMasters), "comma-separated host:port of the masters"+note+" (default $"+EnvMasters+")")
	fs.StringVar(prefix, "prefix", "", "the clients' redlock.Options.KeyPrefix")
	return func() []string { return splitMasters(*masters) }
}

// splitMasters splits -masters at commas, dropping empty parts.
func splitMasters(s string) []string {
	var masters []string
	for m := range strings.SplitSeq(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			masters = append(masters, m)
		}
	}
	return masters
}

// parseArgs parses args with fs, taking flags after positional arguments
// as well as before them ("release KEY -force"), and returns the positional
// ones in order. Everything after "--" is positional. Errors are fs.Parse's.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse consumes a "--" it stops at, and not a positional
		// argument; a "--" that it consumed as a flag's value is neither.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" && !takesValue(fs, args[:n-1]) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// takesValue reports whether the last of args is a flag of fs that takes
// the next argument as its value: "-name", not "-name=v", nor a boolean.
func takesValue(fs *flag.FlagSet, args []string) bool {
	if len(args) == 0 {
		return false
	}
	name := strings.TrimLeft(args[len(args)-1], "-")
	if len(name) == len(args[len(args)-1]) || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// quietLogger drops go-redis's internal log messages.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
