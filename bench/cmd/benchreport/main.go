// Command benchreport runs the benchmarks of the bench module, compares
// redlock with go-redsync and bsm/redislock, and writes BENCHMARKS.md at the
// repository root plus charts in docs/bench/.
//
// Run it from the bench module (or the repository root):
//
//	cd bench && go run ./cmd/benchreport
//
// It needs redis-server in PATH and the Go module proxy (for benchstat,
// pinned in bench/go.mod). On 2 cores a full run takes about 6-8 minutes.
// -from re-renders the report from an earlier run's raw output.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"
)

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	count := flag.Int("count", 5, "repetitions of each timing benchmark (benchstat needs >= 5 for p < 0.05)")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime for the timing suites")
	from := flag.String("from", "", "render from this raw `file` (and its .stats.jsonl) instead of running")
	noProfile := flag.Bool("noprofile", false, "skip the profiled run")
	reprofile := flag.Bool("reprofile", false, "with -from: run the profiled benchmark again instead of reusing results/profile.json")
	quick := flag.Bool("quick", false, "a smoke run: short benchtimes, one repetition (numbers are not meaningful)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	benchDir, repo, err := findDirs()
	if err != nil {
		return err
	}
	resultsDir := filepath.Join(benchDir, "results")
	chartsDir := filepath.Join(repo, "docs", "bench")
	out := filepath.Join(repo, "BENCHMARKS.md")
	for _, d := range []string{resultsDir, chartsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	rawPath := filepath.Join(resultsDir, "bench.txt")
	start := time.Now()
	loadStart := loadAvg()
	var ss []suite
	if *from != "" {
		rawPath = *from
	} else {
		ss = suites(*count, *benchtime)
		if *quick {
			ss = quickSuites(ss)
		}
		statsPath := statsFile(rawPath)
		_ = os.Remove(statsPath)
		var raw bytes.Buffer
		if err := runSuites(ctx, benchDir, ss, &raw, statsPath, os.Stderr); err != nil {
			return err
		}
		if err := os.WriteFile(rawPath, raw.Bytes(), 0o644); err != nil {
			return err
		}
	}

	f, err := os.Open(rawPath)
	if err != nil {
		return err
	}
	res, err := readResults(f, rawPath)
	f.Close()
	if err != nil {
		return err
	}
	if err := res.readStats(statsFile(rawPath)); err != nil {
		return err
	}
	if len(res.samples) == 0 {
		return fmt.Errorf("%s: no benchmark results", rawPath)
	}

	rep := &report{res: res, machine: describeMachine(ctx, repo, out, resultsDir, chartsDir), suites: ss, rawPath: rawPath, repo: repo}
	if *from == "" {
		rep.machine.Load = loadStart + " at the start, " + loadAvg() + " at the end of the benchmarks"
	}
	rep.benchstat, err = benchstatSections(ctx, benchDir, rawPath)
	if err != nil {
		return err
	}
	profPath := filepath.Join(filepath.Dir(rawPath), "profile.json")
	switch {
	case *from != "" && !*reprofile:
		if data, err := os.ReadFile(profPath); err == nil {
			rep.profile = &profileTops{}
			if err := json.Unmarshal(data, rep.profile); err != nil {
				return fmt.Errorf("%s: %w", profPath, err)
			}
		}
	case !*noProfile || *reprofile:
		rep.profile, err = profile(ctx, benchDir, "^BenchmarkLockUnlock$/^lib=redlock-5$/^g=16$/^key=fresh$",
			"LockUnlock/lib=redlock-5/g=16/key=fresh", os.Stderr)
		if err != nil {
			return err
		}
		data, err := json.MarshalIndent(rep.profile, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(profPath, data, 0o644); err != nil {
			return err
		}
	}

	for name, draw := range map[string]func(*results, string) error{
		"throughput.png":         throughputChart,
		"latency-vs-masters.png": mastersChart,
		"slow-master.png":        slowChart,
		"contended.png":          contendedChart,
	} {
		if err := draw(res, filepath.Join(chartsDir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rep.charts = append(rep.charts, name)
	}
	if *from == "" {
		rep.took = time.Since(start)
		if err := writeRecord(recordFile(rawPath), rep.record()); err != nil {
			return err
		}
	} else if err := rep.applyRecord(recordFile(rawPath)); err != nil {
		return err
	}
	var md bytes.Buffer
	rep.write(&md)
	if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchreport: wrote %s and %d charts in %s (%v)\n", out, len(rep.charts), chartsDir, time.Since(start).Round(time.Second))
	return nil
}

// statsFile is where the commandstats records of a raw file live.
func statsFile(raw string) string { return raw + ".stats.jsonl" }

// benchstatSections runs benchstat once per suite, comparing libraries.
func benchstatSections(ctx context.Context, benchDir, raw string) ([]benchstatOut, error) {
	specs := []struct{ title, filter, col, row string }{
		{"Uncontended lock+unlock (base: redsync-5)", ".name:LockUnlock /key:fresh .unit:(sec/op OR B/op OR allocs/op OR ops/s)",
			"/lib@(redsync-5 redlock-5 redlock+rueidis-5 redlock-1 redislock-1)", "/g"},
		{"Uncontended lock+unlock, key reused (base: redsync-5)", ".name:LockUnlock /key:reused .unit:(sec/op OR allocs/op OR errs/op)",
			"/lib@(redsync-5 redlock-5)", "/g"},
		{"Contended, 16 goroutines, one key (base: redsync-5)", ".name:Contended .unit:(sec/op OR ops/s OR allocs/op)",
			"/lib@(redsync-5 redlock-5)", ".name"},
		{"One slow master (base: all healthy)", ".name:SlowMaster .unit:(p50-ns OR p99-ns)", "/slow@(0ms 20ms)", "/lib"},
		{"Semaphore, capacity 4 (base: redsync-5 slot locks)", ".name:Semaphore .unit:(sec/op OR ops/s OR allocs/op)",
			"/lib@(redsync-5 redlock-5 redislock-1)", "/g"},
		{"Number of masters (base: redsync)", ".name:Masters .unit:(sec/op OR p99-ns OR allocs/op)", "/lib@(redsync redlock)", "/masters"},
	}
	var outs []benchstatOut
	for _, s := range specs {
		text, err := benchstat(ctx, benchDir, "-filter", s.filter, "-col", s.col, "-row", s.row, raw)
		if err != nil {
			return nil, err
		}
		outs = append(outs, benchstatOut{title: s.title, args: fmt.Sprintf("-filter '%s' -col '%s' -row '%s'", s.filter, s.col, s.row), text: text})
	}
	return outs, nil
}

type benchstatOut struct{ title, args, text string }
