package bench

// The benchmarks. Each top-level Benchmark starts its own masters (local
// redis-server processes on 127.0.0.1) once and runs its cases as
// sub-benchmarks named key=value, so that benchstat can compare them
// (for example -col /lib).
//
// Custom metrics:
//   ops/s     successful lock+unlock pairs (or acquisitions) per second
//   cmds/op   commands the masters received per op (INFO total_commands_processed)
//   p50-ns, p99-ns  latency percentiles of the timed part of each op
//   errs/op   failed ops (should be 0; a non-zero value flags a broken run)
//
// If the environment variable REDLOCK_BENCH_STATS names a file, every run
// appends one JSON line with the INFO commandstats breakdown to it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/integration"
)

// runTimeout bounds one run of a sub-benchmark (one b.N), whatever b.N is.
const runTimeout = 20 * time.Second

// masters starts n masters for the benchmark and returns clients to them
// (NewRedisClient settings) and a command counter. Everything is stopped
// when the benchmark ends.
func masters(b *testing.B, n int) (*integration.Cluster, []*redis.Client, *CommandCounter) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := integration.StartProcesses(ctx, n, integration.ProcessOptions{})
	if errors.Is(err, integration.ErrNoRedisServer) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := cl.Close(); err != nil {
			b.Error(err)
		}
	})
	clients := NewRedisClients(cl.Addrs())
	b.Cleanup(func() { _ = CloseAll(clients) })
	admins := make([]*redis.Client, n)
	for i := range admins {
		admins[i] = cl.Admin(i)
	}
	cc, err := NewCommandCounter(ctx, admins)
	if err != nil {
		b.Fatal(err)
	}
	return cl, clients, cc
}

var runSeq atomic.Int64

// keys says which key each op locks.
type keys struct {
	perOp []string // fresh: a new key for every op, by op index
	perG  []string // reused: one key per goroutine, locked again and again
}

func (k keys) key(op int64, g int) string {
	if k.perOp != nil {
		return k.perOp[op]
	}
	return k.perG[g]
}

// freshKeys returns n keys that no other op or run uses; they are made
// before the timer starts.
func freshKeys(b *testing.B, n int) keys {
	run := runSeq.Add(1)
	k := keys{perOp: make([]string, n)}
	for i := range k.perOp {
		k.perOp[i] = fmt.Sprintf("bench:%s:%d:%d", b.Name(), run, i)
	}
	return k
}

// reusedKeys returns one key per goroutine.
func reusedKeys(b *testing.B, g int) keys {
	run := runSeq.Add(1)
	k := keys{perG: make([]string, g)}
	for i := range k.perG {
		k.perG[i] = fmt.Sprintf("bench:%s:%d:g%d", b.Name(), run, i)
	}
	return k
}

// meter counts the commands of a run. finish closes the locker first,
// waiting for its background calls, so that every command is counted.
type meter interface {
	finish(ops int64)
}

// infoMeter reads INFO before and after (cheap enough for timed runs) and
// reports srv-cmds/op: commands the masters executed per op, including
// those inside Lua scripts, without connection set-up (HELLO);
// srv-cpu-us/op: CPU time of the masters per op; cli-cpu-us/op: CPU time of
// this process per op (the benchmark's own loop included).
type infoMeter struct {
	b       *testing.B
	cc      *CommandCounter
	locker  Locker
	before  Snapshot
	selfCPU time.Duration
}

func startInfo(b *testing.B, cc *CommandCounter, l Locker) meter {
	b.Helper()
	s, err := cc.Snapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return &infoMeter{b: b, cc: cc, locker: l, before: s, selfCPU: ProcessCPU()}
}

func (m *infoMeter) finish(ops int64) {
	b := m.b
	b.Helper()
	if err := m.locker.Close(); err != nil {
		b.Error(err)
	}
	self := ProcessCPU() - m.selfCPU
	after, err := m.cc.Snapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	d := m.cc.Diff(m.before, after)
	total := d.Total - d.ByName["hello"]
	if ops > 0 {
		b.ReportMetric(float64(total)/float64(ops), "srv-cmds/op")
		b.ReportMetric(float64(d.CPU.Microseconds())/float64(ops), "srv-cpu-us/op")
		b.ReportMetric(float64(self.Microseconds())/float64(ops), "cli-cpu-us/op")
	}
	recordStats(b, statsLine{Kind: "info", Ops: ops, Total: total, ByName: d.ByName})
}

