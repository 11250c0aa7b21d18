package nemesis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/semaphore"
)

// Config describes one run: the cluster, the clients and their load. The
// zero value of each field selects its default.
type Config struct {
	Masters  int // independent masters; default 5
	Clients  int // clients, each with its own go-redis clients, redlock.Client and mutex.Mutex; default 3
	Sections int // lock calls per client at most; default 20
	// Completed, if positive, ends the load once the clients completed
	// this many sections in all: committed writes, and reads held to the
	// end (Result.Committed + Result.Reads).
	Completed int
	Duration  time.Duration // no lock call starts after this; default 10s

	Key string // the lock key; default "resource"
	// Keys is how many locks the clients share, each guarding its own
	// resource: "resource", "resource1", ... Each section picks one at
	// random. Default 1.
	Keys          int
	TTL           time.Duration // lock TTL; default 1s
	MasterTimeout time.Duration // redlock.Options.MasterTimeout; default 100ms
	LockTimeout   time.Duration // bound of one mutex.Lock call; default 2s
	// Hold is the time between the read and the write inside a section,
	// which widens the window a second holder would hit; default 2ms.
	Hold time.Duration
	// HoldUntilValidity, if positive, replaces Hold: the section lasts
	// until this much before the lock's validity ends, as a client that
	// uses its whole lease would.
	HoldUntilValidity time.Duration
	// LongEvery, if positive, makes every LongEvery-th section of a client
	// hold LongHold instead: long sections for a nemesis that acts while
	// a lock is held (Entered.Long), among short ones.
	LongEvery     int
	LongHold      time.Duration
	MinRetryDelay time.Duration // mutex.Options; default 1ms
	MaxRetryDelay time.Duration // mutex.Options; default 20ms
	AutoRenew     bool          // mutex.Options: a section ends early if its lock is lost
	NoRepair      bool          // redlock.Options: extends do not repair the quorum
	// FreshClients: each lock call goes through a new redlock.Client, as
	// from a short-lived process. It never met the masters before, so it
	// sees no restart (no quarantine).
	FreshClients bool

	// Kind is the lock under test; default Exclusive.
	Kind Kind
	// Capacities, with Kind Semaphore: each acquire is given one of them
	// at random. Keys becomes the largest: one resource per slot.
	// Default: DefaultCapacity.
	Capacities []int
	// Fencing, if not nil, gives each section's token to the Resource.
	Fencing FencingFunc
	// Binary is the redis-server executable; default from PATH.
	Binary string
	// Sentinel: each master is a Sentinel group (see StartSentinelGroups),
	// which each client reaches through redis.NewFailoverClient, without
	// proxies. Env.Groups holds them; Env.Cluster and Env.Proxies are nil.
	Sentinel bool
	// Logf, if not nil, receives a line per injected fault.
	Logf func(format string, args ...any)
}

func (c *Config) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Masters == 0 {
		c.Masters = 5
	}
	if c.Clients == 0 {
		c.Clients = 3
	}
	if c.Sections == 0 {
		c.Sections = 20
	}
	if c.Key == "" {
		c.Key = "resource"
	}
	if c.Keys == 0 {
		c.Keys = 1
	}
	def(&c.Duration, 10*time.Second)
	def(&c.TTL, time.Second)
	def(&c.MasterTimeout, 100*time.Millisecond)
	def(&c.LockTimeout, 2*time.Second)
	def(&c.Hold, 2*time.Millisecond)
	def(&c.MinRetryDelay, time.Millisecond)
	def(&c.MaxRetryDelay, 20*time.Millisecond)
}

// KeyName is the name of the lock of key index k.
func (c *Config) KeyName(k int) string {
	if k == 0 {
		return c.Key
	}
	return fmt.Sprint(c.Key, k)
}

// Quorum is the majority of the masters.
func (c *Config) Quorum() int { return c.Masters/2 + 1 }

// Nemesis injects faults during a run.
type Nemesis interface {
	// Run injects faults until ctx ends, then repairs what it broke
	// (resumes, restarts, heals) before it returns. It counts each fault
	// with env.Fault. It must return soon after ctx ends.
	Run(ctx context.Context, env *Env) error
}

