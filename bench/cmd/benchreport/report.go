package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"crypto/sha1"
	"encoding/hex"
	"regexp"
)

var (
	lockUnlockLibs = []string{"redlock-5", "redlock+rueidis-5", "redlock-1", "redlock+rueidis-1", "redsync-5", "redislock-1", "transport-1"}
	goroutines     = []int{1, 16, 64}
	mastersN       = []int{1, 3, 5, 7, 9}
)

type report struct {
	res       *results
	machine   machine
	suites    []suite
	rawPath   string
	repo      string
	benchstat []benchstatOut
	profile   *profileTops
	charts    []string
	took      time.Duration
}

// Formatting helpers; NaN (no result) prints as "–".

func fmtDur(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "–"
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	default:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	}
}

func fmtNum(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2fx", v)
}

func verdict(t target) string {
	switch {
	case !t.known:
		return "no data"
	case t.comparison:
		return "-"
	case t.met:
		return "**met**"
	default:
		return "**missed**"
	}
}

// target is one line of the summary.
type target struct {
	what, goal, measured, ratio string
	met, known                  bool
	comparison                  bool // for comparison only: nothing to meet
}

func (r *report) targets() []target {
	res := r.res
	var ts []target
	ratioTarget := func(what, unit string, a, b string, goal float64, atLeast bool) {
		va, vb := res.med(a, unit), res.med(b, unit)
		v := va / vb
		op := ">="
		if !atLeast {
			op = "<="
		}
		ts = append(ts, target{
			what:     what,
			goal:     fmt.Sprintf("%s %.2gx", op, goal),
			measured: fmt.Sprintf("%s vs %s %s", fmtNum(va, 0), fmtNum(vb, 0), unit),
			ratio:    fmtRatio(v), met: atLeast && v >= goal || !atLeast && v <= goal, known: !math.IsNaN(v),
		})
	}
	// compare adds a row without a target: a's pairs/s over b's.
	compare := func(what, a, b string) {
		va, vb := res.med(a, "ops/s"), res.med(b, "ops/s")
		ts = append(ts, target{
			what: "For comparison, no target: " + what, goal: "-",
			measured: fmt.Sprintf("%s vs %s ops/s", fmtNum(va, 0), fmtNum(vb, 0)),
			ratio:    fmtRatio(va / vb), known: !math.IsNaN(va / vb), comparison: true,
		})
	}
	lu := func(lib string, g int) string { return fmt.Sprintf("LockUnlock/lib=%s/g=%d/key=fresh", lib, g) }
	for _, t := range []struct {
		g    int
		goal float64
	}{{1, 1.1}, {16, 2}, {64, 3}} {
		ratioTarget(fmt.Sprintf("Lock+unlock, 5 masters, %d goroutines: redlock / redsync", t.g), "ops/s",
			lu("redlock-5", t.g), lu("redsync-5", t.g), t.goal, true)
	}
	for _, g := range goroutines {
		compare(fmt.Sprintf("redlock on rueidis, 5 masters, %d goroutines / redsync", g),
			lu("redlock+rueidis-5", g), lu("redsync-5", g))
	}
	ratioTarget("Lock+unlock, 1 master, 16 goroutines: redlock / redislock", "ops/s",
		lu("redlock-1", 16), lu("redislock-1", 16), 1.2, true)
	for _, c := range []struct{ lib, what string }{
		{"redlock+rueidis-1", "redlock on rueidis"},
		{"transport-1", "redlock's transport alone (redislock's scripts through one master's pipeline)"},
	} {
		compare(c.what+", 1 master, 16 goroutines / redislock", lu(c.lib, 16), lu("redislock-1", 16))
	}
	ratioTarget("Allocations per lock+unlock, 5 masters, 16 goroutines: redlock / redsync", "allocs/op",
		lu("redlock-5", 16), lu("redsync-5", 16), 0.75, false)

	cmds := res.med(lu("redlock-5", 16), "srv-cmds/op")
	ts = append(ts, target{
		what:     "Server commands per lock+unlock, 5 masters (INFO commandstats, scripts' inner commands included)",
		goal:     "<= 30",
		measured: fmtNum(cmds, 1), met: cmds <= 30, known: !math.IsNaN(cmds),
	})
	unfenced := "Commands/op=lockunlock/lib=redlock-unfenced-5"
	cmdsUnfenced := res.med(unfenced, "cmds/op") + res.med(unfenced, "script-cmds/op")
	ts = append(ts, target{
		what:     "For comparison, no target: the same without fencing tokens (Options.NoFencing; MONITOR)",
		goal:     "-",
		measured: fmtNum(cmdsUnfenced, 1), known: !math.IsNaN(cmdsUnfenced), comparison: true,
	})
	var got []string
	exact, known := true, false
	for _, n := range mastersN {
		v := res.med(fmt.Sprintf("Commands/op=lockunlock/lib=redlock-%d", n), "cmds/op")
		if math.IsNaN(v) {
			continue
		}
		known = true
		got = append(got, fmt.Sprintf("N=%d: %s", n, fmtNum(v, 2)))
		// A call queued to a master that is behind is withdrawn: never more
		// than 2N, and only a few less.
		exact = exact && v < float64(2*n)+0.005 && v > float64(2*n)*0.95
	}
	ts = append(ts, target{
		what:     "Client commands per uncontended lock+unlock on N masters (redlock, MONITOR; fewer where a call queued to a master that is behind was withdrawn)",
		goal:     "2N, never more",
		measured: strings.Join(got, ", "),
		met:      exact, known: known,
	})

	h, s := res.med("SlowMaster/lib=redlock-5/slow=0ms", "p99-ns"), res.med("SlowMaster/lib=redlock-5/slow=20ms", "p99-ns")
	added := s/h - 1
	ts = append(ts, target{
		what:     "One master slowed by 20ms: added p99 acquire latency (redlock, 5 masters)",
		goal:     "<= +25%",
		measured: fmt.Sprintf("p99 %s -> %s", fmtDur(h), fmtDur(s)),
		ratio:    fmt.Sprintf("%+.0f%%", added*100), met: added <= 0.25, known: !math.IsNaN(added),
	})
	ratioTarget("One master slowed by 20ms: B/op, slowed / healthy (redlock)", "B/op",
		"SlowMaster/lib=redlock-5/slow=20ms", "SlowMaster/lib=redlock-5/slow=0ms", 1.5, false)

	cw := func(lib string) string { return "ContendedWork/lib=" + lib + "/g=16" }
	ratioTarget("16 goroutines on one key, 1ms held + 2ms outside: acquisitions/s, redlock / redsync", "ops/s",
		cw("redlock-5"), cw("redsync-5"), 1.8, true)
	p50 := res.med(cw("redlock-5"), "handoff-p50-ns")
	ts = append(ts, target{
		what:     "Same: hand-off p50, release to the next holder's acquire (redlock)",
		goal:     "<= 1ms",
		measured: fmtDur(p50), met: p50 <= 1e6, known: !math.IsNaN(p50),
	})
	sm := func(state, op string) string { return "StoppedMaster/master=" + state + "/op=" + op }
	for _, state := range []string{"paused", "killed"} {
		for _, op := range stoppedContended {
			ratioTarget(fmt.Sprintf("One master %s, 16 goroutines on one key (%s): acquisitions/s, %s / healthy (redlock)", state, op, state), "ops/s",
				sm(state, op), sm("healthy", op), 0.7, true)
		}
	}
	h, d := res.med(sm("healthy", "lock"), "p99-ns"), res.med(sm("killed", "lock"), "p99-ns")
	added = d/h - 1
	ts = append(ts, target{
		what:     "One master killed: added p99 uncontended acquire latency (redlock, 5 masters)",
		goal:     "<= +25%",
		measured: fmt.Sprintf("p99 %s -> %s", fmtDur(h), fmtDur(d)),
		ratio:    fmt.Sprintf("%+.0f%%", added*100), met: added <= 0.25, known: !math.IsNaN(added),
	})
	return append(ts, failoverTargets(res)...)
}