// monitorMeter watches the masters with MONITOR, which slows them down,
// and reports cmds/op: commands clients sent per op, without connection
// set-up (HELLO); and script-cmds/op: commands Lua scripts ran per op.
type monitorMeter struct {
	b      *testing.B
	mons   Monitors
	locker Locker
}

func startMonitor(b *testing.B, addrs []string, l Locker) meter {
	b.Helper()
	mons, err := StartMonitors(context.Background(), addrs)
	if err != nil {
		b.Fatal(err)
	}
	return &monitorMeter{b: b, mons: mons, locker: l}
}

func (m *monitorMeter) finish(ops int64) {
	b := m.b
	b.Helper()
	if err := m.locker.Close(); err != nil {
		b.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := m.mons.Stop(ctx)
	if err != nil {
		b.Fatal(err)
	}
	total := got.Sum("hello")
	if ops > 0 {
		b.ReportMetric(float64(total)/float64(ops), "cmds/op")
		b.ReportMetric(float64(got.InScript)/float64(ops), "script-cmds/op")
	}
	recordStats(b, statsLine{Kind: "monitor", Ops: ops, Total: total, ByName: got.Top, InScript: got.InScript})
}

// statsLine is one record of REDLOCK_BENCH_STATS.
type statsLine struct {
	Name     string           `json:"name"`
	N        int              `json:"n"`
	Kind     string           `json:"kind"` // "info" or "monitor"
	Ops      int64            `json:"ops"`
	Total    int64            `json:"total"`
	ByName   map[string]int64 `json:"by_name"`
	InScript int64            `json:"in_script,omitempty"`
}

var statsMu sync.Mutex

func recordStats(b *testing.B, line statsLine) {
	path := os.Getenv("REDLOCK_BENCH_STATS")
	if path == "" {
		return
	}
	line.Name, line.N = b.Name(), b.N
	data, err := json.Marshal(line)
	if err != nil {
		b.Fatal(err)
	}
	statsMu.Lock()
	defer statsMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
}

func newLocker(b *testing.B, lib string, clients []*redis.Client) Locker {
	b.Helper()
	l, err := NewLocker(lib, clients)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func workers(b *testing.B, l Locker, g int, contend bool) []Worker {
	b.Helper()
	ws := make([]Worker, g)
	key := fmt.Sprintf("bench:%s:%d:contended", b.Name(), runSeq.Add(1))
	for i := range ws {
		if !contend {
			ws[i] = l.Worker()
			continue
		}
		var err error
		if ws[i], err = l.Contender(key); err != nil {
			b.Fatal(err)
		}
	}
	return ws
}

// warm runs a few single-attempt lock+unlock pairs on fresh keys from g
// goroutines at once, so that the connection pools hold enough connections
// and the masters have the scripts cached before measuring.
func warm(b *testing.B, l Locker, g int) {
	b.Helper()
	const pairs = 3
	ks := freshKeys(b, g*pairs)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i, w := range workers(b, l, g, false) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for j := range pairs {
				if w.Lock(ctx, ks.key(int64(i*pairs+j), 0)) != nil || w.Unlock(ctx) != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Logf("warm-up: %d failed lock+unlock pairs", n)
	}
}

// libCase is one library on the first n masters.
type libCase struct {
	lib string
	n   int
}

func (c libCase) String() string { return fmt.Sprintf("%s-%d", c.lib, c.n) }

// parallel runs b.N lock+unlock pairs spread over the workers, one
// goroutine each, and returns how many pairs it started and how many
// failed. The timer covers exactly the loop.
func parallel(b *testing.B, ws []Worker, ks keys) (ops, errs int64) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var next, done, failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g, w := range ws {
		wg.Go(func() {
			for op := next.Add(1) - 1; op < int64(b.N) && ctx.Err() == nil; op = next.Add(1) - 1 {
				done.Add(1)
				if w.Lock(ctx, ks.key(op, g)) != nil {
					failed.Add(1)
					continue
				}
				if w.Unlock(ctx) != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	return done.Load(), failed.Load()
}

// contention is the outcome of contend.
type contention struct {
	acquired int64           // successful Lock calls
	fails    int64           // Lock calls that gave up while the run went on
	errs     int64           // failed Unlock calls
	top      int64           // acquisitions of the busiest worker
	handoffs []time.Duration // from an Unlock call to the next Lock's return
	held     time.Duration   // the holders' sleeps of work.hold, as long as they took
}

// work is what a contender does with and without the lock.
type work struct {
	hold, outside time.Duration // 0: release at once, try again at once
}

// contend lets every worker (Contenders on one key) lock, hold the lock
// for w.hold, unlock, and wait w.outside, in a loop until b.N acquisitions
// in all. The timer covers exactly the loop.
func contend(b *testing.B, ws []Worker, w work) contention {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var acquired, fails, errs atomic.Int64
	var released atomic.Int64 // time of the last Unlock call not yet handed off, as UnixNano
	counts := make([]int64, len(ws))
	handoffs := make([][]time.Duration, len(ws))
	held := make([]time.Duration, len(ws))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, wk := range ws {
		wg.Go(func() {
			for ctx.Err() == nil && acquired.Load() < int64(b.N) {
				if err := wk.Lock(ctx, ""); err != nil {
					if ctx.Err() == nil {
						fails.Add(1)
					}
					continue
				}
				if r := released.Swap(0); r != 0 {
					handoffs[i] = append(handoffs[i], time.Duration(time.Now().UnixNano()-r))
				}
				counts[i]++
				n := acquired.Add(1)
				if w.hold > 0 {
					slept := time.Now()
					time.Sleep(w.hold)
					held[i] += time.Since(slept)
				}
				// Release even when the run has ended meanwhile.
				uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
				released.Store(time.Now().UnixNano())
				if wk.Unlock(uctx) != nil {
					errs.Add(1)
				}
				ucancel()
				if n >= int64(b.N) {
					cancel() // wake the workers that wait between tries
				}
				if w.outside > 0 {
					time.Sleep(w.outside)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	c := contention{acquired: acquired.Load(), fails: fails.Load(), errs: errs.Load()}
	for i, k := range counts {
		c.top = max(c.top, k)
		c.handoffs = append(c.handoffs, handoffs[i]...)
		c.held += held[i]
	}
	return c
}

func (c contention) report(b *testing.B) {
	n := float64(max(c.acquired, 1))
	b.ReportMetric(float64(c.acquired)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(c.fails)/n, "fails/op")
	b.ReportMetric(float64(c.errs)/n, "errs/op")
	b.ReportMetric(float64(c.top)/n, "top-share")
	if c.held > 0 { // with work: a sleep takes longer than asked (see ANALYSIS.md, "The hold")
		b.ReportMetric(float64(c.held)/n, "hold-ns")
	}
	if len(c.handoffs) > 0 {
		slices.Sort(c.handoffs)
		h := c.handoffs
		b.ReportMetric(float64(h[len(h)/2]), "handoff-p50-ns")
		b.ReportMetric(float64(h[(len(h)*99+99)/100-1]), "handoff-p99-ns")
	}
}

// sequential runs b.N lock+unlock pairs from one goroutine and returns the
// latency of every Lock (lockOnly) or of every pair, and the failures.
// The timer covers exactly the loop.
func sequential(b *testing.B, w Worker, ks keys, lockOnly bool) (lat []time.Duration, errs int64) {
	lat = make([]time.Duration, 0, b.N)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for op := range int64(b.N) {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		err := w.Lock(ctx, ks.key(op, 0))
		if lockOnly {
			lat = append(lat, time.Since(start))
		}
		if err != nil {
			errs++
			continue
		}
		if w.Unlock(ctx) != nil {
			errs++
		}
		if !lockOnly {
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	return lat, errs
}

func reportLatency(b *testing.B, lat []time.Duration, errs int64) {
	b.ReportMetric(float64(Percentile(lat, 50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(Percentile(lat, 99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(errs)/float64(max(len(lat), 1)), "errs/op")
}

// BenchmarkLockUnlock measures one uncontended lock+unlock pair (one
// attempt) from 1, 16 and 64 goroutines. key=fresh: every op locks a key
// no one else uses. key=reused: each goroutine locks its own key again
// and again, so an op can meet the stragglers of its own previous release.
// ns/op is wall time per pair over all goroutines (ops/s = 1e9 / ns/op).
func BenchmarkLockUnlock(b *testing.B) {
	_, clients, cc := masters(b, 5)
	type lockUnlockCase struct {
		libCase
		g      int
		reused bool
	}
	var cases []lockUnlockCase
	for _, g := range []int{1, 16, 64} {
		for _, c := range []libCase{{Redlock, 5}, {RedlockRueidis, 5}, {Redlock, 1}, {RedlockRueidis, 1}, {Redsync, 5}, {Redislock, 1}, {Transport, 1}} {
			cases = append(cases, lockUnlockCase{c, g, false})
		}
	}
	for _, g := range []int{1, 16} {
		for _, c := range []libCase{{Redlock, 5}, {Redsync, 5}} {
			cases = append(cases, lockUnlockCase{c, g, true})
		}
	}
	for _, c := range cases {
		mode := "fresh"
		if c.reused {
			mode = "reused"
		}
		b.Run(fmt.Sprintf("lib=%s/g=%d/key=%s", c.libCase, c.g, mode), func(b *testing.B) {
			l := newLocker(b, c.lib, clients[:c.n])
			ws := workers(b, l, c.g, false)
			warm(b, l, c.g)
			ks := reusedKeys(b, c.g)
			if !c.reused {
				ks = freshKeys(b, b.N)
			}
			m := startInfo(b, cc.Prefix(c.n), l)
			ops, errs := parallel(b, ws, ks)
			m.finish(ops)
			b.ReportMetric(float64(ops-errs)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(errs)/float64(max(ops, 1)), "errs/op")
		})
	}
}

// BenchmarkContended measures 16 goroutines taking turns on ONE key, each
// with its own lock object and the library's own retry loop: redlock
// through package mutex, redsync with its defaults (32 tries, 50..250ms
// apart). One op is one acquisition plus its release; the holder releases
// at once and tries again.
//
// Extra metrics: fails/op counts Lock calls that gave up (redsync after 32
// tries); top-share is the share of acquisitions the busiest goroutine got.
func BenchmarkContended(b *testing.B) { benchContended(b, work{}) }

// benchContended runs 16 goroutines on one key with w, for redlock and
// redsync on five masters.
func benchContended(b *testing.B, w work) {
	_, clients, cc := masters(b, 5)
	const g = 16
	for _, c := range []libCase{{Redlock, 5}, {Redsync, 5}} {
		b.Run(fmt.Sprintf("lib=%s/g=%d", c, g), func(b *testing.B) {
			l := newLocker(b, c.lib, clients[:c.n])
			ws := workers(b, l, g, true)
			warm(b, l, g)
			m := startInfo(b, cc.Prefix(c.n), l)
			res := contend(b, ws, w)
			m.finish(res.acquired)
			res.report(b)
		})
	}
}

// BenchmarkContendedWork is BenchmarkContended with work: each goroutine
// holds the lock for 1ms, then works 2ms outside it, so that the releaser
// does not simply take the lock back. The limit is one hold plus one round
// trip per acquisition; handoff-p50-ns and handoff-p99-ns are the time
// from a release to the next holder's acquire, where wake-on-release
// shows.
func BenchmarkContendedWork(b *testing.B) {
	benchContended(b, work{hold: time.Millisecond, outside: 2 * time.Millisecond})
}

// BenchmarkSlowMaster measures acquire latency (p50-ns, p99-ns of Lock;
// ns/op includes the release) on five masters behind in-process toxiproxy
// proxies, all healthy (slow=0ms) and with every reply of master 0 delayed
// by 20ms (slow=20ms). One goroutine, one attempt per op, fresh keys.
func BenchmarkSlowMaster(b *testing.B) {
	cl, _, cc := masters(b, 5)
	px, err := StartProxies(cl.Addrs())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = px.Close() })
	clients := NewRedisClients(px.Addrs())
	b.Cleanup(func() { _ = CloseAll(clients) })
	for _, c := range []libCase{{Redlock, 5}, {Redsync, 5}} {
		for _, slow := range []time.Duration{0, 20 * time.Millisecond} {
			b.Run(fmt.Sprintf("lib=%s/slow=%dms", c, slow.Milliseconds()), func(b *testing.B) {
				if err := px.Slow(0, slow); err != nil {
					b.Fatal(err)
				}
				defer func() {
					if err := px.Slow(0, 0); err != nil {
						b.Error(err)
					}
				}()
				l := newLocker(b, c.lib, clients[:c.n])
				ws := workers(b, l, 1, false)
				warm(b, l, 1)
				ks := freshKeys(b, b.N)
				m := startInfo(b, cc.Prefix(c.n), l)
				lat, errs := sequential(b, ws[0], ks, true)
				m.finish(int64(len(lat)))
				reportLatency(b, lat, errs)
			})
		}
	}
}

// BenchmarkMasters measures one lock+unlock pair from one goroutine, on
// fresh keys, as the number of masters grows; p50-ns and p99-ns are of
// the pair.
func BenchmarkMasters(b *testing.B) {
	_, clients, cc := masters(b, 9)
	for _, lib := range []string{Redlock, Redsync} {
		for _, n := range []int{1, 3, 5, 7, 9} {
			b.Run(fmt.Sprintf("lib=%s/masters=%d", lib, n), func(b *testing.B) {
				l := newLocker(b, lib, clients[:n])
				ws := workers(b, l, 1, false)
				warm(b, l, 1)
				ks := freshKeys(b, b.N)
				m := startInfo(b, cc.Prefix(n), l)
				lat, errs := sequential(b, ws[0], ks, false)
				m.finish(int64(len(lat)))
				reportLatency(b, lat, errs)
			})
		}
	}
}

// BenchmarkReplicated measures what replicas cost redlock: one lock+unlock
// pair on fresh keys, on five masters without replicas (replicas=0) and on
// five others with one replica each (replicas=1), where every acquire
// waits (WAIT, pipelined behind it) until the replica took it. g=1: one
// goroutine, percentiles of the pair; g=16: sixteen, ns/op is wall time
// per pair.
func BenchmarkReplicated(b *testing.B) {
	_, plain, cc := masters(b, 5)
	replicated, rcc := mastersWithReplicas(b, 5)
	for _, replicas := range []int{0, 1} {
		clients, counter := plain, cc
		if replicas == 1 {
			clients, counter = replicated, rcc
		}
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("replicas=%d/g=%d", replicas, g), func(b *testing.B) {
				l := newLocker(b, Redlock, clients)
				ws := workers(b, l, g, false)
				warm(b, l, g)
				ks := freshKeys(b, b.N)
				m := startInfo(b, counter, l)
				if g == 1 {
					lat, errs := sequential(b, ws[0], ks, false)
					m.finish(int64(len(lat)))
					reportLatency(b, lat, errs)
					return
				}
				ops, errs := parallel(b, ws, ks)
				m.finish(ops)
				b.ReportMetric(float64(ops-errs)/b.Elapsed().Seconds(), "ops/s")
				b.ReportMetric(float64(errs)/float64(max(ops, 1)), "errs/op")
			})
		}
	}
}

// mastersWithReplicas is masters where each master has one replica, in
// sync before it returns.
func mastersWithReplicas(b *testing.B, n int) ([]*redis.Client, *CommandCounter) {
	b.Helper()
	cl, clients, cc := masters(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	replicas, err := integration.StartProcesses(ctx, n, integration.ProcessOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := replicas.Close(); err != nil {
			b.Error(err)
		}
	})
	for i, m := range cl.Masters {
		host, port, err := net.SplitHostPort(m.Addr())
		if err != nil {
			b.Fatal(err)
		}
		if err := cl.Admin(i).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			b.Fatal(err)
		}
		if err := replicas.Admin(i).Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		for {
			info, err := replicas.Admin(i).Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if ctx.Err() != nil {
				b.Fatalf("replica %d never synced: %v", i, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return clients, cc
}

// BenchmarkCommands counts the commands clients send (cmds/op) with
// MONITOR, which slows the masters: its timings are not comparable with
// the other benchmarks'. op=lockunlock is one uncontended lock+unlock pair
// on a fresh key from one goroutine; op=relock the same on one key locked
// again and again; op=contended one acquisition (with its failed tries and
// its release) among 16 goroutines on one key, as in BenchmarkContended.
func BenchmarkCommands(b *testing.B) {
	cl, clients, _ := masters(b, 9)
	addrs := cl.Addrs()
	seq := func(op string, c libCase, reused bool) {
		b.Run(fmt.Sprintf("op=%s/lib=%s", op, c), func(b *testing.B) {
			l := newLocker(b, c.lib, clients[:c.n])
			ws := workers(b, l, 1, false)
			warm(b, l, 1)
			ks := reusedKeys(b, 1)
			if !reused {
				ks = freshKeys(b, b.N)
			}
			m := startMonitor(b, addrs[:c.n], l)
			lat, errs := sequential(b, ws[0], ks, false)
			m.finish(int64(len(lat)) - errs)
			b.ReportMetric(float64(errs)/float64(max(len(lat), 1)), "errs/op")
		})
	}
	for _, n := range []int{1, 3, 5, 7, 9} {
		seq("lockunlock", libCase{Redlock, n}, false)
		seq("lockunlock", libCase{Redsync, n}, false)
	}
	seq("lockunlock", libCase{Redislock, 1}, false)
	seq("lockunlock", libCase{RedlockUnfenced, 5}, false)
	seq("relock", libCase{Redlock, 5}, true)
	seq("relock", libCase{Redsync, 5}, true)
	const g = 16
	for _, c := range []libCase{{Redlock, 5}, {Redsync, 5}} {
		b.Run(fmt.Sprintf("op=contended/lib=%s", c), func(b *testing.B) {
			l := newLocker(b, c.lib, clients[:c.n])
			ws := workers(b, l, g, true)
			warm(b, l, g)
			m := startMonitor(b, addrs[:c.n], l)
			res := contend(b, ws, work{})
			m.finish(res.acquired)
			res.report(b)
		})
	}
}

// BenchmarkStoppedMaster measures redlock on five masters with master 0
// healthy, paused (SIGSTOP: connections open, nothing answered) or killed
// (connections refused). Each state gets masters of its own, stopped
// after the first warm-up. A second warm-up, and for the contended ops
// three untimed turns of every goroutine, let the clients find master 0
// silent, as they would in a steady state.
//
//   - op=contended, op=contendedwork: BenchmarkContended and
//     BenchmarkContendedWork, 16 goroutines of one client on one key.
//     They take turns locally, so their acquires seldom race.
//   - clients=2, clients=4: the same 16 goroutines spread over 2 or 4
//     clients, as over as many processes. Their acquires race: some
//     rounds are split votes (two masters agree, two refuse), which only
//     master 0 could decide.
//   - op=lock: one goroutine's uncontended acquire on fresh keys (p50-ns,
//     p99-ns of Lock; ns/op includes the release).
func BenchmarkStoppedMaster(b *testing.B) {
	stoppedOps := []string{"contended", "contendedwork", "contended/clients=2", "contendedwork/clients=2",
		"contended/clients=4", "contendedwork/clients=4", "lock"}
	for _, state := range []string{"healthy", "paused", "killed"} {
		b.Run("master="+state, func(b *testing.B) {
			cl, clients, _ := masters(b, 5)
			stop := func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var err error
				switch m := cl.Masters[0]; state {
				case "paused":
					err = m.Pause(ctx)
				case "killed":
					err = m.Kill(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			var stopped sync.Once
			for _, op := range stoppedOps {
				b.Run("op="+op, func(b *testing.B) {
					g, nclients := 16, 1
					if op == "lock" {
						g = 1
					}
					if _, n, ok := strings.Cut(op, "/clients="); ok {
						nclients, _ = strconv.Atoi(n)
					}
					ls := make([]Locker, nclients)
					for i := range ls {
						ls[i] = newLocker(b, Redlock, clients)
						defer ls[i].Close()
					}
					for _, l := range ls {
						warm(b, l, g/nclients)
					}
					stopped.Do(func() { stop(b) })
					for _, l := range ls {
						warm(b, l, g/nclients)
					}
					if op == "lock" {
						ws := workers(b, ls[0], 1, false)
						lat, errs := sequential(b, ws[0], freshKeys(b, b.N), true)
						reportLatency(b, lat, errs)
						return
					}
					ws := make([]Worker, 0, g)
					for _, l := range ls {
						ws = append(ws, contenders(b, l, "bench:stopped:"+b.Name(), g/nclients)...)
					}
					settle(ws, 3)
					w := work{}
					if strings.HasPrefix(op, "contendedwork") {
						w = work{hold: time.Millisecond, outside: 2 * time.Millisecond}
					}
					contend(b, ws, w).report(b)
				})
			}
		})
	}
}

// settle lets every worker lock and unlock n times, at once, untimed.
func settle(ws []Worker, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			for range n {
				if w.Lock(ctx, "") == nil {
					_ = w.Unlock(ctx)
				}
			}
		})
	}
	wg.Wait()
}

// contenders returns g Workers of l on key, each retrying with the
// library's own policy.
func contenders(b *testing.B, l Locker, key string, g int) []Worker {
	b.Helper()
	ws := make([]Worker, g)
	for i := range ws {
		var err error
		if ws[i], err = l.Contender(key); err != nil {
			b.Fatal(err)
		}
	}
	return ws
}
