// Package quorum runs Redlock's rounds. A round sends one script to every
// master at once. It is decided as soon as a quorum has agreed or can no
// longer agree, within the master timeout. It does not wait for a master
// that has stopped answering (see health). The package knows masters,
// rounds and the decision. What an operation does around them is its
// Spec's Policy.
package quorum

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// LateCallFactor times the master timeout bounds a call that its round
// was decided without.
const LateCallFactor = 4

// ErrClosed is what Do returns once the Work is closed.
var ErrClosed = errors.New("quorum: closed")

// Config sets an Engine up.
type Config struct {
	Quorum        int           // how many masters must agree
	MasterTimeout time.Duration // the latest a round is decided
	DriftFactor   float64       // see Drift
	// Timed measures each master's latency (Outcome.Master).
	Timed bool
	// SameServer is the verdict on master second. Its server counted
	// already in the round, through master first.
	SameServer func(first, second int, server string) error
	Work       Work
}

// Master is one master as the engine sees it.
type Master struct {
	Client redis.Scripter // for cleanup retries, sent without the pipeline
	Pipe   *pipeline.Pipeline
	ID     Identity // nil: the server cannot be asked, and its agreements count
	// Route, if not nil, spreads the master's keys over servers of their
	// own. Each round's call then goes where Route sends its keys, and is
	// judged by that server's identity. ID is unused. Cleanups still go
	// through Pipe and Client, which must find the keys themselves.
	Route Router
}

// Target is where a call goes: a server's pipeline and identity.
type Target struct {
	Pipe *pipeline.Pipeline
	ID   Identity // nil: the server cannot be asked, and its agreements count
}

// Router sends the calls of a master whose keys live on several servers
// to the server that holds them. Its methods do not block. It is safe for
// concurrent use.
type Router interface {
	// Route returns where a call on keys goes. An error says that is
	// unknown: the call is answered with it, unsent. It must match
	// pipeline.ErrNotSent.
	Route(keys pipeline.Keys) (Target, error)
	// Answered learns the outcome of a call Route sent to t: its error,
	// or nil. An error may say the route went stale.
	Answered(t Target, err error)
}

// Identity tells which server a master reaches, so that a replica does
// not count and one server counts once.
type Identity interface {
	// Known returns the server without asking it; ok is false where
	// Admit would ask.
	Known() (server string, verdict error, ok bool)
	// Admit returns the server ("" if unknown) and why its agreement
	// must not count, if it must not. It blocks while it asks.
	Admit(ctx context.Context) (server string, verdict error)
	// Last returns the server last identified, or "".
	Last() string
}

// Durability is an Identity that tells what an agreement of its master
// needs to outlive the failure of its server. Sentinel or a restart may
// replace the server by one that lacks the agreement's write. Its
// methods do not block.
type Durability interface {
	MasterState
	// Replicas returns how many replicas the server had when last seen,
	// by INFO or ROLE; 0 where none or unknown. Where above 0, a durable
	// round's call is followed by WAIT for them, then by ROLE.
	Replicas() int
	// Unannounced reports whether replicas may join the server while
	// Replicas says 0: a Sentinel failover may have moved the master. A
	// durable round's call is then followed by ROLE all the same.
	Unannounced() bool
	// Role learns what ROLE told right after a call's write. It returns
	// how many replicas the write must have reached. Or it returns why
	// the agreement must not count: the server is a replica, or ROLE
	// gave no usable answer.
	Role(r pipeline.Role) (replicas int, verdict error)
	// Unreplicated is the verdict on an agreement whose write only acked
	// of replicas acknowledged in time. cause is WAIT's error, if any.
	Unreplicated(acked, replicas int, cause error) error
}

// target is a Target with its durability, where its identity has one.
type target struct {
	Target
	durable Durability // nil where ID is not one
}

func newTarget(t Target) target {
	d, _ := t.ID.(Durability)
	return target{Target: t, durable: d}
}

// route returns where master i's call on keys goes. A master that does
// not route always has the same target. An error matches
// pipeline.ErrNotSent.
func (e *Engine) route(i int, keys pipeline.Keys) (target, error) {
	r := e.masters[i].Route
	if r == nil {
		return e.targets[i], nil
	}
	t, err := r.Route(keys)
	switch {
	case err != nil && !errors.Is(err, pipeline.ErrNotSent):
		return target{}, fmt.Errorf("%w: %w", pipeline.ErrNotSent, err)
	case err != nil:
		return target{}, err
	}
	return newTarget(t), nil
}

// answered tells master i's router, if any, the outcome of a call it
// sent to t.
func (e *Engine) answered(i int, t target, err error) {
	if r := e.masters[i].Route; r != nil && t.Pipe != nil {
		r.Answered(t.Target, err)
	}
}