// ProcessConfigurer is implemented by a Nemesis that needs the masters
// started in a special way (libfaketime, for example). A Nemesis that is
// also an io.Closer is closed after the masters stopped.
type ProcessConfigurer interface {
	ProcessOptions(cfg Config) (integration.ProcessOptions, error)
}

// Entered describes a section that has just started.
type Entered struct {
	Client int
	Key    int             // the index of the lock's key
	Long   bool            // a section of Config.LongHold
	Value  string          // the lock's value
	At     time.Duration   // on the Recorder's clock
	Done   <-chan struct{} // closed when the section ends (before Unlock)
}

// Env is what a Nemesis acts on. Its methods are safe for concurrent use.
type Env struct {
	Cluster *integration.Cluster
	Proxies *Proxies // the clients' only path to the masters
	// Links are each client's own proxies, in front of Proxies, with Kind
	// Election: a nemesis stalls one candidate's links alone.
	Links  []*Proxies
	Groups []*SentinelGroup // the masters, with Config.Sentinel
	Config Config
	Rec    *Recorder
	fairs  fairLog // with Kind Fair

	faults    atomic.Int64
	takeovers atomic.Int64
	completed atomic.Int64 // sections completed, for Config.Completed
	mu        sync.Mutex
	log       []string
	wait      []chan Entered
}

// Fault counts one injected fault and logs it.
func (e *Env) Fault(format string, args ...any) {
	e.faults.Add(1)
	e.note(format, args...)
}

// note logs a line that is no fault.
func (e *Env) note(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", e.Rec.Now().Seconds()) + fmt.Sprintf(format, args...)
	e.mu.Lock()
	e.log = append(e.log, line)
	e.mu.Unlock()
	if e.Config.Logf != nil {
		e.Config.Logf("%s", line)
	}
}

// Takeover counts a leadership that began while the one before was
// stalled (PauseLeader).
func (e *Env) Takeover() { e.takeovers.Add(1) }

func (e *Env) faultLog() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// NextSection blocks until a client enters a critical section after the
// call, or ctx ends.
func (e *Env) NextSection(ctx context.Context) (Entered, error) {
	ch := make(chan Entered, 1)
	e.mu.Lock()
	e.wait = append(e.wait, ch)
	e.mu.Unlock()
	select {
	case s := <-ch:
		return s, nil
	case <-ctx.Done():
		e.mu.Lock()
		e.wait = slices.DeleteFunc(e.wait, func(c chan Entered) bool { return c == ch })
		e.mu.Unlock()
		return Entered{}, ctx.Err()
	}
}

func (e *Env) entered(s Entered) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ch := range e.wait {
		ch <- s // buffered, and each waiter is sent to once
	}
	e.wait = nil
}

// Pick returns k distinct master indexes at random.
func (e *Env) Pick(k int) []int {
	return mrand.Perm(e.Config.Masters)[:k]
}

// Sleep waits for d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Report is the outcome of one run.
type Report struct {
	Config    Config
	Faults    int           // faults the nemesis injected
	FaultLog  []string      // one line per fault
	LockCalls int           // mutex.Lock calls, but for those the end of the load cut short
	LockFails int           // Lock calls that did not get the lock within LockTimeout
	NotHeld   int           // Unlock calls that found the lock gone from the quorum, or too few masters answering
	Fencing   bool          // a FencingFunc was set and gave tokens
	Elapsed   time.Duration // the whole run, cluster start to stop
	Result    *Result       // the checker's findings
	// Election is the election checker's findings, with Kind Election;
	// Result covers the terms' sections. LockCalls are then Campaign
	// calls, and NotHeld Resign calls that found the lock gone.
	Election *ElectionResult
	// Semaphore is the semaphore checker's findings, with Kind
	// Semaphore; Result covers the permits' sections by slot.
	Semaphore *SemaphoreResult
	// Fair is the fair lock checker's findings, with Kind Fair.
	Fair *FairResult
	// Takeovers are leaderships that began while the leader before was
	// stalled (PauseLeader).
	Takeovers int
	// Multi is the multi-resource checker's findings, with Kind Multi;
	// Result covers each key's history.
	Multi *MultiResult
}

