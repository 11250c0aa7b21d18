package redlock

import (
	"context"
	"errors"
	"math/bits"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// op is one operation sent to every master at once.
type op struct {
	name     string        // "acquire", "extend", "release": for errors
	key      string        // the caller's key, for errors
	script   *redis.Script // run on every master
	undo     *redis.Script // run where script may have applied, if the round fails; nil for none
	keys     pipeline.Keys
	args     []any
	undoArgs []any // arguments of undo
	// markArgs are undo's arguments where the call's outcome is unknown
	// (see unanswered): then the undo may overtake it, and leaves a marker
	// if it finds nothing (see scripts.lua).
	markArgs []any
	ttl      time.Duration // > 0: the round also needs validity left
	// grantWithin, if > 0, is the latest a fencing acquire may be decided:
	// a quarter of its TTL, for its token to be larger than those of every
	// earlier lock (see "Fencing tokens" in README.md).
	grantWithin time.Duration
	sentinel    error // what a failed round wraps
	// refused is a master's error where it answered no: ErrNotHeld (the
	// lock is not ours there) unless set.
	refused error
	// keep: script is never shed nor dropped by a master's pipeline
	// (releases). It need not be detached from the caller's goroutine: a
	// round's context ends only after lateCallFactor*MasterTimeout.
	keep bool
	// keyTTL is the longest a key that undo removes can live: retrying
	// longer is useless.
	keyTTL time.Duration
	// withdrawable: a call still queued to a master that is behind when
	// the round is decided is not sent (see Client.withdraw).
	withdrawable bool
	// unsent, if set, collects the masters where the call was surely not
	// sent (bit i for master i); withdrawn calls are in it when do
	// returns.
	unsent *atomic.Uint64
	// skip, if set, is asked, for keep calls, whether master i needs the
	// call at all (see pipeline.Options.Skip).
	skip   pipeline.Skipper
	policy policy // nil: none (noHooks)
}

// policy is an operation's part in its rounds: the engine calls it
// where the operation, not the quorum, decides what happens.
type policy interface {
	// queued runs once the round's calls are queued on every master.
	queued()
	// answered runs when master i answered, on its pipeline: it must
	// not block.
	answered(ctx context.Context, i int, a answer)
	// settles reports whether master i's answer needs settled once a
	// successful round is decided.
	settles(a answer) bool
	// settled runs once a successful round is decided; counted tells
	// whether the decision counted a. It returns what may block, to run
	// on a goroutine of its own, or nil.
	settled(ctx context.Context, i int, a answer, counted bool) func()
}

// noHooks is a policy that does nothing: an operation's policy embeds
// it for the hooks it does not need.
type noHooks struct{}

func (noHooks) queued()                                           {}
func (noHooks) answered(context.Context, int, answer)             {}
func (noHooks) settles(answer) bool                               { return false }
func (noHooks) settled(context.Context, int, answer, bool) func() { return nil }

// outcome is what a successful round tells besides success.
type outcome struct {
	start time.Time // when the round started
	max   int64     // the largest reply among the agreeing masters seen
	mixed bool      // those replies were not all equal
}

// round is the shared state of one op's fan-out. The decider (Client.do)
// and the masters' pipelines, which answer each call through its slot
// (see slot.Complete), communicate through it:
//   - a call's answer is written to its slot, then counted (tally), unless
//     the count has closed; the answer that settles the count, or the
//     round's deadline (see expire), whichever comes first, signals ready;
//   - the decider waits for ready or its context, closes the count, sets
//     failed, then decides (Client.decide);
//   - after that, each call that needs it settles (Client.settle): if the
//     round failed it tries once to undo its call, sends its index on
//     finished, and goes on retrying the undo in the background if that
//     try got no answer.
//
// No goroutine waits for a call, and the decider wakes once: the pipelines
// answer the calls, and only the work that may block (identifying a
// server, undoing, repairing) gets a goroutine of its own.
type round struct {
	c        *Client
	op       *op
	policy   policy       // o.policy
	ctx      *callContext // of the calls and what follows them (see do)
	slots    []slot
	ready    chan struct{}  // cap 1: the count is settled, or the deadline came
	group    pipeline.Group // its withdrawable calls (see Client.withdraw)
	start    time.Time      // set with an Observer only
	failed   bool
	finished chan int     // masters done with their undo; set for a failed round with undo
	running  atomic.Int32 // calls not done with: answered, settled, and their goroutines ended

	mu      sync.Mutex
	agreed  int    // agreements counted
	refused int    // other answers counted
	max     int64  // the largest reply among the agreements counted
	mixed   bool   // those replies were not all equal
	closed  bool   // the count is closed: later answers are late
	decided bool   // the decider has set failed
	waiting uint64 // masters that answered before the decision, to settle after it
}

// slot is one master's part of a round, and the pipeline.Completion of
// its call. Complete writes its answer once; the decider reads it after
// the count saw it (read).
type slot struct {
	r *round
	i int
	answer
	server string // the master's run_id, "" if unknown (see Client.admit)
	// verdict is why an agreement does not count: a replica, a server
	// that could not be identified, or one that counted already.
	verdict error
	read    bool // the decider saw this reply before deciding, or awaitUndo after
	late    bool // read by awaitUndo: it did not count toward the decision
	// latency is the time from the round's start to the reply; set only
	// with an Observer.
	latency time.Duration
}

// answer is a master's answer to a round's call.
type answer struct {
	val int64
	err error // the call's error, as its pipeline gave it
}

// applied reports whether the script applied: the master agreed.
func (a answer) applied() bool { return a.err == nil && a.val > 0 }

// refused reports whether the master answered no.
func (a answer) refused() bool { return a.err == nil && a.val == 0 }

// unknown reports whether the call's outcome is unknown (see unanswered).
func (a answer) unknown() bool { return unanswered(a.err) }

// mayHaveApplied reports whether the script applied or may still.
func (a answer) mayHaveApplied() bool { return a.val > 0 || a.unknown() }

// agreed reports whether the agreement counts toward the quorum.
func (s *slot) agreed() bool { return s.applied() && s.verdict == nil }

// failure returns what kept the master from answering, or from counting.
func (s *slot) failure() error {
	if s.verdict != nil {
		return s.verdict
	}
	return s.err
}

// lateCallFactor times MasterTimeout bounds a call that its round was decided
// without.
const lateCallFactor = 4

// minStragglerWait is the least a failed round waits for the masters that
// have not answered (see awaitUndo): a round decided in microseconds still
// gives them time to be scheduled.
const minStragglerWait = 250 * time.Microsecond

// replyUpgrade is a master's reply when an owner that holds a read lock
// asks for the write lock.
const replyUpgrade = -1

// replyWaited is a master's reply to a last release where an acquire was
// refused while the Lock held the lock.
const replyWaited = 2

// do runs o on every master in parallel and decides as soon as a quorum has
// agreed or can no longer agree, at the latest MasterTimeout after the
// round starts or when ctx ends, whether or not the Redis client honours
// contexts. Calls still running then go on in the background, never cut
// off by ctx: each is sent under a bound of lateCallFactor times
// MasterTimeout (one queued behind others to a slow master waits for them
// first), so that a release or extend still reaches slow masters, and a
// call is answered before its undo is sent unless it timed out.
//
// With o.withdrawable, calls still queued to masters that are behind when
// the round is decided are never sent (see Client.withdraw).
//
// If the round fails and o.undo is set, o.undo runs on every master where
// o.script may have applied (it agreed, failed other than surely unsent,
// or has not answered yet),
// with a fresh context, and is retried there in the background until the
// master answers (see Client.retryLater). do returns once the outcome is
// known and the masters whose agreement it saw have made a first try to
// undo it. The masters that have not answered get twice as long as the
// decision took (a reply, then an undo), at least minStragglerWait (see
// awaitUndo), if a master replied by then; if only errors came (a refused
// connection fails fast and tells nothing of the others' speed), they get
// until the round's deadline; if that or the caller's context has ended,
// nothing. Slower masters undo in the background; a value is unique per
// Lock, so an undo still pending costs availability (until the key's TTL
// at worst), never exclusion.
//
// On failure it returns a *QuorumError.
func (c *Client) do(ctx context.Context, o *op) (outcome, error) {
	n := len(c.nodes)
	if !c.gate.enter(n) { // Close waits for the round's calls
		return outcome{}, errClosedOp(o.name, o.key)
	}
	if o.policy == nil {
		o.policy = noHooks{}
	}
	r := &round{
		c:      c,
		op:     o,
		policy: o.policy,
		slots:  make([]slot, n),
		ready:  make(chan struct{}, 1),
	}
	if ctx.Err() != nil && !o.keep {
		c.gate.leave(n)
		return outcome{}, r.quorumError(ctx, false, false, 0) // nothing sent
	}
	res := outcome{start: time.Now()}
	if c.observer != nil {
		r.start = res.start
	}
	// Calls may finish after the decision (a release must still reach slow
	// masters), so they get longer than the decision, and the caller's
	// cancellation ends only the decision: a call cut off mid-reply costs
	// the pool its connection, and an undo sent on another connection
	// before the call was answered could overtake it (see scripts.lua).
	// Close need not cancel them: it waits lateCallFactor*MasterTimeout,
	// by which time each call sent has ended (or its client ignores
	// contexts), then drops the calls still queued.
	r.ctx = newCallContext(ctx, &c.callTimeouts)
	_, decision := c.decisionTimeouts.add(r) // wakes the decider at the deadline
	r.running.Store(int32(n))
	for i := range c.nodes {
		r.send(i)
	}
	r.policy.queued()

	select {
	case <-r.ready:
	case <-ctx.Done():
	}
	c.decisionTimeouts.cancel(decision)
	// What was counted by now decides; the rest missed the deadline.
	r.mu.Lock()
	r.closed = true
	agreed, timedOut := r.agreed, r.undecidedLocked()
	res.max, res.mixed = r.max, r.mixed
	r.mu.Unlock()
	elapsed := time.Since(res.start)

	ok := agreed >= c.quorum
	late := ok && o.grantWithin > 0 && elapsed > o.grantWithin
	expired := late || ok && o.ttl > 0 && validity(o.ttl, elapsed, c.driftFactor) <= 0
	if o.withdrawable {
		r.withdraw(elapsed)
	}
	if ok && !expired {
		r.decide()
		if c.observer != nil { // reads only the slots read above
			r.observe(ctx, res, elapsed, nil, timedOut)
		}
		return res, nil
	}
	r.failed = true
	if o.undo != nil {
		r.finished = make(chan int, n) // written by settle
	}
	r.decide()
	if r.finished != nil {
		var grace <-chan time.Time
		if ctx.Err() == nil && !timedOut {
			wait := c.masterTimeout - elapsed
			if r.heardReply() {
				wait = min(max(2*elapsed, minStragglerWait), wait)
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			grace = t.C
		}
		r.awaitUndo(grace)
	}
	qe := r.quorumError(ctx, expired, timedOut, elapsed)
	qe.late = late
	if c.observer != nil {
		r.observe(ctx, res, elapsed, qe, timedOut)
	}
	return outcome{}, qe
}

// expire wakes the decider at the round's deadline: what was counted by
// then decides.
func (r *round) expire() {
	r.mu.Lock()
	r.signalLocked()
	r.mu.Unlock()
}

// signalLocked wakes the decider; ready holds one signal, the first.
func (r *round) signalLocked() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// withdraw takes back the round's calls still queued to masters that are
// behind, or about to be: busy with earlier calls for twice as long as the
// round took to be decided, and at least a twentieth of MasterTimeout (2.5ms by
// default), so that a healthy master's jitter withdraws nothing. Their
// answers would come after the decision, and would cost the master, and
// the client the replies, at the moment it is slowest. Where an acquire is
// withdrawn nothing needs undoing, and the lock's releases skip that
// master.
func (r *round) withdraw(elapsed time.Duration) {
	c := r.c
	behind := max(2*elapsed, c.masterTimeout/20)
	for i := range r.slots {
		if !r.slots[i].read {
			c.nodes[i].pipe.Withdraw(&r.group, behind)
		}
	}
}

// observeRound reports a decided round to the Observer. qe is the round's
// error, nil if it succeeded. On the renewal's goroutine (see
// inBackground) the Observer's panic is dropped, so that renewal goes on.
func (r *round) observe(ctx context.Context, res outcome, elapsed time.Duration, qe *QuorumError, timedOut bool) {
	c := r.c
	if isBackground(ctx) {
		defer func() { _ = recover() }()
	}
	o := r.op
	rd := Round{Op: o.name, Key: o.key, Start: r.start, Elapsed: elapsed}
	if qe != nil {
		rd.Masters, rd.Err = qe.Masters, qe
	} else {
		rd.Masters, _, _ = r.masterResults(timedOut, nil)
		if o.ttl > 0 {
			rd.Validity = validity(o.ttl, elapsed, c.driftFactor)
		}
		if o.name == "acquire" && res.max > 1 {
			rd.Token = uint64(res.max)
		}
	}
	c.observer.ObserveRound(ctx, rd)
}

// awaitUndo waits until every master whose agreement the decider saw has
// made its first try to undo it (bounded by MasterTimeout): their keys
// surely exist, and the caller's next attempt must not find them. It also
// waits for the masters that have not answered, and their undo, until
// grace fires: most answer about as fast as the others did, and a late
// agreement not yet undone would make the next attempts, the caller's or
// another client's, fail in turn (under contention, waiting for them keeps
// the script calls per lock as low as waiting for every master did). A nil grace waits for none of them.
// It marks each master it hears from as read.
func (r *round) awaitUndo(grace <-chan time.Time) {
	known := 0
	for i := range r.slots {
		if r.slots[i].read && r.slots[i].agreed() {
			known++
		}
	}
	for left := len(r.slots); left > 0 && (known > 0 || grace != nil); {
		select {
		case i := <-r.finished:
			left--
			s := &r.slots[i]
			if s.read && s.agreed() {
				known--
			}
			s.late = !s.read
			s.read = true
		case <-grace:
			grace = nil
		}
	}
}

// replied reports whether the decider saw a master reply (agree or
// refuse), not fail.
func (r *round) heardReply() bool {
	for i := range r.slots {
		if s := &r.slots[i]; s.read && s.failure() == nil {
			return true
		}
	}
	return false
}

// send sends round r's call to master i. Its pipeline answers it through
// its slot (see Complete), maybe before send returns.
func (r *round) send(i int) {
	c := r.c
	o, s := r.op, &r.slots[i]
	s.r, s.i = r, i
	opts := pipeline.Options{Index: i}
	switch {
	case o.keep:
		opts.MustSend, opts.Skip = true, o.skip
	case o.withdrawable:
		opts.Group, opts.Unsent = &r.group, o.unsent
	}
	c.nodes[i].pipe.Go(r.ctx, o.script, o.keys, o.args, opts, s)
}

// Complete takes the master's answer to the slot's call. It runs on the
// master's pipeline, or where the call was answered unsent, so it does
// not block: a server it must identify by asking, and what may follow
// the decision, go on goroutines of their own.
func (s *slot) Complete(v int64, err error) {
	r, i := s.r, s.i
	c, o := r.c, r.op
	s.val, s.err = v, closedError(err)
	if o.unsent != nil && errors.Is(s.err, pipeline.ErrNotSent) {
		o.unsent.Or(1 << i)
	}
	if !r.start.IsZero() {
		s.latency = time.Since(r.start)
	}
	// A timed-out write may still land, and an error reply may come from a
	// proxy that forwarded the call: only a call surely not sent did not
	// apply. Where the outcome is unknown, an undo may overtake the call.
	switch {
	case s.applied() && o.keep:
		// A release's agreements only tell what is reported, and are not
		// held up to identify the server: the identity last learned, if
		// any, keeps one server from counting twice (see tallyLocked).
		s.server = c.lastServer(i)
	case s.applied():
		// A replica does not count toward a quorum; nor does a server
		// that counted already in this round (see tallyLocked).
		var known bool
		if s.server, s.verdict, known = c.admitKnown(i); !known {
			go func() {
				pprof.SetGoroutineLabels(r.ctx)
				s.server, s.verdict = c.admit(r.ctx, i)
				r.answered(i)
			}()
			return
		}
	}
	r.answered(i)
}

// answered counts master i's answer, unless the count has closed, runs what
// needs no decision, and settles the call now if the round was decided,
// else once it is (see decide).
func (r *round) answered(i int) {
	o, s := r.op, &r.slots[i]
	settles := o.undo != nil || r.policy.settles(s.answer)
	r.mu.Lock()
	if !r.closed {
		r.tallyLocked(i)
		if !r.undecidedLocked() {
			r.signalLocked()
		}
	}
	settleNow := settles && r.decided
	if settles && !r.decided {
		r.waiting |= 1 << i
	}
	r.mu.Unlock()
	r.policy.answered(r.ctx, i, s.answer)
	switch {
	case settleNow:
		r.settle(i)
	case !settles:
		r.callDone()
	}
}

// tallyLocked counts master i's answer toward the decision. r.mu must be
// held, and the count open.
func (r *round) tallyLocked(i int) {
	s := &r.slots[i]
	s.read = true
	if s.agreed() && s.server != "" {
		// One server counts once: the first of its masters to agree. A
		// master that refused does not stand for its server, which may
		// hold the lock in another database.
		for j := range r.slots {
			if o := &r.slots[j]; j != i && o.read && o.agreed() && o.server == s.server {
				s.verdict = r.c.sameServer(j, i, s.server)
				break
			}
		}
	}
	if !s.agreed() {
		r.refused++
		return
	}
	if r.agreed > 0 && s.val != r.max {
		r.mixed = true
	}
	r.max = max(r.max, s.val)
	r.agreed++
}

// undecidedLocked reports whether the answers counted decide nothing yet:
// too few agreed, and enough may still. r.mu must be held.
func (r *round) undecidedLocked() bool {
	q := r.c.quorum
	return r.agreed < q && len(r.slots)-r.refused >= q
}

// decide ends round r's decision: failed is set. It settles the calls
// answered before it.
func (r *round) decide() {
	r.mu.Lock()
	r.decided = true
	waiting := r.waiting
	r.mu.Unlock()
	for ; waiting != 0; waiting &= waiting - 1 {
		r.settle(bits.TrailingZeros64(waiting))
	}
}

// settle does what follows the decision on master i: after a success, it
// reports a late agreement (o.late), or repairs a master that refused
// (o.refusedAfter); after a failure, it undoes the call where it may have
// applied (o.undo) and retries the undo in the background until the
// master answers. What may block runs on a goroutine of its own.
func (r *round) settle(i int) {
	c := r.c
	o, s := r.op, &r.slots[i]
	switch {
	case !r.failed:
		if !r.policy.settles(s.answer) {
			break
		}
		if work := r.policy.settled(r.ctx, i, s.answer, s.read); work != nil {
			r.background(work)
			return
		}
	case o.undo == nil:
	case !s.mayHaveApplied():
		r.finished <- i
	default:
		r.background(func() {
			u := cleanup{o.undo, o.keys, o.undoArgs}
			if s.unknown() {
				u.args = o.markArgs
			}
			err := c.tryCleanup(r.ctx, i, u, true)
			r.finished <- i
			if err != nil {
				c.retryLater(r.ctx, i, u, o.keyTTL)
			}
		})
		return
	}
	r.callDone()
}

// background runs f, then callDone, on a goroutine of its own under the
// round's pprof labels: a call of round r that goes on after its answer.
func (r *round) background(f func()) {
	go func() {
		pprof.SetGoroutineLabels(r.ctx)
		f()
		r.callDone()
	}()
}

// callDone ends a call of round r: the last one cancels the calls'
// context.
func (r *round) callDone() {
	c := r.c
	if r.running.Add(-1) == 0 {
		r.ctx.end()
	}
	c.gate.leave(1)
}

// spawn runs f on a goroutine of its own, under ctx's pprof labels, that
// Close waits for. It must be called while a count in c.gate is held (a
// call of a round).
func (c *Client) spawn(ctx context.Context, f func()) {
	c.gate.enterHeld(1)
	go func() {
		defer c.gate.leave(1)
		pprof.SetGoroutineLabels(ctx)
		f()
	}()
}

// unanswered reports whether err leaves a call's outcome unknown: it may
// have reached the master, and may still land there. So does an error
// reply, which may come from a proxy that forwarded the call and gave up
// waiting for the server; only a call its pipeline did not send reached
// nothing.
func unanswered(err error) bool {
	return err != nil && !errors.Is(err, pipeline.ErrNotSent)
}

// isReply reports whether err is an error reply of the server.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// quorumError describes a failed round. It reads only the slots the decider
// saw (including those awaitUndo heard from); the others may still be
// written by the pipelines. A master that had not answered is reported
// with ErrMasterTimeout if the round's deadline decided it, else ErrNoReply
// (or the caller's context error). An extend or release wraps ErrNotHeld
// only where the refusals or the validity prove the lock lost, else
// ErrNoQuorum.
func (r *round) quorumError(ctx context.Context, expired, timedOut bool, elapsed time.Duration) *QuorumError {
	c := r.c
	e := &QuorumError{
		Op:       r.op.name,
		Key:      r.op.key,
		Quorum:   c.quorum,
		Expired:  expired,
		Elapsed:  elapsed,
		sentinel: r.op.sentinel,
		ctxErr:   ctx.Err(),
	}
	var upgrades int
	e.Masters, e.Agreed, upgrades = r.masterResults(timedOut, e.ctxErr)
	// A stale read entry on a few masters is no upgrade: it takes a quorum.
	e.upgrade = upgrades >= c.quorum
	// A lock is lost only where the refusals prove it: masters that gave
	// no answer in time may still hold it.
	if e.sentinel == ErrNotHeld && !expired && !e.refusedQuorum() {
		e.sentinel = ErrNoQuorum
	}
	return e
}

// masterResults reports each master as the decider saw it: what a master
// that had not answered missed is ctxErr if set, else ErrMasterTimeout if
// the round timed out, else ErrNoReply; an agreement heard only by
// awaitUndo did not count (errAgreedLate). It also counts the agreements
// and the upgrade replies.
func (r *round) masterResults(timedOut bool, ctxErr error) (ms []MasterResult, agreed, upgrades int) {
	c := r.c
	ms = make([]MasterResult, len(c.nodes))
	for i := range c.nodes {
		m := MasterResult{Master: c.nodes[i].name}
		switch s := &r.slots[i]; {
		case s.read:
			m.Agreed, m.Err, m.Latency = s.agreed(), s.failure(), s.latency
			if m.Agreed && s.late { // the decision did not count it
				m.Agreed, m.Err = false, errAgreedLate
			}
			if m.Agreed {
				agreed++
			}
			switch {
			case s.err == nil && s.val == replyUpgrade:
				m.Err = ErrUpgrade
				upgrades++
			case m.Err == nil && !m.Agreed: // it answered no
				m.Err = ErrNotHeld
				if r.op.refused != nil {
					m.Err = r.op.refused
				}
			}
		case ctxErr != nil:
			m.Err = ctxErr
		case timedOut:
			m.Err = ErrMasterTimeout
		default:
			m.Err = ErrNoReply
		}
		ms[i] = m
	}
	return ms, agreed, upgrades
}
