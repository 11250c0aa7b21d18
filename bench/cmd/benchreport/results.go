package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// results holds every sample of a run, by benchmark and unit.
type results struct {
	// samples[name][unit] are the values of every -count repetition.
	// name is the benchmark name without "Benchmark" and without the
	// GOMAXPROCS suffix, e.g. "LockUnlock/lib=redlock-5/g=16".
	samples map[string]map[string][]float64
	// iters[name] are the iteration counts (b.N) of the repetitions.
	iters map[string][]int
	// stats[name] is the last REDLOCK_BENCH_STATS record of the benchmark:
	// that of its final, reported run.
	stats map[string]statsLine
	// configs are the file-level keys of the output (goos, cpu, ...).
	configs map[string]string
}

// statsLine mirrors the benchmarks' REDLOCK_BENCH_STATS records.
type statsLine struct {
	Name     string           `json:"name"`
	N        int              `json:"n"`
	Kind     string           `json:"kind"`
	Ops      int64            `json:"ops"`
	Total    int64            `json:"total"`
	ByName   map[string]int64 `json:"by_name"`
	InScript int64            `json:"in_script"`
}

// readResults parses go test -bench output with benchfmt.
func readResults(r io.Reader, fileName string) (*results, error) {
	res := &results{
		samples: map[string]map[string][]float64{},
		iters:   map[string][]int{},
		stats:   map[string]statsLine{},
		configs: map[string]string{},
	}
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		rec, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata
		}
		for _, c := range rec.Config {
			if c.File {
				res.configs[c.Key] = string(c.Value)
			}
		}
		name := benchName(rec.Name)
		if res.samples[name] == nil {
			res.samples[name] = map[string][]float64{}
		}
		res.iters[name] = append(res.iters[name], rec.Iters)
		for _, v := range rec.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" { // keep ns/op and the custom units as printed
				unit, val = v.OrigUnit, v.OrigValue
			}
			res.samples[name][unit] = append(res.samples[name][unit], val)
		}
	}
	return res, br.Err()
}

// benchName strips the GOMAXPROCS suffix ("-2") from a full name.
func benchName(n benchfmt.Name) string {
	base, parts := n.Parts()
	var b strings.Builder
	b.Write(base)
	for _, p := range parts {
		if len(p) > 0 && p[0] == '-' { // the GOMAXPROCS part
			continue
		}
		b.Write(p)
	}
	return b.String()
}

// readStats reads REDLOCK_BENCH_STATS lines; a later line replaces an
// earlier one of the same benchmark.
func (r *results) readStats(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l statsLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		// b.Name() has no GOMAXPROCS suffix.
		r.stats[strings.TrimPrefix(l.Name, "Benchmark")] = l
	}
	return sc.Err()
}

// summary is the median of a benchmark's samples with its 95% confidence
// interval, as benchstat computes it.
type summary struct {
	median, lo, hi float64
	n              int
}

// ok reports whether there was at least one sample.
func (s summary) ok() bool { return s.n > 0 }

// get summarizes name's samples of unit; a zero summary if there are none.
func (r *results) get(name, unit string) summary {
	vs := r.samples[name][unit]
	if len(vs) == 0 {
		return summary{median: math.NaN()}
	}
	s := benchmath.NewSample(append([]float64(nil), vs...), &benchmath.DefaultThresholds)
	sum := benchmath.AssumeNothing.Summary(s, 0.95)
	return summary{median: sum.Center, lo: sum.Lo, hi: sum.Hi, n: len(vs)}
}

// med returns the median of name's samples of unit, NaN without samples.
func (r *results) med(name, unit string) float64 { return r.get(name, unit).median }

// pct formats the half-width of the confidence interval relative to the
// median, like benchstat's "± x%".
func (s summary) pct() string {
	if s.n < 2 || math.IsInf(s.lo, 0) || math.IsInf(s.hi, 0) || s.median == 0 {
		return ""
	}
	d := max(s.hi-s.median, s.median-s.lo) / math.Abs(s.median) * 100
	return fmt.Sprintf(" ± %.0f%%", d)
}
