package nemesis

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/multi"
	"github.com/go-redlock/redlock/mutex"
)

// Multi is multi.Mutex: a run's clients take random sets of its keys as
// one multi-resource lock, listed in random order, and every third client
// takes one key at a time with a plain mutex.Mutex. A section reads,
// holds and writes back incremented the counter of each key it holds.
// The kinds above are locker.go's; this one has a runner of its own.
const Multi Kind = 16

// MultiSection is one section of a Multi run: the keys it held, from the
// moment its lock call returned to the moment it called its release.
type MultiSection struct {
	Client      int
	Keys        []int  // the indexes of the keys held, sorted
	Plain       bool   // a mutex.Mutex section, of one key
	Value       string // the Lock's value
	Token       uint64
	Enter, Exit time.Duration
	Committed   bool // every key's write was accepted
}

// MultiOverlap is two sections that held a key at once.
type MultiOverlap struct {
	First, Second MultiSection // First entered no later than Second
	Key           int          // a key both held
	Length        time.Duration
}

// MultiResult is what CheckMulti found.
type MultiResult struct {
	Sections  int // sections recorded
	Multi     int // of them, multi-resource ones
	Committed int // sections whose every write was accepted
	// MostKeys is the most keys one section held.
	MostKeys int
	Overlaps []MultiOverlap
	// WithPlain counts the Overlaps of a multi-resource section with a
	// plain one.
	WithPlain int
}

// Violations counts the overlaps.
func (r *MultiResult) Violations() int { return len(r.Overlaps) }

func (r *MultiResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sections (%d multi-resource, up to %d keys), %d committed; %d overlaps (%d with a plain lock)",
		r.Sections, r.Multi, r.MostKeys, r.Committed, len(r.Overlaps), r.WithPlain)
	for i, o := range r.Overlaps {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more overlaps", len(r.Overlaps)-i)
			break
		}
		fmt.Fprintf(&b, "\n  overlap %v on key %d: client %d %v [%v, %v] and client %d %v [%v, %v]",
			o.Length, o.Key, o.First.Client, o.First.Keys, o.First.Enter, o.First.Exit,
			o.Second.Client, o.Second.Keys, o.Second.Enter, o.Second.Exit)
	}
	return b.String()
}

// CheckMulti reports every pair of sections whose [Enter, Exit]
// intervals intersect and that share a key, once per pair (at their
// first shared key).
func CheckMulti(sections []MultiSection) *MultiResult {
	r := &MultiResult{Sections: len(sections)}
	byEnter := slices.Clone(sections)
	slices.SortStableFunc(byEnter, func(a, b MultiSection) int { return cmp.Compare(a.Enter, b.Enter) })
	for i, a := range byEnter {
		if !a.Plain {
			r.Multi++
		}
		if a.Committed {
			r.Committed++
		}
		r.MostKeys = max(r.MostKeys, len(a.Keys))
		for _, b := range byEnter[i+1:] {
			if b.Enter > a.Exit {
				break // sorted by Enter: no later one overlaps a
			}
			k, shared := sharedKey(a.Keys, b.Keys)
			if !shared {
				continue
			}
			r.Overlaps = append(r.Overlaps, MultiOverlap{First: a, Second: b, Key: k, Length: min(a.Exit, b.Exit) - b.Enter})
			if a.Plain != b.Plain {
				r.WithPlain++
			}
		}
	}
	return r
}

// sharedKey returns a key that both sorted sets hold.
func sharedKey(a, b []int) (int, bool) {
	for _, k := range a {
		if _, ok := slices.BinarySearch(b, k); ok {
			return k, true
		}
	}
	return 0, false
}

// multiWorker is one client of a Multi run. Only its goroutine uses it.
type multiWorker struct {
	id       int
	cfg      Config
	client   *redlock.Client
	plain    []*mutex.Mutex // one per key; nil for a multi-resource client
	env      *Env
	res      []*Resource
	sections []MultiSection

	lockCalls, lockFails, notHeld int
	fenced                        bool
}

// runMulti is Run for Kind Multi.
func runMulti(ctx context.Context, cfg Config, nem Nemesis) (rep *Report, err error) {
	if cfg.Sentinel {
		return nil, errors.New("nemesis: a multi-resource run has no Sentinel mode")
	}
	if cfg.Keys < 2 {
		return nil, errors.New("nemesis: a multi-resource run needs 2 keys or more")
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
	if env.Cluster, err = integration.StartProcesses(ctx, cfg.Masters, opts); err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Cluster.Close()) }()
	if env.Proxies, err = NewProxies(env.Cluster.Addrs()); err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Proxies.Close()) }()
	res := make([]*Resource, cfg.Keys)
	for k := range res {
		res[k] = NewResource(rec)
	}
	workers := make([]*multiWorker, cfg.Clients)
	for i := range workers {
		id := i
		c, err := redlock.New(env.Proxies.NewClients(), &redlock.Options{
			MasterTimeout: cfg.MasterTimeout,
			NoRepair:      cfg.NoRepair,
			NewValue:      func() (string, error) { return fmt.Sprintf("c%d-%s", id, rand.Text()), nil },
		})
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, c.Close()) }()
		w := &multiWorker{id: i, cfg: cfg, client: c, env: env, res: res}
		if i%3 == 2 {
			for k := range cfg.Keys {
				m, err := mutex.New(c, cfg.KeyName(k), cfg.mutexOptions())
				if err != nil {
					return nil, err
				}
				w.plain = append(w.plain, m)
			}
		}
		workers[i] = w
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

	rep = &Report{Config: cfg, Faults: int(env.faults.Load()), FaultLog: env.faultLog()}
	finals := make([]int64, len(res))
	for k, r := range res {
		finals[k] = r.Value()
	}
	rep.Result = CheckKeys(rec.Sections(), finals)
	var all []MultiSection
	for _, w := range workers {
		all = append(all, w.sections...)
		rep.LockCalls += w.lockCalls
		rep.LockFails += w.lockFails
		rep.NotHeld += w.notHeld
		rep.Fencing = rep.Fencing || w.fenced
	}
	rep.Multi = CheckMulti(all)
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// run makes up to cfg.Sections lock calls, each followed by a
// read-increment-write of each key's counter when it got the lock.
func (w *multiWorker) run(ctx context.Context) error {
	for range w.cfg.Sections {
		if ctx.Err() != nil || w.cfg.Completed > 0 && w.env.completed.Load() >= int64(w.cfg.Completed) {
			return nil
		}
		if err := w.section(ctx); err != nil {
			return err
		}
	}
	return nil
}

