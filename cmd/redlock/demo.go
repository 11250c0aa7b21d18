package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/redlocktest"
)

// Tunables of the demo that are not flags.
const (
	localMasters  = 5
	demoKey       = "redlock-demo"
	holdFor       = 200 * time.Microsecond // the read-modify-write's pause
	minBackoff    = time.Millisecond       // after a failed attempt, doubling...
	maxBackoff    = 32 * time.Millisecond  // ...up to this, jittered
	maxThink      = time.Millisecond       // random pause after an unlock
	unlockTimeout = time.Second
	pingTimeout   = 200 * time.Millisecond // a fresh connection and one PING
)

// config is one demo run.
type config struct {
	workers  int
	duration time.Duration
	ttl      time.Duration
	key      string

	// masters are running masters to use, with no faults injected; when
	// empty, run starts localMasters masters and injects faults: processes
	// of redis-server where it is in PATH, else in-process ones.
	masters []string
	// cluster, if not nil, is used instead of starting masters (tests); run
	// injects faults into it but does not close it.
	cluster *harness.Cluster
}

func defaultConfig() config {
	return config{workers: 8, duration: 12 * time.Second, ttl: time.Second, key: demoKey}
}

func (c config) validate() error {
	switch {
	case c.workers < 1:
		return fmt.Errorf("-workers %d: need at least 1", c.workers)
	case c.duration <= 0:
		return fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.ttl < 4*redlock.DefaultMasterTimeout: // fencing's least (see redlock.Options.NoFencing)
		return fmt.Errorf("-ttl %v: must be at least 4 times the master timeout %v (%v)", c.ttl, redlock.DefaultMasterTimeout, 4*redlock.DefaultMasterTimeout)
	case c.key == "":
		return errors.New("empty key")
	}
	return nil
}

// masterSet is the masters a run uses.
type masterSet struct {
	desc    string
	names   []string // "m0", "m1"...
	addrs   []string
	clients []*redis.Client
	cluster *harness.Cluster // nil for -masters: no fault injection
	started bool             // openMasters started them and printed each one
	// inProcess: they are redlocktest's, which Verify cannot identify
	// (miniredis's INFO has no run_id), and faults act as signals would.
	inProcess bool
	close     func() error
}

// openMasters starts, adopts or dials the masters of cfg, printing progress
// to out. It starts redis-server processes from bin, or in-process masters
// if bin is "". Starting is bounded by ctx.
func openMasters(ctx context.Context, cfg config, bin string, out *lineWriter) (*masterSet, error) {
	switch {
	case cfg.cluster != nil:
		c := cfg.cluster
		ms := clusterSet(c, fmt.Sprintf("%d given masters", len(c.Masters)))
		ms.close = func() error { return nil }
		return ms, nil
	case len(cfg.masters) > 0:
		ms := &masterSet{desc: fmt.Sprintf("%d masters from -masters (no faults injected)", len(cfg.masters))}
		for i, addr := range cfg.masters {
			ms.names = append(ms.names, fmt.Sprintf("m%d", i))
			ms.addrs = append(ms.addrs, addr)
			ms.clients = append(ms.clients, redis.NewClient(harness.MasterOptions(addr)))
		}
		ms.close = func() error {
			var errs []error
			for _, cl := range ms.clients {
				errs = append(errs, cl.Close())
			}
			return errors.Join(errs...)
		}
		return ms, nil
	case bin == "":
		return startInProcess(localMasters, out)
	default:
		c, err := startLocal(ctx, bin, localMasters, out)
		if err != nil {
			return nil, err
		}
		ms := clusterSet(c, fmt.Sprintf("%d local redis-server masters", localMasters))
		ms.started, ms.close = true, c.Close
		return ms, nil
	}
}

// clusterSet describes the masters of c.
func clusterSet(c *harness.Cluster, desc string) *masterSet {
	ms := &masterSet{desc: desc, addrs: c.Addrs(), clients: c.Clients(), cluster: c}
	for _, m := range c.Masters {
		ms.names = append(ms.names, m.Name())
	}
	return ms
}