// failoverTargets are the election's: the next leader within a few ms of
// a Resign, and within a TTL plus one retry of the leader's SIGKILL.
func failoverTargets(res *results) []target {
	const resignGoal = 5e6 // ns
	resign := res.med(failover("resign"), "p99-ns")
	killed, bound := res.med(failover("killed"), "p99-ns"), res.med(failover("killed"), "bound-ns")
	return []target{{
		what:     "Leader election, 5 masters: p99 from Resign to the next leader (woken by the release)",
		goal:     "<= " + fmtDur(resignGoal),
		measured: fmtDur(resign), met: resign <= resignGoal, known: !math.IsNaN(resign),
	}, {
		what:     "Leader election, 5 masters, 1s TTL: p99 from the leader's SIGKILL to the next leader",
		goal:     "<= TTL + one retry (" + fmtDur(bound) + ")",
		measured: fmtDur(killed), met: killed <= bound, known: !math.IsNaN(killed) && !math.IsNaN(bound),
	}}
}

// failover is the name of a BenchmarkElectionFailover case.
func failover(how string) string { return "ElectionFailover/how=" + how }

// stoppedContended are the contended ops of BenchmarkStoppedMaster.
var stoppedContended = []string{"contended", "contendedwork", "contended/clients=2", "contendedwork/clients=2",
	"contended/clients=4", "contendedwork/clients=4"}

