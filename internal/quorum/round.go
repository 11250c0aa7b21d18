package quorum

import (
	"context"
	"errors"
	"math/bits"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// round is the shared state of one Spec's fan-out. The decider (Do) and
// the masters' pipelines communicate through it. A pipeline answers each
// call through its slot.
//   - A call's answer is written to its slot, then counted (tally),
//     unless the count has closed. The answer that settles the count
//     signals ready. So does the round's deadline (expire), if it comes
//     first.
//   - The decider waits for ready or its context. It closes the count,
//     sets failed, then decides.
//   - After that, each call that needs it settles. If the round failed,
//     it tries once to undo its call, and sends its index on finished. It
//     goes on retrying the undo in the background if that try got no
//     answer.
//
// No goroutine waits for a call, and the decider wakes once. The
// pipelines answer the calls. Only the work that may block gets a
// goroutine of its own: identifying a server, undoing, what a policy
// returns.
//
// Do sets the fields above mu before the calls go out, but for failed
// and finished. The decider sets those two before decide; the calls read
// them only after it.
type round struct {
	e        *Engine
	spec     *Spec
	policy   Policy       // spec.Policy, or NoHooks
	ctx      *callContext // of the calls and what follows them
	slots    []slot
	ready    chan struct{}  // cap 1: the count is settled, or the deadline came
	group    pipeline.Group // its withdrawable calls
	start    time.Time      // when the calls went out
	deadline time.Time      // of the decision: an answer after it is not in time
	silent   uint64         // the masters silent when the round began: not waited for
	waitEnd  time.Time      // when WAIT gives up: see Do
	failed   bool           // set by the decider before decide
	finished chan int       // masters done with their undo; set for a failed round with Undo
	running  atomic.Int32   // calls not done with: answered, settled, goroutines ended

	mu      sync.Mutex // guards the count below
	agreed  int        // agreements counted
	refused int        // other answers counted
	max     int64      // the largest reply among the agreements counted
	mixed   bool       // those replies were not all equal
	closed  bool       // the count is closed: later answers are late
	expired bool       // the deadline came
	decided bool       // the decider has set failed
	waiting uint64     // masters that answered before the decision, to settle after it
}

// slot is one master's part of a round, and the pipeline.Completion of
// its call. Complete writes its answer once. The decider reads it after
// the count saw it (read), under round.mu.
type slot struct {
	r *round
	i int
	t target // where the call went; set by send
	Answer
	server string // the master's server, "" if unknown
	// verdict is why an agreement does not count, as the server's
	// identity says. The server is a replica, could not be identified,
	// or counted already in the round.
	verdict error
	// kept is why an agreement does not count although its server
	// would. A failover could lose the write (see slot.durable), or the
	// policy refused it (Judge). verdict, if set, comes first.
	kept   error
	target int                  // the replicas its WAIT asked for: Replicas() when sent
	role   bool                 // ROLE followed the call
	rep    pipeline.Replication // what WAIT and ROLE told
	// read: the decider saw this reply before deciding, or awaitUndo
	// after. Guarded by round.mu until the count closed; the decider's
	// after that.
	read   bool
	missed bool // the deadline decided without it; guarded by round.mu
	// skipped: its pipeline skipped the call, 0 is no reply. Skipped
	// sets it before Complete, on its goroutine; only what follows reads.
	skipped bool
	late    bool          // read by awaitUndo: it did not count toward the decision
	latency time.Duration // from the round's start to the reply; with Config.Timed only
}

// agreed reports whether the agreement counts toward the quorum.
func (s *slot) agreed() bool { return s.Applied() && s.verdict == nil && s.kept == nil }

// failure returns what kept the master from answering, or from counting.
func (s *slot) failure() error {
	switch {
	case s.verdict != nil:
		return s.verdict
	case s.kept != nil:
		return s.kept
	}
	return s.Err
}

// MinStragglerWait is the least a failed round waits for the masters
// that have not answered. A round decided in microseconds still gives
// them time to be scheduled.
const MinStragglerWait = 250 * time.Microsecond

// Do runs spec on every master in parallel. It decides as soon as a
// quorum has agreed or can no longer agree. That is at the latest
// MasterTimeout after the round starts, or when ctx ends. A silent
// master counts as unable to agree until it answers. A call that may be
// shed is not sent to it (ErrSilent), but for a canary now and then (see
// health). Calls still running then go on in the background. Each is bounded by
// LateCallFactor*MasterTimeout and never cut off by ctx. So a release
// still reaches slow masters.
//
// If the round fails, spec.Undo runs where the script may have applied.
// Do returns once the masters whose agreement it saw have tried the undo
// once. The masters that have not answered get a short grace. Slower
// masters undo in the background.
//
// Once the Work is closed, Do sends nothing and returns ErrClosed. Else
// it returns the Outcome, which is OK if the round succeeded.
func (e *Engine) Do(ctx context.Context, spec *Spec) (Outcome, error) {
	n := len(e.masters)
	if !e.cfg.Work.Enter(n) { // closing waits for the round's calls
		return Outcome{}, ErrClosed
	}
	r := &round{e: e, spec: spec, policy: spec.Policy, slots: make([]slot, n), ready: make(chan struct{}, 1)}
	if r.policy == nil {
		r.policy = NoHooks{}
	}
	res := Outcome{r: r}
	if ctx.Err() != nil && !spec.Send.Must {
		e.cfg.Work.Leave(n)
		return res, nil // nothing sent
	}
	res.Start = time.Now()
	r.start = res.Start
	// WAIT gives up a quarter of MasterTimeout before the deadline. So
	// its shortfall is told before the decision, not taken for silence.
	r.waitEnd = res.Start.Add(e.cfg.MasterTimeout * 3 / 4)
	// Calls may finish after the decision, so they get longer than it.
	// The caller's cancellation ends only the decision. A call cut off
	// mid-reply costs the pool its connection. An undo sent on another
	// connection before the call was answered could overtake it. Closing
	// need not cancel them: each sent ends within its bound.
	r.ctx = newCallContext(ctx, &e.calls)
	deadline, decision := e.decisions.add(r) // wakes the decider at the deadline
	r.deadline = deadline
	r.silent = e.health.silentSet()
	r.running.Store(int32(n))
	for i := range e.masters {
		r.send(i)
	}
	r.policy.Queued()

	select {
	case <-r.ready:
	case <-ctx.Done():
	}
	e.decisions.cancel(decision)
	// What was counted by now decides; the rest missed the deadline.
	r.mu.Lock()
	r.closed = true
	agreed := r.agreed
	res.TimedOut = r.undecidedLocked()
	res.Max, res.Mixed = r.max, r.mixed
	missed := r.missedLocked(res.TimedOut)
	r.mu.Unlock()
	for ; missed != 0; missed &= missed - 1 {
		e.health.missed(bits.TrailingZeros64(missed), r.start)
	}
	res.Elapsed = time.Since(res.Start)

	ok := agreed >= e.cfg.Quorum
	res.Late = ok && spec.Within > 0 && res.Elapsed > spec.Within
	res.Expired = res.Late || ok && spec.TTL > 0 && Validity(spec.TTL, res.Elapsed, e.cfg.DriftFactor) <= 0
	if spec.Send.Withdraw {
		r.withdraw(res.Elapsed)
	}
	if ok && !res.Expired {
		res.OK = true
		r.decide()
		return res, nil
	}
	r.failed = true
	if spec.Undo != nil {
		r.finished = make(chan int, n) // written by settle
	}
	r.decide()
	if r.finished != nil {
		var grace <-chan time.Time
		if ctx.Err() == nil && !res.TimedOut {
			wait := e.cfg.MasterTimeout - res.Elapsed
			if r.heardReply() {
				wait = min(max(2*res.Elapsed, MinStragglerWait), wait)
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			grace = t.C
		}
		r.awaitUndo(grace)
	}
	return res, nil
}

// expire wakes the decider at the round's deadline. What was counted by
// then decides.
func (r *round) expire() {
	r.mu.Lock()
	r.expired = true
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

// missedLocked marks the masters that the deadline decided without. It
// returns them, bit i for master i. A round decided early, or by the
// caller's context, missed no one. r.mu must be held, and the count
// closed.
func (r *round) missedLocked(timedOut bool) uint64 {
	if !timedOut || !r.expired {
		return 0
	}
	var missed uint64
	for i := range r.slots {
		if s := &r.slots[i]; !s.read {
			s.missed = true
			missed |= 1 << i
		}
	}
	return missed
}

// withdraw takes back the round's calls still queued to masters that are
// behind, or about to be. Such a master has been busy with earlier calls
// for twice as long as the round took to be decided. The wait is at least
// a twentieth of MasterTimeout, so a healthy master's jitter withdraws
// nothing. The answers would come after the decision. They would cost
// the master and the client at the moment it is slowest.
func (r *round) withdraw(elapsed time.Duration) {
	behind := max(2*elapsed, r.e.cfg.MasterTimeout/20)
	for i := range r.slots {
		if s := &r.slots[i]; !s.read && s.t.Pipe != nil {
			s.t.Pipe.Withdraw(&r.group, behind)
		}
	}
}

// awaitUndo waits until every master whose agreement the decider saw,
// counted or not, has made its first try to undo it. That try is bounded
// by MasterTimeout. Their keys surely exist, and the caller's next attempt must not find
// them. It also waits for the masters that have not answered, and their
// undo, until grace fires. Most answer about as fast as the others did. A
// late agreement not yet undone would make the next attempts fail in
// turn. A nil grace waits for none of them. awaitUndo marks each master it
// hears from as read.
func (r *round) awaitUndo(grace <-chan time.Time) {
	known := 0
	for i := range r.slots {
		if r.slots[i].read && r.slots[i].Applied() {
			known++
		}
	}
	for left := len(r.slots); left > 0 && (known > 0 || grace != nil); {
		select {
		case i := <-r.finished:
			left--
			s := &r.slots[i]
			if s.read && s.Applied() {
				known--
			}
			s.late = !s.read
			s.read = true
		case <-grace:
			grace = nil
		}
	}
}

// heardReply reports whether the decider saw a master reply, agree or
// refuse, rather than fail.
func (r *round) heardReply() bool {
	for i := range r.slots {
		if s := &r.slots[i]; s.read && s.failure() == nil {
			return true
		}
	}
	return false
}

// send sends the round's call to master i. Its pipeline answers it
// through its slot (Complete), maybe before send returns.
func (r *round) send(i int) {
	sp, s := r.spec, &r.slots[i]
	s.r, s.i = r, i
	if !sp.Send.Must && r.silent&(1<<i) != 0 && !r.e.health.mayShed(i) {
		// Keeping back a call that may be shed is always safe. A silent
		// master would only pile it up. The canary that goes instead,
		// once per interval, is an ordinary call: the round just does
		// not wait for it.
		s.Complete(0, ErrSilent)
		return
	}
	t, err := r.e.route(i, sp.Keys)
	if err != nil {
		s.Complete(0, err)
		return
	}
	s.t = t
	opts := pipeline.Options{Index: i}
	switch {
	case sp.Send.Must:
		opts.MustSend, opts.Skip = true, sp.Send.Skip
	case sp.Send.Withdraw:
		opts.Group, opts.Unsent = &r.group, sp.Send.Unsent
	}
	// A durable round's write waits for the replicas its server had. ROLE
	// then tells how many it has right after: a replica may have joined
	// since. A master known to have none, and whose server stays put,
	// pays nothing.
	if !sp.Lossy {
		s.target = follow(t.durable, &opts, r.waitEnd)
		s.role = opts.Role
	}
	t.Pipe.Go(r.ctx, sp.Script, sp.Keys, sp.Args, opts, s)
}

// Skipped learns that the call's pipeline answered it without asking the
// master. It runs before Complete, on the same goroutine.
func (s *slot) Skipped() { s.skipped = true }

// Complete takes the master's answer to the slot's call. It runs on the
// master's pipeline, or where the call was answered unsent. So it does
// not block: a server it must identify by asking gets a goroutine.
func (s *slot) Complete(v int64, err error) {
	r, i := s.r, s.i
	sp := r.spec
	s.Val, s.Err = v, err
	if u := sp.Send.Unsent; u != nil && errors.Is(err, pipeline.ErrNotSent) {
		u.Or(1 << i)
	}
	if r.e.cfg.Timed {
		s.latency = time.Since(r.start)
	}
	r.e.answered(i, s.t, err)
	id := s.t.ID
	switch {
	case !s.Applied():
	case id == nil:
		s.judge()
	case sp.Send.Must:
		// Such agreements only tell what is reported. They are not held
		// up to identify the server. The identity last learned, if any,
		// keeps one server from counting twice.
		s.server = id.Last()
		s.judge()
	default:
		// A replica does not count toward a quorum. Nor does a server
		// that counted already in this round.
		var known bool
		if s.server, s.verdict, known = id.Known(); !known {
			go func() {
				pprof.SetGoroutineLabels(r.ctx)
				s.server, s.verdict = id.Admit(r.ctx)
				s.judge()
				r.answered(i)
			}()
			return
		}
		s.judge()
	}
	r.answered(i)
}

// Replicated takes what the WAIT and ROLE that followed the slot's call
// told. It runs before Complete, on the same goroutine.
func (s *slot) Replicated(rep pipeline.Replication) { s.rep = rep }

// judge sets kept on an agreement whose server counts: see durable, and
// the policy's Judge.
func (s *slot) judge() {
	if s.verdict != nil {
		return
	}
	d := s.t.durable
	if s.kept = s.durable(d); s.kept != nil {
		return
	}
	j, ok := s.r.policy.(Judge)
	if !ok {
		return
	}
	var m MasterState = noState{}
	if d != nil {
		m = d
	}
	s.kept = j.Counts(s.i, s.Answer, m)
}

// durable returns why an agreement that a failure of its server could
// lose does not count. Its write must have reached every replica the
// server had when the call was sent, and every one ROLE listed right
// after (or, without ROLE, the count now cached). A server that is a
// replica does not count either.
func (s *slot) durable(d Durability) error {
	if d == nil || s.r.spec.Lossy {
		return nil
	}
	return judgeDurable(d, s.target, s.role, s.rep)
}

// judgeDurable returns why an agreement of d's master does not count, or
// nil (see slot.durable). target is the replicas its WAIT asked for,
// role whether ROLE followed, rep what they told. Do and DoMany judge
// by it.
func judgeDurable(d Durability, target int, role bool, rep pipeline.Replication) error {
	// The count at the verdict: ROLE's, else the cache's, which an INFO
	// sent after the call (Admit) may have raised.
	n := d.Replicas()
	if role {
		var err error
		if n, err = d.Role(rep.Role); err != nil {
			return err
		}
	}
	need := max(target, n)
	if rep.Acked < need {
		return d.Unreplicated(rep.Acked, need, rep.WaitErr)
	}
	return nil
}

// follow sets in opts what makes a write to d's server durable: WAIT
// for the replicas it had, until waitEnd, then ROLE where the write may
// reach replicas: it had some, or some may join unannounced. It returns
// the replicas WAIT asks for. The count is read once: the verdict judges
// against it. A nil d needs nothing. Do and DoMany send by it.
func follow(d Durability, opts *pipeline.Options, waitEnd time.Time) (target int) {
	if d == nil {
		return 0
	}
	if target = d.Replicas(); target > 0 {
		opts.Wait, opts.WaitUntil = target, waitEnd
	}
	opts.Role = target > 0 || d.Unannounced()
	return target
}

// answered counts master i's answer, unless the count has closed. It
// runs the policy's Answered. It settles the call now if the round was
// decided. Else decide settles it.
func (r *round) answered(i int) {
	s := &r.slots[i]
	settles := r.spec.Undo != nil || r.policy.Settles(s.Answer)
	heard := answered(s.Err) && !s.skipped
	r.mu.Lock()
	// A call the deadline decided without counted as missed already.
	miss := !heard && Unanswered(s.Err) && !s.missed
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
	switch h := r.e.health; {
	case miss:
		h.missed(i, r.start)
	case heard && h.misses[i].Load() != 0 && time.Now().Before(r.deadline):
		h.heard(i) // the master answers in time again
	}
	r.policy.Answered(r.ctx, i, s.Answer)
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
	if s.Applied() && s.verdict == nil && s.server != "" {
		// One server counts once: the first of its masters to agree. A
		// master that refused does not stand for its server. The server
		// may hold the lock in another database. That verdict comes
		// before kept: the server counted already, whatever else.
		for j := range r.slots {
			if o := &r.slots[j]; j != i && o.read && o.agreed() && o.server == s.server {
				s.verdict = r.e.cfg.SameServer(j, i, s.server)
				break
			}
		}
	}
	if s.agreed() && s.server != "" {
		// A master of the same server that agreed earlier without
		// counting learns why it would not have counted anyway.
		for j := range r.slots {
			if o := &r.slots[j]; j != i && o.read && o.Applied() && o.verdict == nil && o.kept != nil && o.server == s.server {
				o.verdict = r.e.cfg.SameServer(i, j, s.server)
			}
		}
	}
	if !s.agreed() {
		r.refused++
		return
	}
	if r.agreed > 0 && s.Val != r.max {
		r.mixed = true
	}
	r.max = max(r.max, s.Val)
	r.agreed++
}

// undecidedLocked reports whether the answers counted decide nothing
// yet. Too few agreed, and enough may still. A silent master that has
// not answered may still agree, but is not waited for. r.mu must be held.
func (r *round) undecidedLocked() bool {
	q := r.e.cfg.Quorum
	return r.agreed < q && len(r.slots)-r.refused-r.silentLeftLocked() >= q
}

// silentLeftLocked counts the silent masters not counted yet. They may
// still agree, but the decision does not wait for them. r.mu must be
// held.
func (r *round) silentLeftLocked() int {
	n := 0
	for set := r.silent; set != 0; set &= set - 1 {
		if !r.slots[bits.TrailingZeros64(set)].read {
			n++
		}
	}
	return n
}

// decide ends the round's decision; failed is set. It settles the calls
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

// settle does what follows the decision on master i. After a success it
// runs the policy's Settled where Settles chose it. After a failure it
// undoes the call where it may have applied. It retries the undo in the
// background until the master answers. What may block runs on a
// goroutine of its own.
func (r *round) settle(i int) {
	u, s := r.spec.Undo, &r.slots[i]
	switch {
	case !r.failed:
		if !r.policy.Settles(s.Answer) {
			break
		}
		if work := r.policy.Settled(r.ctx, i, s.Answer, s.read); work != nil {
			r.background(work)
			return
		}
	case u == nil:
	case !s.MayHaveApplied():
		r.finished <- i
	default:
		r.background(func() {
			cu := Cleanup{u.Script, r.spec.Keys, u.Args}
			if s.Unknown() {
				cu.Args = u.Mark
			}
			err := r.e.tryCleanup(r.ctx, i, cu, true)
			r.finished <- i
			if err != nil {
				r.e.RetryLater(r.ctx, i, cu, u.KeyTTL)
			}
		})
		return
	}
	r.callDone()
}

// background runs f, then callDone, on a goroutine of its own under the
// round's pprof labels. It is a call of the round that goes on after its
// answer.
func (r *round) background(f func()) {
	go func() {
		pprof.SetGoroutineLabels(r.ctx)
		f()
		r.callDone()
	}()
}

// callDone ends a call of the round. The last one ends the calls'
// context.
func (r *round) callDone() {
	if r.running.Add(-1) == 0 {
		r.ctx.end()
	}
	r.e.cfg.Work.Leave(1)
}