// FencingColumn says how many sections the resource stopped for a stale
// fencing token, or that it did not check tokens.
func (r *Report) FencingColumn() string {
	switch {
	case r.Config.Fencing == nil:
		return "n/a (tokens not checked)"
	case !r.Fencing:
		return "n/a (no tokens: fencing off)"
	}
	return fmt.Sprint(r.Result.Rejected)
}

// Run starts cfg.Masters redis-server processes and a proxy for each, runs
// cfg.Clients clients through the proxies while nem injects faults, stops
// the clients after cfg.Sections lock calls each or cfg.Duration, stops the
// nemesis, and checks the recorded history. It blocks until everything is
// stopped; ctx bounds the whole run. It returns an error only if the run
// itself could not be carried out (masters did not start, a nemesis action
// failed); violations are in the Report.
//
// With Kind Election each client is a candidate with its own proxies
// (Env.Links), and Observers more clients follow the election from
// before the load starts until they saw its last leader end.
func Run(ctx context.Context, cfg Config, nem Nemesis) (rep *Report, err error) {
	cfg.setDefaults()
	if cfg.Kind == Multi {
		return runMulti(ctx, cfg, nem)
	}
	elect := cfg.Kind == Election
	if elect && cfg.Sentinel {
		return nil, errors.New("nemesis: an election run has no Sentinel mode")
	}
	if elect {
		cfg.Keys = 1 // one election
	}
	if cfg.Kind == Semaphore {
		cfg.setSemaphore()
	}
	if c, ok := nem.(io.Closer); ok { // after the masters stopped
		defer func() { err = errors.Join(err, c.Close()) }()
	}
	opts := integration.ProcessOptions{}
	if pc, ok := nem.(ProcessConfigurer); ok {
		if opts, err = pc.ProcessOptions(cfg); err != nil {
			return nil, err
		}
	}
	opts.Binary = cfg.Binary
	began := time.Now()
	rec := NewRecorder()
	env := &Env{Config: cfg, Rec: rec}
	if cfg.Sentinel {
		if env.Groups, err = StartSentinelGroups(ctx, cfg.Masters); err != nil {
			return nil, err
		}
		for _, g := range env.Groups {
			defer func() { err = errors.Join(err, g.Close()) }()
		}
	} else {
		if env.Cluster, err = integration.StartProcesses(ctx, cfg.Masters, opts); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, env.Cluster.Close()) }()
		if env.Proxies, err = NewProxies(env.Cluster.Addrs()); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, env.Proxies.Close()) }()
	}

	res := make([]*Resource, cfg.Keys)
	for k := range res {
		res[k] = NewResource(rec)
	}
	workers := make([]*worker, cfg.Clients)
	for i := range workers {
		var masters []*redis.Client
		if cfg.Sentinel {
			for _, g := range env.Groups {
				rc := g.NewClient()
				defer func() { err = errors.Join(err, rc.Close()) }() // after the worker's client
				masters = append(masters, rc)
			}
		} else if elect {
			links, err := NewProxies(env.Proxies.Addrs())
			if err != nil {
				return nil, err
			}
			defer func() { err = errors.Join(err, links.Close()) }()
			env.Links = append(env.Links, links)
			masters = links.NewClients()
		} else {
			masters = env.Proxies.NewClients()
		}
		w, err := newWorker(i, cfg, masters, env, res)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, w.client.Close()) }()
		workers[i] = w
	}

	var observers []*electionObserver
	obsCtx, stopObservers := context.WithCancel(ctx)
	defer stopObservers()
	if elect {
		for range Observers {
			o, err := startObserver(obsCtx, cfg, env.Proxies.NewClients(), rec)
			if err != nil {
				return nil, err
			}
			defer func() {
				stopObservers()
				<-o.ended
				err = errors.Join(err, o.client.Close())
			}()
			observers = append(observers, o)
		}
		for i, o := range observers {
			if !o.waitFor(observersTimeout, func(Seen) bool { return true }) {
				return nil, fmt.Errorf("nemesis: observer %d reported nothing in %v", i, observersTimeout)
			}
		}
	}

	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	nemCtx, stopNemesis := context.WithCancel(ctx)
	defer stopNemesis()
	nemErr := make(chan error, 1)
	go func() { nemErr <- nem.Run(nemCtx, env) }()

	var g errgroup.Group
	for _, w := range workers {
		g.Go(func() error { return w.run(loadCtx) })
	}
	loadErr := g.Wait()
	stopNemesis()
	if err := errors.Join(loadErr, <-nemErr); err != nil {
		return nil, err
	}

	rep = &Report{
		Config:    cfg,
		Faults:    int(env.faults.Load()),
		FaultLog:  env.faultLog(),
		Takeovers: int(env.takeovers.Load()),
	}
	if elect {
		var terms []Term
		var last uint64
		for _, w := range workers {
			terms = append(terms, w.terms...)
			for _, t := range w.terms {
				last = max(last, t.Epoch)
			}
		}
		// Each observer must see the last leader end. One that does not
		// within the bound is cut short: what it missed shows.
		for _, o := range observers {
			o.waitFor(observersTimeout, func(s Seen) bool { return s.Vacant && s.Epoch >= last })
		}
		stopObservers()
		var obs []Observation
		for _, o := range observers {
			<-o.ended
			obs = append(obs, o.observation())
		}
		rep.Election = CheckElection(terms, obs)
	}
	if cfg.Kind == Semaphore {
		rep.Semaphore = CheckSemaphore(permitsOf(workers))
	}
	finals := make([]int64, len(res))
	for k, r := range res {
		finals[k] = r.Value()
	}
	rep.Result = CheckKeys(rec.Sections(), finals)
	if cfg.Kind == Fair {
		rep.Fair = env.fairs.check()
	}
	for _, w := range workers {
		rep.LockCalls += w.lockCalls
		rep.LockFails += w.lockFails
		rep.NotHeld += w.notHeld
		rep.Fencing = rep.Fencing || w.fenced
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// worker is one client: its own go-redis clients, redlock.Client and
// lock of cfg.Kind. Only its goroutine uses it.
type worker struct {
	id      int
	cfg     Config
	masters []*redis.Client
	client  *redlock.Client
	lockers []locker // one per key
	elect   *election.Election
	terms   []Term // with Kind Election
	sem     *semaphore.Semaphore
	permits []Permit // with Kind Semaphore
	env     *Env
	res     []*Resource // one per key

	lockCalls, lockFails, notHeld int
	fenced                        bool
}

func newWorker(id int, cfg Config, masters []*redis.Client, env *Env, res []*Resource) (*worker, error) {
	w := &worker{id: id, cfg: cfg, masters: masters, env: env, res: res}
	if err := w.connect(); err != nil {
		return nil, err
	}
	return w, nil
}

// connect gives w a new redlock.Client of its masters, and its lockers.
func (w *worker) connect() error {
	id, cfg := w.id, w.cfg
	c, err := redlock.New(w.masters, &redlock.Options{
		MasterTimeout: cfg.MasterTimeout,
		NoRepair:      cfg.NoRepair,
		// Values name their client, so a holder can be told on the masters.
		NewValue: func() (string, error) { return fmt.Sprintf("c%d-%s", id, rand.Text()), nil },
	})
	if err != nil {
		return err
	}
	if cfg.Kind == Election {
		e, err := cfg.newElection(c)
		if err != nil {
			return errors.Join(err, c.Close())
		}
		w.client, w.elect = c, e
		return nil
	}
	if cfg.Kind == Semaphore {
		s, err := cfg.newSemaphore(c)
		if err != nil {
			return errors.Join(err, c.Close())
		}
		w.client, w.sem = c, s
		return nil
	}
	var lockers []locker
	for k := range cfg.Keys {
		l, err := newLocker(cfg.Kind, c, id, cfg, cfg.KeyName(k))
		if cfg.Kind == Fair {
			l, err = newFairLocker(c, id, cfg, k, w.env)
		}
		if err != nil {
			return errors.Join(err, c.Close())
		}
		lockers = append(lockers, l)
	}
	w.client, w.lockers = c, lockers
	return nil
}

// reconnect replaces w's redlock.Client by a new one (FreshClients).
func (w *worker) reconnect() error {
	if err := w.client.Close(); err != nil {
		return fmt.Errorf("client %d: close: %w", w.id, err)
	}
	return w.connect()
}

// unlockTimeout bounds an Unlock; it uses a fresh context, as the load's
// may have ended.
const unlockTimeout = 2 * time.Second

// run makes up to cfg.Sections lock calls, each followed by a
// read-increment-write on the resource when it got the lock.
func (w *worker) run(ctx context.Context) error {
	rec := w.env.Rec
	for n := range w.cfg.Sections {
		if ctx.Err() != nil || w.cfg.Completed > 0 && w.env.completed.Load() >= int64(w.cfg.Completed) {
			return nil
		}
		if w.cfg.FreshClients && n > 0 {
			if err := w.reconnect(); err != nil {
				return err
			}
		}
		if w.elect != nil {
			if err := w.campaign(ctx, n); err != nil {
				return err
			}
			continue
		}
		if w.sem != nil {
			if err := w.permit(ctx, n); err != nil {
				return err
			}
			continue
		}
		key := mrand.IntN(w.cfg.Keys)
		locker := w.lockers[key]
		long := w.cfg.LongEvery > 0 && n%w.cfg.LongEvery == w.cfg.LongEvery-1
		lctx, cancel := context.WithTimeout(ctx, w.cfg.LockTimeout)
		l, shared, err := locker.lock(lctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil // the load ended during the call
		}
		w.lockCalls++
		if err != nil {
			if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("client %d: lock: %w", w.id, err)
			}
			w.lockFails++
			continue
		}
		s := Section{Client: w.id, Key: key, Enter: rec.Now(), Shared: shared, Value: l.Value()}
		done := make(chan struct{})
		w.env.entered(Entered{Client: w.id, Key: key, Long: long, Value: s.Value, At: s.Enter, Done: done})
		if w.cfg.Fencing != nil {
			s.Fence.Token, s.Fence.Valid = w.cfg.Fencing(l)
			w.fenced = w.fenced || s.Fence.Valid
		}
		w.section(&s, l, long)
		s.Exit = exitAt(s, rec.Now(), rec.At(l.Until()))
		close(done)
		uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		err = locker.unlock(uctx)
		cancel()
		// Too few masters answering in time is no failure of the run.
		if errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) {
			w.notHeld++
		} else if err != nil {
			return fmt.Errorf("client %d: unlock: %w", w.id, err)
		}
		w.env.Rec.Record(s)
		if s.completed() {
			w.env.completed.Add(1)
		}
	}
	return nil
}