func (r *report) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	res := r.res
	m := r.machine

	p("# Benchmarks\n\n")
	p("redlock compared with [go-redsync/redsync](https://github.com/go-redsync/redsync) v4 (Redlock on the same masters) and ")
	p("[bsm/redislock](https://github.com/bsm/redislock) (one node), all from one `go test -bench` run per suite, on local ")
	p("redis-server processes that share the machine's cores with the client. ")
	p("Generated by `cd bench && go run ./cmd/benchreport` (`make bench`); do not edit by hand. ")
	p("Compare numbers only within this file: a rerun on a busy machine moves them.\n\n")

	p("## Targets\n\n")
	p("| Target | Goal | Measured | Ratio | Result |\n|---|---|---|---|---|\n")
	for _, t := range r.targets() {
		p("| %s | %s | %s | %s | %s |\n", t.what, t.goal, t.measured, t.ratio, verdict(t))
	}
	p("\nMedians of the repetitions below; the ratios are of medians from the same run.\n\n")

	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| nproc | %s (GOMAXPROCS %s) |\n| CPU | %s |\n| Go | %s |\n| Redis | %s |\n| Kernel | %s |\n| redlock | %s |\n| Date | %s |\n",
		m.NProc, m.GOMAXPROCS, m.CPU, m.Go, m.Redis, m.Kernel, m.Commit, m.Date)
	if m.Load != "" {
		p("| Load average (1 min) | %s |\n", m.Load)
	}
	if r.took > 0 {
		p("| Run time | %v |\n", r.took.Round(time.Second))
	}
	p("\n")
	if len(r.suites) > 0 {
		p("Suites run from `bench/`, interleaved: each round runs every suite once with `-count 1`, so that the repetitions of all libraries share the machine's load over time:\n\n```\n")
		for _, s := range r.suites {
			p("go test -run '^$' -bench '^%s$' -benchmem -benchtime %s -count 1 .   # %d rounds\n", s.Bench, s.Benchtime, s.Count)
		}
		p("```\n\nRaw output: `bench/results/bench.txt` (commandstats per run: `bench/results/bench.txt.stats.jsonl`).\n\n")
	}

	p("## Setup\n\n")
	p("- Every benchmark function starts its own masters (`integration.StartProcesses`: redis-server 127.0.0.1, no persistence) once; its cases are sub-benchmarks.\n")
	p("- Every library gets the same go-redis v9 clients: `ContextTimeoutEnabled: true`, 200ms dial/read/write timeouts, no retries, default pool (10 per GOMAXPROCS).\n")
	p("- TTL 10s everywhere. redlock: defaults (MasterTimeout 50ms, fencing tokens on). redsync: `WithExpiry(10s)`, otherwise defaults (waits for every master; 32 tries 50-250ms apart when contended). redislock: defaults.\n")
	p("- `redlock-5` is redlock on five masters, `redlock-1` on one; `redsync-5` on the same five; `redislock-1` on one of them; `redlock+rueidis-N` is redlock on rueidis clients (package rueidisadapter).\n")
	p("- `transport-1` is not a lock library: it is redlock's transport alone on one master (the pipeline a client of one master sends through), running redislock's two scripts (SET NX PX, compare-and-delete) with no quorum, fencing or identity check. It shows what pipelining one master's calls buys against one request per call.\n")
	p("- Uncontended: one attempt per op (`Acquire`, `TryLockContext`, `Obtain`). `key=fresh`: every op locks a key no other op uses (redsync gets a new `Mutex` per key, as its users do). `key=reused`: each goroutine locks its own key again and again. ns/op is wall time per lock+unlock pair over all goroutines.\n")
	p("- Every loop is bounded by b.N and by 20s per run.\n\n")

	// Uncontended.
	p("## Uncontended lock+unlock\n\n![throughput](docs/bench/throughput.png)\n\n")
	p("| Library | Goroutines | ns/op (median ± 95%% CI) | pairs/s | B/op | allocs/op | client CPU µs/op | server CPU µs/op | CPU ceiling pairs/s | server cmds/op | errors/op |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range goroutines {
		for _, lib := range lockUnlockLibs {
			n := fmt.Sprintf("LockUnlock/lib=%s/g=%d/key=fresh", lib, g)
			ns := res.get(n, "ns/op")
			p("| %s | %d | %s%s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lib, g, fmtDur(ns.median), ns.pct(),
				fmtNum(res.med(n, "ops/s"), 0), fmtNum(res.med(n, "B/op"), 0), fmtNum(res.med(n, "allocs/op"), 0),
				fmtNum(res.med(n, "cli-cpu-us/op"), 0), fmtNum(res.med(n, "srv-cpu-us/op"), 0), r.ceiling(n),
				fmtNum(res.med(n, "srv-cmds/op"), 1), fmtNum(res.med(n, "errs/op"), 4))
		}
	}
	p("\nclient CPU: user+system time of the benchmark process per op (getrusage; includes the benchmark loop and go-redis). server CPU: used_cpu_user+sys of the masters per op (INFO cpu). ")
	p("CPU ceiling: nproc / (client + server CPU per op), the rate at which the machine's cores would be busy with this client and these masters alone; the masters and the client share the cores, so this bounds the throughput.\n")
	p("\nThe same with `key=reused` (each goroutine re-locks its own key at once):\n\n")
	p("| Library | Goroutines | ns/op | pairs/s | allocs/op | server cmds/op | errors/op |\n|---|---|---|---|---|---|---|\n")
	for _, g := range []int{1, 16} {
		for _, lib := range []string{"redlock-5", "redsync-5"} {
			n := fmt.Sprintf("LockUnlock/lib=%s/g=%d/key=reused", lib, g)
			ns := res.get(n, "ns/op")
			p("| %s | %d | %s%s | %s | %s | %s | %s |\n", lib, g, fmtDur(ns.median), ns.pct(),
				fmtNum(res.med(n, "ops/s"), 0), fmtNum(res.med(n, "allocs/op"), 0),
				fmtNum(res.med(n, "srv-cmds/op"), 1), fmtNum(res.med(n, "errs/op"), 4))
		}
	}
	p("\nserver cmds/op: commands the masters executed per pair (INFO `total_commands_processed`), which includes the commands run inside Lua scripts; see [Redis commands](#redis-commands) for what clients send.\n\n")
	p("Ratios redlock-5 / redsync-5 (throughput; allocs):")
	for _, g := range goroutines {
		a, b := fmt.Sprintf("LockUnlock/lib=redlock-5/g=%d/key=fresh", g), fmt.Sprintf("LockUnlock/lib=redsync-5/g=%d/key=fresh", g)
		p(" g=%d: %s; %s.", g, fmtRatio(res.med(a, "ops/s")/res.med(b, "ops/s")), fmtRatio(res.med(a, "allocs/op")/res.med(b, "allocs/op")))
	}
	p("\n\n")

	// Contended.
	p("## Contended: 16 goroutines, one key\n\n![contended](docs/bench/contended.png)\n\n")
	p("Each goroutine has its own lock object (`mutex.Mutex` on one shared redlock client; its own `redsync.Mutex`) and loops: Lock with the library's retry, Unlock at once. ")
	p("redlock's mutex waits for release notifications (pub/sub) with a 5-200ms fallback timer; redsync sleeps 50-250ms between tries.\n\n")
	p("| Library | acquisitions/s | ns/op | B/op | allocs/op | client CPU µs/acq | server CPU µs/acq | CPU ceiling acq/s | server cmds/acq | client cmds/acq | gave up/acq | busiest goroutine's share |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, lib := range []string{"redlock-5", "redsync-5"} {
		n := "Contended/lib=" + lib + "/g=16"
		c := "Commands/op=contended/lib=" + lib
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lib, fmtNum(res.med(n, "ops/s"), 0), fmtDur(res.med(n, "ns/op")),
			fmtNum(res.med(n, "B/op"), 0), fmtNum(res.med(n, "allocs/op"), 0),
			fmtNum(res.med(n, "cli-cpu-us/op"), 0), fmtNum(res.med(n, "srv-cpu-us/op"), 0), r.ceiling(n),
			fmtNum(res.med(n, "srv-cmds/op"), 1),
			fmtNum(res.med(c, "cmds/op"), 1), fmtNum(res.med(n, "fails/op"), 3), fmtNum(res.med(n, "top-share"), 2))
	}
	p("\nA fair lock hands the key to a waiter (share near 1/16 = 0.06); a lock whose holder re-locks at once keeps it (share near 1). client cmds/acq comes from the MONITOR run of the Commands suite (slower masters, so a different mix of retries).\n\n")

	// Contended with work.
	p("## Contended with work: 16 goroutines, one key, 1ms held, 2ms outside\n\n")
	p("As above, but each goroutine holds the lock for 1ms of work and then works 2ms outside it, so that the releaser does not simply take the lock back. ")
	p("The limit is one hold plus one round trip per acquisition. Hand-off is the time from a release to the next holder's acquire. ")
	p("Hold is how long the holder's `time.Sleep(1ms)` took in fact: it ends late by about as long as the process stayed busy after it began, since Go's netpoller rounds a wait under 1ms up to 1ms (see Analysis).\n\n")
	p("| Library | acquisitions/s | hold | hand-off p50 | hand-off p99 | allocs/acq | server cmds/acq | gave up/acq | busiest goroutine's share |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, lib := range []string{"redlock-5", "redsync-5"} {
		n := "ContendedWork/lib=" + lib + "/g=16"
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lib, fmtNum(res.med(n, "ops/s"), 0), fmtDur(res.med(n, "hold-ns")),
			fmtDur(res.med(n, "handoff-p50-ns")), fmtDur(res.med(n, "handoff-p99-ns")),
			fmtNum(res.med(n, "allocs/op"), 0), fmtNum(res.med(n, "srv-cmds/op"), 1),
			fmtNum(res.med(n, "fails/op"), 3), fmtNum(res.med(n, "top-share"), 3))
	}
	p("\n")

	// Slow master.
	p("## One slow master\n\n![slow master](docs/bench/slow-master.png)\n\n")
	p("Five masters, each behind a toxiproxy proxy inside the benchmark process; `slow=20ms` adds a 20ms latency toxic to every reply of master 0. ")
	p("One goroutine, one attempt per op; the percentiles are of Acquire alone, ns/op includes the release.\n\n")
	p("| Library | Master 0 | p50 | p99 | ns/op | B/op | client CPU µs/op | server cmds/op | samples (b.N) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, lib := range []string{"redlock-5", "redsync-5"} {
		for _, slow := range []string{"0ms", "20ms"} {
			n := fmt.Sprintf("SlowMaster/lib=%s/slow=%s", lib, slow)
			state := "healthy"
			if slow != "0ms" {
				state = "+" + slow
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lib, state, fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns")),
				fmtDur(res.med(n, "ns/op")), fmtNum(res.med(n, "B/op"), 0), fmtNum(res.med(n, "cli-cpu-us/op"), 0),
				fmtNum(res.med(n, "srv-cmds/op"), 1), iterRange(res.iters[n]))
		}
	}
	for _, lib := range []string{"redlock-5", "redsync-5"} {
		h := res.med("SlowMaster/lib="+lib+"/slow=0ms", "p99-ns")
		s := res.med("SlowMaster/lib="+lib+"/slow=20ms", "p99-ns")
		h50 := res.med("SlowMaster/lib="+lib+"/slow=0ms", "p50-ns")
		s50 := res.med("SlowMaster/lib="+lib+"/slow=20ms", "p50-ns")
		p("\n%s: the slow master changes p50 by %+.0f%% and p99 by %+.0f%%.", lib, (s50/h50-1)*100, (s/h-1)*100)
	}
	p("\n\n")

	// Stopped master.
	p("## One master stopped\n\n")
	p("Five masters; master 0 healthy, paused (SIGSTOP: connections stay open, nothing is answered) or killed (connections refused), after a warm-up. ")
	p("16 goroutines on one key, on one client or spread over 2 or 4 (as over as many processes, whose acquires race: a split vote of two against two is decided only by master 0 unless it is known to be silent); ")
	p("contendedwork holds the lock 1ms and works 2ms outside it. lock is one goroutine's uncontended acquire.\n\n")
	p("| Op | healthy acq/s | paused acq/s | killed acq/s | paused / healthy | killed / healthy |\n|---|---|---|---|---|---|\n")
	for _, op := range stoppedContended {
		n := func(state string) float64 { return res.med("StoppedMaster/master="+state+"/op="+op, "ops/s") }
		p("| %s | %s | %s | %s | %s | %s |\n", op, fmtNum(n("healthy"), 0), fmtNum(n("paused"), 0), fmtNum(n("killed"), 0),
			fmtRatio(n("paused")/n("healthy")), fmtRatio(n("killed")/n("healthy")))
	}
	p("\n| Master 0 | acquire p50 | acquire p99 |\n|---|---|---|\n")
	for _, state := range []string{"healthy", "paused", "killed"} {
		n := "StoppedMaster/master=" + state + "/op=lock"
		p("| %s | %s | %s |\n", state, fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns")))
	}
	p("\n")

	// Masters.
	p("## Number of masters\n\n![latency vs masters](docs/bench/latency-vs-masters.png)\n\n")
	p("One goroutine, one lock+unlock pair per op; percentiles are of the pair.\n\n")
	p("| Masters | redlock p50 | redlock p99 | redlock allocs/op | redlock CPU µs/op client + server | redsync p50 | redsync p99 | redsync allocs/op | redsync CPU µs/op client + server | p50 redlock / redsync |\n|---|---|---|---|---|---|---|---|---|---|\n")
	cpu := func(n string) string {
		return fmtNum(res.med(n, "cli-cpu-us/op"), 0) + " + " + fmtNum(res.med(n, "srv-cpu-us/op"), 0)
	}
	for _, n := range mastersN {
		a, b := fmt.Sprintf("Masters/lib=redlock/masters=%d", n), fmt.Sprintf("Masters/lib=redsync/masters=%d", n)
		p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, fmtDur(res.med(a, "p50-ns")), fmtDur(res.med(a, "p99-ns")), fmtNum(res.med(a, "allocs/op"), 0), cpu(a),
			fmtDur(res.med(b, "p50-ns")), fmtDur(res.med(b, "p99-ns")), fmtNum(res.med(b, "allocs/op"), 0), cpu(b),
			fmtRatio(res.med(a, "p50-ns")/res.med(b, "p50-ns")))
	}
	p("\n")

	// Replicated masters.
	p("## Replicated masters\n\n")
	p("Five masters without replicas, and five others with one replica each: there every acquire, re-entry and extend waits (`WAIT`, pipelined right behind its script) until the replica took the write. ")
	p("One lock+unlock pair per op on fresh keys; g=1: one goroutine, percentiles of the pair; g=16: sixteen. server cmds/op counts the masters' commands, the replicas' REPLCONF ACKs included.\n\n")
	p("| Replicas | Goroutines | p50 | p99 | ns/op | ops/s | allocs/op | client CPU µs/op | server cmds/op |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range []int{1, 16} {
		for _, replicas := range []int{0, 1} {
			n := fmt.Sprintf("Replicated/replicas=%d/g=%d", replicas, g)
			p50, p99, ops := "-", "-", "-"
			if g == 1 {
				p50, p99 = fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns"))
			} else {
				ops = fmtNum(res.med(n, "ops/s"), 0)
			}
			p("| %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", replicas, g, p50, p99, fmtDur(res.med(n, "ns/op")), ops,
				fmtNum(res.med(n, "allocs/op"), 0), fmtNum(res.med(n, "cli-cpu-us/op"), 0), fmtNum(res.med(n, "srv-cmds/op"), 1))
		}
	}
	p("\n")

	// Multi-resource lock.
	p("## Multi-resource lock\n\n")
	p("One goroutine on five masters, 4 fresh names per op, acquire+release: `multi.Mutex` takes all in one round per master; redsync takes 4 mutexes one by one in sorted order (the usual way to avoid deadlock with single locks), one attempt each.\n\n")
	p("| Library | p50 | p99 | allocs/op |\n|---|---|---|---|\n")
	for _, lib := range []string{"redlock-multi", "redsync-sorted"} {
		n := "MultiLock/lib=" + lib + "/names=4"
		p("| %s | %s | %s | %s |\n", lib, fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns")), fmtNum(res.med(n, "allocs/op"), 0))
	}
	p("\n")

	r.writeFailover(w)
	r.writeSemaphore(w)
	r.writeFairHandoff(w)
	r.writeCommands(w)

	if pr := r.profile; pr != nil {
		p("## Profile: %s\n\n", pr.Bench)
		p("Client process only (the masters are separate processes): `-benchtime 3s -cpuprofile`, then a separate `-benchtime 1s -memprofile -memprofilerate 1` run; `go tool pprof -top`. bench.test's own loop is in these profiles too.\n\n")
		p("<details><summary>CPU, flat</summary>\n\n```\n%s```\n</details>\n\n", pr.CPU)
		p("<details><summary>CPU, cumulative, selected functions (redlock, stack growth, go-redis I/O, contexts)</summary>\n\n```\n%s```\n</details>\n\n", pr.CPUCum)
		p("<details><summary>Allocations (objects), flat</summary>\n\n```\n%s```\n</details>\n\n", pr.Alloc)
	}

	if analysis, err := os.ReadFile(filepath.Join(r.repo, "bench", "ANALYSIS.md")); err == nil {
		p("%s\n", strings.TrimSpace(string(analysis)))
		p("\n")
	}

	p("## benchstat\n\n")
	p("`go tool benchstat` (golang.org/x/perf, pinned in bench/go.mod) on the raw output; `~` means no significant difference (p >= 0.05), and with fewer than 5 repetitions no p-value can pass.\n\n")
	for _, b := range r.benchstat {
		p("### %s\n\n`benchstat %s`\n\n```\n%s```\n\n", b.title, b.args, b.text)
	}
}

