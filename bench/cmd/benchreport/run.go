package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// suite is one go test -bench invocation.
type suite struct {
	Bench     string // a Benchmark function name
	Benchtime string
	Count     int
}

// suites returns the invocations of a run: counts scaled by count (the
// -count flag), which applies to the timing suites in full.
func suites(count int, benchtime string) []suite {
	return []suite{
		{"BenchmarkLockUnlock", benchtime, count},
		{"BenchmarkContended", benchtime, count},
		{"BenchmarkContendedWork", benchtime, count},
		{"BenchmarkSlowMaster", "2s", count},
		{"BenchmarkStoppedMaster", benchtime, count},
		{"BenchmarkMasters", benchtime, count},
		{"BenchmarkReplicated", benchtime, count},
		{"BenchmarkSemaphore", benchtime, count},
		{"BenchmarkMultiLock", benchtime, count},
		// Failover latencies are percentiles within a run: a fixed number
		// of failovers. A killed leader's takes a TTL (1s): fewer of them.
		{"BenchmarkElectionFailover/how=resign", "200x", count},
		{"BenchmarkElectionFailover/how=killed", "30x", 1},
		// Hand-offs among 100 waiters of one lock: percentiles of a
		// fixed number of grants.
		{"BenchmarkFairHandoff", "300x", count},
		// Command counts barely vary: one repetition, few iterations.
		{"BenchmarkCommands", "300x", 1},
	}
}

// quickSuites shortens every suite for a smoke run.
func quickSuites(ss []suite) []suite {
	out := make([]suite, len(ss))
	for i, s := range ss {
		s.Count = 1
		if strings.HasSuffix(s.Benchtime, "x") {
			s.Benchtime = "30x"
		} else {
			s.Benchtime = "100ms"
		}
		out[i] = s
	}
	return out
}

// runSuites runs every suite in benchDir, appending go test's output to
// raw and the commandstats records to statsPath. Progress goes to log.
//
// Repetitions are interleaved: round r runs every suite whose count is at
// least r once (-count 1), so that a change in the machine's load during
// the run hits every library alike rather than one library's repetitions.
func runSuites(ctx context.Context, benchDir string, ss []suite, raw io.Writer, statsPath string, log io.Writer) error {
	rounds := 0
	for _, s := range ss {
		rounds = max(rounds, s.Count)
	}
	for r := 1; r <= rounds; r++ {
		for _, s := range ss {
			if s.Count < r {
				continue
			}
			fmt.Fprintf(log, "benchreport: round %d of %d\n", r, rounds)
			if err := runSuite(ctx, benchDir, s, raw, statsPath, log); err != nil {
				return err
			}
		}
	}
	return nil
}

func runSuite(ctx context.Context, benchDir string, s suite, raw io.Writer, statsPath string, log io.Writer) error {
	{
		args := []string{"test", "-run", "^$", "-bench", "^" + s.Bench + "$", "-benchmem",
			"-benchtime", s.Benchtime, "-count", "1", "-timeout", "20m", "."}
		fmt.Fprintf(log, "benchreport: go %s\n", strings.Join(args, " "))
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = benchDir
		cmd.Env = append(os.Environ(), "REDLOCK_BENCH_STATS="+statsPath)
		cmd.Stderr = log
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		// Keep benchmark lines and the file-level config; drop the masters'
		// logs and the like.
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if keepLine(line) {
				fmt.Fprintln(raw, line)
				fmt.Fprintln(log, line)
			}
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("go test -bench %s: %w", s.Bench, err)
		}
		fmt.Fprintf(log, "benchreport: %s took %v\n", s.Bench, time.Since(start).Round(time.Second))
	}
	return nil
}