// startInProcess starts n in-process masters (package redlocktest), for a
// machine without redis-server, and prints each. They take the same faults
// as processes: Kill, Restart, Pause and Resume act on their proxies.
func startInProcess(n int, out *lineWriter) (*masterSet, error) {
	out.printf("starting %d in-process masters...\n", n)
	began := time.Now()
	rms, err := redlocktest.StartMasters(n)
	if err != nil {
		return nil, fmt.Errorf("starting masters: %w", err)
	}
	masters := make([]harness.Master, n)
	closers := make([]func() error, n)
	for i, m := range rms {
		masters[i] = m
		closers[i] = func() error { m.Close(); return nil }
		out.printf("  %s %s up (%v)\n", m.Name(), m.Addr(), time.Since(began).Round(time.Millisecond))
	}
	c := harness.New(masters, closers...)
	ms := clusterSet(c, fmt.Sprintf("%d in-process masters", n))
	ms.started, ms.inProcess, ms.close = true, true, c.Close
	return ms, nil
}

// startLocal starts n redis-server masters from bin one after the other
// and prints each as it answers, so that the wait is visible. Each start
// is bounded by ctx and by harness.StartTimeout. On failure the masters
// already started are stopped.
func startLocal(ctx context.Context, bin string, n int, out *lineWriter) (_ *harness.Cluster, err error) {
	out.printf("starting %d masters (%s)...\n", n, redisVersion(ctx, bin))
	masters := make([]harness.Master, 0, n)
	var closers []func() error // one per master: each is a cluster of its own
	defer func() {
		if err != nil {
			for _, stop := range closers {
				err = errors.Join(err, stop())
			}
		}
	}()
	for i := range n {
		began := time.Now()
		c, startErr := harness.StartProcesses(ctx, 1, harness.ProcessOptions{Binary: bin})
		switch {
		case startErr != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("starting masters: %w", context.Cause(ctx))
		case startErr != nil:
			return nil, fmt.Errorf("starting master %d of %d: %w", i+1, n, startErr)
		}
		closers = append(closers, c.Close)
		m := namedMaster{Master: c.Masters[0], name: fmt.Sprintf("m%d", i)}
		masters = append(masters, m)
		out.printf("  %s %s up (%v)\n", m.Name(), m.Addr(), time.Since(began).Round(time.Millisecond))
	}
	return harness.New(masters, closers...), nil
}

// namedMaster gives a master its place in the demo's set: startLocal starts
// each one alone, as master m0 of a cluster of its own.
type namedMaster struct {
	harness.Master
	name string
}

func (m namedMaster) Name() string { return m.name }

// redisVersion returns "redis-server 7.0.15" for the binary at bin, or just
// "redis-server" if its version cannot be read within a second.
func redisVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, _ := exec.CommandContext(ctx, bin, "--version").Output()
	for f := range strings.FieldsSeq(string(b)) { // "Redis server v=7.0.15 sha=..."
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "redis-server " + v
		}
	}
	return "redis-server"
}

// signal names how a fault reaches the masters: sig for processes; an
// in-process master's proxy acts as the signal would.
func (ms *masterSet) signal(sig string) string {
	if ms.inProcess {
		return "as " + sig + " would"
	}
	return sig
}

// pingResult is one master's answer to a PING.
type pingResult struct {
	took time.Duration
	err  error // nil: it answered PONG
}

// ping sends PING to every master at once and returns their answers in
// order, each bounded by ctx and pingTimeout. Each PING goes over a new
// connection, not through the clients' pools that the workers use, so that
// the answer is current: a killed or paused master shows as down at once,
// and a live one as up even while the workers keep its pool busy.
func (ms *masterSet) ping(ctx context.Context) []pingResult {
	res := make([]pingResult, len(ms.addrs))
	var wg sync.WaitGroup
	for i, addr := range ms.addrs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, pingTimeout)
			defer cancel()
			began := time.Now()
			res[i].err = harness.PingThen(ctx, addr, "", nil)
			res[i].took = time.Since(began)
		})
	}
	wg.Wait()
	return res
}