// writeFailover: how long an election is without a leader when its
// leader resigns or is killed.
func (r *report) writeFailover(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	res := r.res
	p("## Leader election failover\n\n")
	p("Package `election` on five masters, TTL 1s. From the leader's going to the return of the next candidate's `Campaign`, which waits in another client (as in another process). ")
	p("`resign`: the leader calls `Resign`, whose release wakes the candidate. ")
	p("`killed`: the leader is a child process (the bench's test binary) that gets SIGKILL while it leads and renews; nothing is released, so the candidate leads once the lock expired: after what was left of its TTL, plus up to one fallback retry (`MaxRetryDelay`, 200ms). ")
	p("Late: the share of failovers past that bound.\n\n")
	p("| Leader | p50 | p99 | mean | bound | late | samples (b.N) |\n|---|---|---|---|---|---|---|\n")
	for _, how := range []string{"resign", "killed"} {
		n := failover(how)
		bound, late := "-", "-"
		if how == "killed" {
			bound, late = fmtDur(res.med(n, "bound-ns")), fmtNum(res.med(n, "late/op"), 2)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", how, fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns")),
			fmtDur(res.med(n, "ns/op")), bound, late, iterRange(res.iters[n]))
	}
	p("\n")
}

// writeCommands: client commands per op (MONITOR) with a per-script split.
func (r *report) writeCommands(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	res := r.res
	scripts := scriptNames(r.repo)
	p("## Redis commands\n\n")
	p("Counted with MONITOR on every master over one run of 300 ops (the `Commands` suite; MONITOR slows the masters, so its timings are not used). ")
	p("client cmds/op counts what clients sent (connection set-up, HELLO, excluded); script cmds/op what Lua scripts ran inside those. ")
	p("The same runs' INFO commandstats deltas are in `bench/results/bench.txt.stats.jsonl`.\n\n")
	p("| Op | Library | Masters N | client cmds/op | 2N | script cmds/op | errors/op | client commands per op, by command |\n|---|---|---|---|---|---|---|---|\n")
	row := func(op, lib string, n int) {
		name := fmt.Sprintf("Commands/op=%s/lib=%s-%d", op, lib, n)
		if !res.get(name, "cmds/op").ok() {
			return
		}
		by := ""
		if st, ok := res.stats[name]; ok && st.Ops > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(st.ByName)) {
				if k == "hello" {
					continue
				}
				label := k
				if s, ok := scripts[strings.TrimPrefix(k, "evalsha:")]; ok {
					label = "evalsha " + s
				} else if s, ok := strings.CutPrefix(k, "fcall:"); ok {
					label = "fcall " + s
				}
				parts = append(parts, fmt.Sprintf("%s %.2f", label, float64(st.ByName[k])/float64(st.Ops)))
			}
			by = strings.Join(parts, ", ")
		}
		p("| %s | %s | %d | %s | %d | %s | %s | %s |\n", op, lib, n, fmtNum(res.med(name, "cmds/op"), 2), 2*n,
			fmtNum(res.med(name, "script-cmds/op"), 1), fmtNum(res.med(name, "errs/op"), 3), by)
	}
	for _, n := range mastersN {
		row("lockunlock", "redlock", n)
		row("lockunlock", "redsync", n)
	}
	row("lockunlock", "redislock", 1)
	row("relock", "redlock", 5)
	row("relock", "redsync", 5)
	row("contended", "redlock", 5)
	row("contended", "redsync", 5)
	p("\n`lockunlock` locks a fresh key per op; `relock` locks one key again and again, right after releasing it. ")
	p("For `contended`, an op is one acquisition: its failed attempts, the acquire that won and its release. Script names come from the SHA1 of each section of scripts.lua.\n\n")
}