// exitAt is when section s ended for the checker: now, or for a section
// aborted because its lock was lost or its validity ran out, no later than
// the end of that validity (until), past which its holder no longer
// counted on the lock: it found so and wrote nothing. A holder woken late
// (a stalled process) would otherwise overlap the next one.
func exitAt(s Section, now, until time.Duration) time.Duration {
	if s.Aborted && until < now {
		return max(until, s.Enter)
	}
	return now
}

// hold holds lock l for the section's time, and reports whether l is
// still held after it. A holder stops at once when its lock is lost, as
// a user's would.
func (w *worker) hold(l *redlock.Lock, long bool) bool {
	hold := w.cfg.Hold
	switch {
	case long:
		hold = w.cfg.LongHold
	case w.cfg.HoldUntilValidity > 0:
		hold = time.Until(l.Until().Add(-w.cfg.HoldUntilValidity))
	}
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-l.Done():
		t.Stop()
	}
	return l.Held()
}

// section reads the resource, holds, and writes the increment back unless
// the section is shared (a read lock), the lock was lost or its validity
// ran out meanwhile, or the resource rejected the token.
func (w *worker) section(s *Section, l *redlock.Lock, long bool) {
	res := w.res[s.Key]
	v, at, err := res.Read(s.Fence)
	if err != nil {
		s.Rejected = true
		return
	}
	s.ReadOK, s.Read, s.ReadAt = true, v, at
	if !w.hold(l, long) {
		s.Aborted = true
		return
	}
	if s.Shared {
		// A writer inside the read hold would show here.
		s.ReadAgain, _, err = res.Read(s.Fence)
		s.ReadAgainOK = err == nil
		return
	}
	at, err = res.Write(s.Fence, v+1)
	if err != nil {
		s.Rejected = true
		return
	}
	s.Committed, s.Written, s.WriteAt = true, v+1, at
}