// upDown counts the masters that answered and names the others.
func (ms *masterSet) upDown(res []pingResult) (up int, down []string) {
	for i, r := range res {
		if r.err == nil {
			up++
		} else {
			down = append(down, ms.names[i])
		}
	}
	return up, down
}

// checkQuorum pings the masters, prints each one's answer unless
// openMasters already printed them, and fails unless a quorum answers.
func (ms *masterSet) checkQuorum(ctx context.Context, out *lineWriter) error {
	if !ms.started {
		out.printf("checking %s...\n", ms.desc)
	}
	res := ms.ping(ctx)
	var errs []error
	for i, r := range res {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", ms.names[i], ms.addrs[i], r.err))
		}
		switch {
		case ms.started:
		case r.err == nil:
			out.printf("  %s %s up (%v)\n", ms.names[i], ms.addrs[i], r.took.Round(time.Millisecond))
		default:
			out.printf("  %s %s down: %v\n", ms.names[i], ms.addrs[i], r.err)
		}
	}
	n := len(res)
	if up, _ := ms.upDown(res); up < n/2+1 {
		return fmt.Errorf("only %d of %d masters answer PING, a quorum needs %d: %w", up, n, n/2+1, errors.Join(errs...))
	}
	return nil
}

// demo is the shared state of one run.
type demo struct {
	cfg     config
	ms      *masterSet
	out     *lineWriter
	stats   *stats
	res     resource
	start   time.Time
	end     time.Time // workers start no attempt after it
	eventMu sync.Mutex
	events  []string
}

// run runs the demo described by cfg and writes its progress and summary
// to out. It blocks for about cfg.duration, or until ctx ends (then the
// workers stop after their current attempt and the summary is still
// written). It returns an error if the masters cannot be started or
// reached, a worker hits an invalid argument, or a fault injection failed;
// a mutual exclusion violation is reported in the summary, not as an error.
func run(ctx context.Context, cfg config, out io.Writer) (_ summary, err error) {
	if err := cfg.validate(); err != nil {
		return summary{}, err
	}
	w := &lineWriter{w: out}
	bin := "" // redis-server, when run starts the masters: "" starts them in-process
	if cfg.cluster == nil && len(cfg.masters) == 0 {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			bin = ""
			w.printf("redlock demo: redis-server is not in PATH: running on %d in-process masters "+
				"(package redlocktest); `make deps` installs redis-server for real ones\n", localMasters)
		}
	}
	w.printf("redlock demo: %d workers, each with its own client, compete for lock key %q (ttl %v) for %v\n",
		cfg.workers, cfg.key, cfg.ttl, cfg.duration)
	ms, err := openMasters(ctx, cfg, bin, w)
	if err != nil {
		return summary{}, err
	}
	defer func() { err = errors.Join(err, ms.close()) }()
	if err := ms.checkQuorum(ctx, w); err != nil {
		return summary{}, err
	}

	d := &demo{cfg: cfg, ms: ms, out: w, stats: newStats(cfg.workers)}
	if err := d.prepare(ctx); err != nil {
		return summary{}, err
	}
	d.start = time.Now()
	d.end = d.start.Add(cfg.duration)
	w.printf("running on %s: a status line every second, the counters explained at the end\n", ms.desc)

	// gctx ends when a worker fails or all are done: that stops the nemesis.
	g, gctx := errgroup.WithContext(ctx)
	for id := range cfg.workers {
		g.Go(func() error { return d.worker(gctx, id) })
	}
	workersDone := make(chan error, 1)
	go func() { workersDone <- g.Wait() }()
	var nemesisErr error
	nemesisDone := make(chan struct{})
	go func() {
		defer close(nemesisDone)
		if ms.cluster != nil {
			nemesisErr = d.nemesis(gctx)
		}
	}()

	workerErr := d.report(ctx, workersDone)
	<-nemesisDone
	sum := d.summary(ctx.Err() != nil)
	sum.write(d.out)
	return sum, errors.Join(workerErr, nemesisErr)
}