// scriptNames maps the SHA1 prefix of each section of the root package's
// scripts.lua to its name ("acquire", ...).
func scriptNames(repo string) map[string]string {
	data, err := os.ReadFile(filepath.Join(repo, "scripts.lua"))
	if err != nil {
		return nil
	}
	names := map[string]string{}
	re := regexp.MustCompile(`(?m)^--- (\S+)\n`)
	idx := re.FindAllSubmatchIndex(data, -1)
	for i, m := range idx {
		end := len(data)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		sum := sha1.Sum(data[m[1]:end])
		names[hex.EncodeToString(sum[:])[:8]] = "redlock " + string(data[m[2]:m[3]])
	}
	return names
}

// ceiling is nproc divided by the CPU time (client + servers) per op.
func (r *report) ceiling(name string) string {
	cpu := r.res.med(name, "cli-cpu-us/op") + r.res.med(name, "srv-cpu-us/op")
	var n float64
	if _, err := fmt.Sscan(r.machine.NProc, &n); err != nil || n <= 0 || !(cpu > 0) {
		return "–"
	}
	return fmt.Sprintf("%.0f", n*1e6/cpu)
}

func iterRange(its []int) string {
	if len(its) == 0 {
		return "–"
	}
	lo, hi := slices.Min(its), slices.Max(its)
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}