// Work counts the calls that closing waits for.
type Work interface {
	// Enter counts n calls, unless closed: then it reports false.
	Enter(n int) bool
	// EnterHeld counts n more calls; the caller holds a count already.
	EnterHeld(n int)
	// Leave ends n counted calls.
	Leave(n int)
	// Shutdown is closed once closed: pending retries go at once.
	Shutdown() <-chan struct{}
	// Abandoned ends when closing stops waiting: pending work is dropped.
	Abandoned() context.Context
}

// Engine runs the rounds of one set of masters. It is safe for
// concurrent use. Each cleaner and each timeouts queue has its own mutex.
type Engine struct {
	cfg      Config   // set by New, then never changed
	masters  []Master // set by New, then never changed
	targets  []target // each master's, unless it routes; set by New
	cleaners []cleaner
	// health tells which masters a round does not wait for. Set by New,
	// then never changed; health itself is safe for concurrent use.
	health *health

	// The deadlines of rounds: decisions after MasterTimeout, calls
	// after LateCallFactor times that.
	decisions, calls timeouts

	many []manyState // per master: see DoMany
}

// New returns an Engine for masters.
func New(cfg Config, masters []Master) *Engine {
	e := &Engine{cfg: cfg, masters: masters, cleaners: make([]cleaner, len(masters)), many: make([]manyState, len(masters))}
	e.health = newHealth(len(masters), cfg.Quorum, cfg.MasterTimeout)
	e.targets = make([]target, len(masters))
	for i, m := range masters {
		e.targets[i] = newTarget(Target{Pipe: m.Pipe, ID: m.ID})
	}
	e.decisions.after = cfg.MasterTimeout
	e.calls.after = LateCallFactor * cfg.MasterTimeout
	return e
}

// Stop stops the deadline timers that ended rounds left armed. Nothing
// then fires once the pipelines are closed.
func (e *Engine) Stop() {
	e.decisions.stop()
	e.calls.stop()
}

// Quiet reports whether no deadline is queued and no timer armed. It
// stops an armed timer to tell, so call it only after Stop.
func (e *Engine) Quiet() bool { return e.decisions.quiet() && e.calls.quiet() }

// Spawn runs f on a goroutine of its own, under ctx's pprof labels.
// Closing waits for it. The caller must hold a count of the Work, such as
// a call of a round.
func (e *Engine) Spawn(ctx context.Context, f func()) {
	w := e.cfg.Work
	w.EnterHeld(1)
	go func() {
		defer w.Leave(1)
		pprof.SetGoroutineLabels(ctx)
		f()
	}()
}

// Outcome is what a round decided.
type Outcome struct {
	Start    time.Time     // when the round started
	Elapsed  time.Duration // until the decision
	Max      int64         // the largest reply among the agreements counted
	Mixed    bool          // those replies were not all equal
	OK       bool          // a quorum agreed, in time, with validity left
	Expired  bool          // a quorum agreed too late, or with no validity left
	Late     bool          // a quorum agreed after Spec.Within
	TimedOut bool          // the deadline decided before every master answered
	r        *round
}

// Result is one master's part in a round as the decision saw it.
type Result struct {
	Heard   bool  // its answer was read, by the decision or the wait for undos
	Agreed  bool  // it agreed, and counted
	Late    bool  // it agreed after the decision: it did not count
	Val     int64 // its reply
	Err     error // why it gave no answer, as its pipeline said
	Verdict error // why its agreement does not count: see slot.verdict and slot.kept
	// Silent: the master was silent when the round began, and gave no
	// answer to it. The decision did not wait for it, or its call was
	// not sent (Err is ErrSilent). A canary's failure is told as that.
	Silent  bool
	Latency time.Duration
}

// Masters returns how many masters took part.
func (o Outcome) Masters() int {
	if o.r == nil {
		return 0
	}
	return len(o.r.slots)
}

// Master returns master i's part. Only answers read by the decision are
// told. The others may still be written.
func (o Outcome) Master(i int) Result {
	s := &o.r.slots[i]
	silent := o.r.silent&(1<<i) != 0
	if !s.read {
		return Result{Silent: silent}
	}
	res := Result{Heard: true, Agreed: s.agreed(), Val: s.Val, Err: s.Err, Verdict: s.verdict, Latency: s.latency}
	if res.Verdict == nil {
		res.Verdict = s.kept
	}
	res.Silent = silent && !answered(s.Err)
	if res.Agreed && s.late {
		res.Agreed, res.Late = false, true
	}
	return res
}