// prepare readies the masters for the run with a client of its own: it
// caches the scripts on every master, so that first attempts need no EVAL
// fallback (a master that fails here gets them on first use). It blocks
// for at most two seconds, or until ctx ends.
func (d *demo) prepare(ctx context.Context) error {
	client, err := redlock.New(d.ms.clients, nil)
	if err != nil {
		return err
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// Independent masters only: a replica, or one server given twice, would
	// count twice toward a quorum. A master that is down may still be fine.
	// In-process masters are distinct by construction, and unidentifiable.
	if !d.ms.inProcess { // err is nil here

		err = client.Verify(ctx)
	}
	switch {
	case d.ms.inProcess:
		d.out.printf("%d independent masters: each a server of its own in this process\n", len(d.ms.clients))
	case errors.Is(err, redlock.ErrSameServer) || errors.Is(err, redlock.ErrReplica):
		return fmt.Errorf("the masters are not independent masters: %w", err)
	case err != nil:
		d.out.printf("masters not verified: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	default:
		d.out.printf("verified %d independent masters\n", len(d.ms.clients))
	}
	began := time.Now()
	if err := client.LoadScripts(ctx); err != nil {
		d.out.printf("scripts not loaded everywhere, those masters get them on first use: %v\n", err)
		return nil
	}
	d.out.printf("scripts loaded on %d masters (%v)\n", len(d.ms.clients), time.Since(began).Round(time.Millisecond))
	return nil
}

// report prints a status line every second until done delivers the
// workers' result, which it returns.
func (d *demo) report(ctx context.Context, done <-chan error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev, prevAt := int64(0), d.start
	for {
		select {
		case err := <-done:
			return err
		case now := <-tick.C:
			up, down := d.ms.upDown(d.ms.ping(context.WithoutCancel(ctx)))
			s := d.stats.snapshot(&d.res)
			rate := float64(s.acquired-prev) / now.Sub(prevAt).Seconds()
			prev, prevAt = s.acquired, now
			upText := fmt.Sprintf("%d/%d", up, len(d.ms.addrs))
			if len(down) > 0 {
				upText += " (down: " + strings.Join(down, " ") + ")"
			}
			d.out.printf("t=%.0fs acquired=%d (+%.0f/s) failed: %s | masters up %s | overlaps=%d lost=%d\n",
				now.Sub(d.start).Seconds(), s.acquired, rate, s.failures(), upText, s.overlaps, s.lost)
		}
	}
}

// worker competes for the lock with its own redlock.Client until d.end or
// until ctx ends. It returns an error only for a misconfiguration.
func (d *demo) worker(ctx context.Context, id int) error {
	client, err := redlock.New(d.ms.clients, nil)
	if err != nil {
		return err
	}
	defer client.Close()
	mu, err := mutex.New(client, d.cfg.key, &mutex.Options{TTL: d.cfg.ttl})
	if err != nil {
		return err
	}
	// TryLock rather than Lock, so that every failed attempt is counted by
	// its cause; the jittered backoff below does what Lock would.
	backoff := minBackoff
	for time.Now().Before(d.end) && ctx.Err() == nil {
		if err := mu.TryLock(ctx); err != nil {
			if errors.Is(err, redlock.ErrInvalidArgument) {
				return fmt.Errorf("worker %d: %w", id, err)
			}
			d.stats.acquireFailed(err)
			sleep(ctx, backoff/2+rand.N(backoff/2+1))
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		d.stats.acquired(id)
		d.res.use(holdFor)
		// Unlock even if ctx just ended, so the key does not linger.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		if err := mu.Unlock(uctx); err != nil {
			d.stats.releaseFailed(err)
		}
		cancel()
		sleep(ctx, rand.N(maxThink))
	}
	return nil
}

// nemesis injects faults into d.ms.cluster: at a quarter of the run it
// kills m2 and restarts it after longer than the TTL; about the middle it
// pauses another master for half a TTL. The schedule ends within the run
// if it lasts at least 3 TTLs; shorter runs get no faults. It returns when
// done or when ctx ends, leaving no master paused, and reports the first
// failed operation.
func (d *demo) nemesis(ctx context.Context) error {
	masters := d.ms.cluster.Masters
	switch {
	case len(masters) < 3:
		d.event("no faults injected: fewer than 3 masters")
		return nil
	case d.cfg.duration < 3*d.cfg.ttl:
		d.event("no faults injected: the run is shorter than 3 TTLs")
		return nil
	}
	victim, frozen := masters[2], masters[len(masters)-1]
	if frozen == victim {
		frozen = masters[0]
	}
	downFor, pauseFor := d.cfg.ttl*3/2, d.cfg.ttl/2
	// failed reports a fault operation that failed, unless ctx ended.
	failed := func(op string, m harness.Master, err error) error {
		if ctx.Err() != nil {
			return nil
		}
		d.event("%s %s failed: %v", op, m.Name(), err)
		return fmt.Errorf("%s %s: %w", op, m.Name(), err)
	}

	if !sleep(ctx, time.Until(d.start.Add(d.cfg.duration/4))) {
		return nil
	}
	if err := victim.Kill(ctx); err != nil {
		return failed("kill", victim, err)
	}
	d.event("kill %s (%s, %s): its keys are lost; restart in %v, longer than the %v TTL "+
		"(Redlock: a master without persistence stays down longer than the longest TTL)",
		victim.Name(), victim.Addr(), d.ms.signal("SIGKILL"), downFor, d.cfg.ttl)
	if !sleep(ctx, downFor) {
		return nil
	}
	if err := victim.Restart(ctx); err != nil {
		return failed("restart", victim, err)
	}
	d.event("restart %s with empty data after %v down", victim.Name(), downFor)

	if !sleep(ctx, time.Until(d.start.Add(d.cfg.duration/2))) {
		return nil
	}
	err := frozen.Pause(ctx)
	if err == nil {
		d.event("pause %s (%s, %s) for %v", frozen.Name(), frozen.Addr(), d.ms.signal("SIGSTOP"), pauseFor)
		sleep(ctx, pauseFor)
	}
	// Resume even if Pause failed or ctx ended: the signal may have landed.
	if rerr := frozen.Resume(context.WithoutCancel(ctx)); err == nil && rerr != nil {
		return failed("resume", frozen, rerr)
	}
	if err != nil {
		return failed("pause", frozen, err)
	}
	d.event("resume %s (%s)", frozen.Name(), d.ms.signal("SIGCONT"))
	return nil
}

// event prints a master event and keeps it for the summary.
func (d *demo) event(format string, args ...any) {
	line := fmt.Sprintf("t=%.1fs ", time.Since(d.start).Seconds()) + fmt.Sprintf(format, args...)
	d.eventMu.Lock()
	d.events = append(d.events, line)
	d.eventMu.Unlock()
	d.out.printf("EVENT %s\n", line)
}

// resource is what the lock protects. use detects a second holder inside
// it, and its read-modify-write loses updates if two holders overlap.
type resource struct {
	inside   atomic.Int32
	overlaps atomic.Int64
	value    atomic.Int64 // incremented by load, pause, store
	done     atomic.Int64 // completed critical sections
}

// use runs one critical section, pausing hold between read and write.
func (r *resource) use(hold time.Duration) {
	if r.inside.Add(1) != 1 {
		r.overlaps.Add(1)
	}
	v := r.value.Load()
	time.Sleep(hold)
	r.value.Store(v + 1)
	r.inside.Add(-1)
	r.done.Add(1)
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lineWriter serialises writes to w; it is safe for concurrent use.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