// pick returns the keys of the next section, in the order the caller
// lists them: one for a plain client, else two or more at random.
func (w *multiWorker) pick() []int {
	perm := mrand.Perm(w.cfg.Keys)
	if w.plain != nil {
		return perm[:1]
	}
	return perm[:2+mrand.IntN(w.cfg.Keys-1)]
}

// lock takes keys: a multi.Mutex of their names, or a plain Mutex. It
// returns the Lock and its release.
func (w *multiWorker) lock(ctx context.Context, keys []int) (*redlock.Lock, func(context.Context) error, error) {
	if w.plain != nil {
		m := w.plain[keys[0]]
		if err := m.Lock(ctx); err != nil {
			return nil, nil, err
		}
		return m.Current(), m.Unlock, nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = w.cfg.KeyName(k)
	}
	m, err := multi.New(w.client, names, &multi.Options{
		TTL: w.cfg.TTL, MinRetryDelay: w.cfg.MinRetryDelay, MaxRetryDelay: w.cfg.MaxRetryDelay, AutoRenew: w.cfg.AutoRenew,
	})
	if err != nil {
		return nil, nil, err
	}
	l, err := m.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Release, nil
}

// section is one lock call and, if it got the lock, the section.
func (w *multiWorker) section(ctx context.Context) error {
	rec := w.env.Rec
	keys := w.pick()
	lctx, cancel := context.WithTimeout(ctx, w.cfg.LockTimeout)
	l, release, err := w.lock(lctx, keys)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil // the load ended during the call
	}
	w.lockCalls++
	if err != nil {
		if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("client %d: lock %v: %w", w.id, keys, err)
		}
		w.lockFails++
		return nil
	}
	slices.Sort(keys)
	ms := MultiSection{Client: w.id, Keys: keys, Plain: w.plain != nil, Value: l.Value(), Token: l.Token(), Enter: rec.Now()}
	done := make(chan struct{})
	w.env.entered(Entered{Client: w.id, Key: keys[0], Value: ms.Value, At: ms.Enter, Done: done})
	var fence Fence
	if w.cfg.Fencing != nil {
		fence.Token, fence.Valid = w.cfg.Fencing(l)
		w.fenced = w.fenced || fence.Valid
	}
	per := make([]Section, len(keys))
	for i, k := range keys {
		per[i] = Section{Client: w.id, Key: k, Enter: ms.Enter, Value: ms.Value, Fence: fence}
	}
	w.hold(per, l)
	exit := rec.Now()
	ms.Exit = exit
	ms.Committed = true
	for i := range per {
		per[i].Exit = exitAt(per[i], exit, rec.At(l.Until()))
		ms.Exit = min(ms.Exit, per[i].Exit)
		ms.Committed = ms.Committed && per[i].Committed
	}
	close(done)
	uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	err = release(uctx)
	cancel()
	if errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) {
		w.notHeld++
	} else if err != nil {
		return fmt.Errorf("client %d: release %v: %w", w.id, keys, err)
	}
	for _, s := range per {
		rec.Record(s)
	}
	w.sections = append(w.sections, ms)
	if ms.Committed {
		w.env.completed.Add(1)
	}
	return nil
}

// hold reads every key's counter, holds, and writes each back
// incremented unless the lock was lost meanwhile or the counter rejected
// the token.
func (w *multiWorker) hold(per []Section, l *redlock.Lock) {
	for i := range per {
		s := &per[i]
		v, at, err := w.res[s.Key].Read(s.Fence)
		if err != nil {
			s.Rejected = true
			continue
		}
		s.ReadOK, s.Read, s.ReadAt = true, v, at
	}
	t := time.NewTimer(w.cfg.Hold)
	select {
	case <-t.C:
	case <-l.Done():
		t.Stop()
	}
	for i := range per {
		s := &per[i]
		if !s.ReadOK {
			continue
		}
		if !l.Held() {
			s.Aborted = true
			continue
		}
		at, err := w.res[s.Key].Write(s.Fence, s.Read+1)
		if err != nil {
			s.Rejected = true
			continue
		}
		s.Committed, s.Written, s.WriteAt = true, s.Read+1, at
	}
}

// multiScenarios are the multi-resource lock's runs (Kind Multi), from
// Scenarios' base load.
func multiScenarios(s Scale, base Config) []Scenario {
	pick := func(quick, full int) int {
		if s == Full {
			return full
		}
		return quick
	}
	load := base
	load.Kind, load.Keys = Multi, pick(3, 4)
	load.Completed = pick(0, 10000)
	const as = " Clients lock random sets of 2 or more keys, listed in random order, as one multi-resource lock (multi.Mutex); every third client locks one key at a time with a plain mutex.Mutex. A section reads, holds and writes back each key's counter."
	all := []Scenario{
		{
			Name: "multi: none", Safe: true, Config: load, Nemesis: None{},
			Description: "No fault." + as,
		},
	}
	return append(all, minorityScenarios("multi", "", load, as)...)
}