// loadAvg returns the 1-minute load average, or "?".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func keepLine(line string) bool {
	for _, p := range []string{"Benchmark", "goos:", "goarch:", "pkg:", "cpu:"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// machine describes where the run happened.
type machine struct {
	NProc, GOMAXPROCS   string
	CPU, Go             string
	Redis, Kernel, Date string
	Commit              string
	Load                string
}

// describeMachine describes the machine and the repository's commit; the
// report's own outputs (written files and directories) are not changes.
func describeMachine(ctx context.Context, repo string, outputs ...string) machine {
	m := machine{
		NProc:      firstLine(run(ctx, "", "nproc")),
		GOMAXPROCS: fmt.Sprint(runtime.GOMAXPROCS(0)),
		CPU:        cpuModel(),
		Go:         firstLine(run(ctx, "", "go", "version")),
		Redis:      firstLine(run(ctx, "", "redis-server", "--version")),
		Kernel:     firstLine(run(ctx, "", "uname", "-srm")),
		Date:       time.Now().UTC().Format("2006-01-02 15:04 MST"),
	}
	commit := firstLine(run(ctx, repo, "git", "rev-parse", "--short", "HEAD"))
	status := []string{"status", "--porcelain", "--untracked-files=no", "--", "."}
	for _, o := range outputs {
		if rel, err := filepath.Rel(repo, o); err == nil {
			status = append(status, ":!"+filepath.ToSlash(rel))
		}
	}
	if commit != "" && firstLine(run(ctx, repo, "git", status...)) != "" {
		commit += " with uncommitted changes"
	}
	m.Commit = commit
	return m
}

// run returns a command's output, or "?" if it failed.
func run(ctx context.Context, dir, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "?"
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// findDirs returns the bench module's directory and the repository root
// (its parent), from the working directory: the bench module itself, a
// directory inside it, or the repository root.
func findDirs() (benchDir, repo string, err error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, cand := range []string{dir, filepath.Join(dir, "bench")} {
			if isBenchModule(cand) {
				return cand, filepath.Dir(cand), nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", "", fmt.Errorf("no bench module (github.com/go-redlock/redlock/bench) at or above %s", wd)
		}
	}
}

func isBenchModule(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.Contains(firstLine(string(data)), "github.com/go-redlock/redlock/bench")
}

// benchstat runs the benchstat pinned in bench/go.mod (a tool directive)
// on the raw results.
func benchstat(ctx context.Context, benchDir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "benchstat"}, args...)...)
	cmd.Dir = benchDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool benchstat %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// profileTops is what the report shows of the profiled run.
type profileTops struct {
	Bench  string `json:"bench"`
	CPU    string `json:"cpu"`     // flat top
	CPUCum string `json:"cpu_cum"` // cumulative, selected functions
	Alloc  string `json:"alloc"`   // allocated objects, flat top
}

// cumPattern selects the cumulative CPU lines the report quotes: redlock's
// own functions and the runtime and go-redis costs discussed there.
var cumPattern = regexp.MustCompile(`go-redlock/redlock\.|runtime\.(newstack|copystack|mallocgc|gcBgMarkWorker|newproc|schedule)$|connCheck|PeekReplyType|WithWriter|WithReader|initConn|DialContext|context\.With`)

// profile runs one benchmark twice, once with a CPU profile and once with
// every allocation recorded (-memprofilerate 1, which slows it down), and
// returns pprof's top lines.
func profile(ctx context.Context, benchDir, bench, name string, log io.Writer) (*profileTops, error) {
	tmp, err := os.MkdirTemp("", "benchreport-prof-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bench.test")
	cpu, mem := filepath.Join(tmp, "cpu.out"), filepath.Join(tmp, "mem.out")
	for _, extra := range [][]string{
		{"-benchtime", "3s", "-cpuprofile", cpu},
		{"-benchtime", "1s", "-memprofile", mem, "-memprofilerate", "1"},
	} {
		args := append([]string{"test", "-run", "^$", "-bench", bench, "-benchmem", "-count", "1", "-o", bin}, extra...)
		args = append(args, ".")
		fmt.Fprintf(log, "benchreport: go %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = benchDir
		cmd.Stderr = log
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("profiling %s: %w\n%s", bench, err, out)
		}
		fmt.Fprint(log, string(out))
	}
	top := func(prof string, extra ...string) (string, error) {
		args := append(append([]string{"tool", "pprof", "-top"}, extra...), bin, prof)
		c := exec.CommandContext(ctx, "go", args...)
		c.Dir = benchDir
		out, err := c.Output()
		return trimPprof(string(out)), err
	}
	p := &profileTops{Bench: name}
	if p.CPU, err = top(cpu, "-nodecount", "25"); err != nil {
		return nil, err
	}
	cum, err := top(cpu, "-cum", "-nodecount", "1000")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(cum, "\n")
	var sel []string
	for i, l := range lines {
		if i < 3 || cumPattern.MatchString(strings.TrimSpace(l)) {
			sel = append(sel, l)
		}
	}
	p.CPUCum = strings.Join(sel, "\n") + "\n"
	if p.Alloc, err = top(mem, "-sample_index", "alloc_objects", "-nodecount", "25"); err != nil {
		return nil, err
	}
	return p, nil
}

// trimPprof drops pprof's header lines up to the "Showing" summary.
func trimPprof(s string) string {
	if i := strings.Index(s, "Showing nodes"); i >= 0 {
		return s[i:]
	}
	return s
}
