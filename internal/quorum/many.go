package quorum

import (
	"context"
	"fmt"
	"math/bits"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// Many is a round of many independent items at once: each item has its
// own quorum, but one call to a master answers many items. The engine
// only reads it.
type Many struct {
	Items int // how many items the round decides
	// Timeout, if > 0, is the latest the round is decided, instead of
	// MasterTimeout. Its calls are bounded by LateCallFactor times it.
	Timeout time.Duration
	// Calls returns the calls to master i. Together they answer every
	// item once. It is called once per master, before anything is sent.
	Calls func(i int) []Call
}

// Call is one call of a Many round to a master. Its reply answers Items
// items from First on, in order. A call of one item goes through the
// master's pipeline and replies with an integer. A call of several goes
// alone, and replies with an array of integers. Neither is ever shed.
// Each is followed by WAIT and ROLE where Do's call would be, and its
// agreements are judged as Do judges them (see slot.durable).
type Call struct {
	Script       *redis.Script
	Keys         pipeline.Keys
	Args         []any
	First, Items int
}

// ManyOutcome is what a Many round decided, item by item.
type ManyOutcome struct {
	Start   time.Time     // when the round started
	Elapsed time.Duration // until the decision
	// TimedOut: the deadline, or ctx, decided before every item was.
	TimedOut bool
	m        *manyRound
}

// Agreed returns how many masters agreed to item, and counted, by the
// decision.
func (o ManyOutcome) Agreed(item int) int { return int(o.m.agreed[item]) }

// Master returns master i's part in item as the decision saw it. Only
// answers read by the decision are told. Latency is not measured.
func (o ManyOutcome) Master(i, item int) Result {
	ms := &o.m.masters[i]
	silent := o.m.silent&(1<<i) != 0
	if !ms.read[item] {
		return Result{Silent: silent}
	}
	a := Answer{Val: ms.vals[item], Err: ms.errs[item]}
	res := Result{Heard: true, Val: a.Val, Err: a.Err, Silent: silent && !answered(a.Err)}
	if a.Applied() { // a verdict judges agreements only, as in Do
		res.Verdict = ms.failure(item)
	}
	res.Agreed = ms.counts(item)
	return res
}

// manyRound is the shared state of a Many round. Each master's calls
// write its answers under mu, unless the decision closed the count.
type manyRound struct {
	e        *Engine
	items    int
	ready    chan struct{} // cap 1: every item is decided
	start    time.Time     // when the calls went out
	deadline time.Time     // of the decision: an answer after it is not in time
	waitEnd  time.Time     // when WAIT gives up: a quarter of the timeout before deadline
	silent   uint64        // the masters silent when the round began: not waited for
	// ctx is the calls' context, bounded by LateCallFactor times the
	// timeout. It ends once every answer is counted. Set before any call.
	ctx  context.Context
	asks []manyAsk // per master: its identity, asked once; each guards itself

	mu        sync.Mutex // guards the fields below and the masters' answers
	masters   []manyMaster
	agreed    []int32 // per item: agreements counted
	refused   []int32 // per item: other answers counted
	undecided int     // items neither agreed nor beyond agreeing
	pending   int     // masters whose calls have not all been answered
	closed    bool    // the decision was taken: later answers are not read
}

// manyMaster is one master's part of a Many round. Guarded by
// manyRound.mu.
type manyMaster struct {
	vals    []int64
	errs    []error
	read    []bool // the decision saw this item's answer
	left    int    // calls not answered yet
	server  string // "" if unknown
	verdict error  // why none of its agreements counts: its server's
	// kept, per item, is why its agreement does not count although its
	// server would: a failover could lose it (see judgeDurable). nil
	// until one is kept.
	kept []error
}

// manyAsk is a master's identity as asked once in a round. Its fields
// are written once, under once.
type manyAsk struct {
	once    sync.Once
	server  string
	verdict error
}

// failure returns why the agreement to item does not count, or nil.
func (ms *manyMaster) failure(item int) error {
	if ms.verdict != nil || ms.kept == nil {
		return ms.verdict
	}
	return ms.kept[item]
}

// counts reports whether the answer to item is an agreement that counts.
func (ms *manyMaster) counts(item int) bool {
	return (Answer{Val: ms.vals[item], Err: ms.errs[item]}).Applied() && ms.failure(item) == nil
}

// DoMany runs m on every master in parallel. Each item is decided on its
// own, as Do decides one: agreed by a quorum, or beyond it. The round
// ends once every item is decided, at m.Timeout (MasterTimeout unless
// set), or when ctx ends. Calls still running then go on in the
// background, bounded by LateCallFactor times that, and are not read.
// Nothing is undone. As in Do, a silent master counts as unable to agree
// until it answers, and is not waited for. Its calls of one item are
// sent; those of many are kept back (ErrSilent), but for a canary now
// and then (see health). WAIT and ROLE follow the calls, and judge the
// agreements, as in Do (see follow, judgeDurable). An agreement
// whose server must be asked who it is waits for it, once per master
// and round (per call where the master routes), as in Do: a replica's
// does not count.
// Validity is the caller's to judge from Start and Elapsed. Once the Work
// is closed, DoMany sends nothing and returns ErrClosed.
func (e *Engine) DoMany(ctx context.Context, m *Many) (ManyOutcome, error) {
	n := len(e.masters)
	calls := make([][]Call, n)
	total := 0
	for i := range n {
		calls[i] = m.Calls(i)
		total += len(calls[i])
	}
	if !e.cfg.Work.Enter(total) {
		return ManyOutcome{}, ErrClosed
	}
	r := &manyRound{e: e, items: m.Items, ready: make(chan struct{}, 1), masters: make([]manyMaster, n), asks: make([]manyAsk, n),
		agreed: make([]int32, m.Items), refused: make([]int32, m.Items), undecided: m.Items, pending: n}
	for i := range r.masters {
		ms := &r.masters[i]
		ms.vals, ms.errs, ms.read, ms.left = make([]int64, m.Items), make([]error, m.Items), make([]bool, m.Items), len(calls[i])
		if ms.left == 0 {
			r.pending--
		}
	}
	res := ManyOutcome{Start: time.Now(), m: r}
	if ctx.Err() != nil { // nothing sent: nothing is heard
		e.cfg.Work.Leave(total)
		r.closed, res.TimedOut = true, r.undecided > 0
		return res, nil
	}
	if m.Items == 0 {
		r.ready <- struct{}{}
	}
	timeout := e.cfg.MasterTimeout
	if m.Timeout > 0 {
		timeout = m.Timeout
	}
	r.start, r.deadline = res.Start, res.Start.Add(timeout)
	r.waitEnd = res.Start.Add(timeout * 3 / 4) // as in Do
	r.silent = e.health.silentSet()
	// The calls outlive the decision, never the caller's cancellation.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LateCallFactor*timeout)
	r.ctx = callCtx
	var running sync.WaitGroup
	for i := range calls {
		for _, c := range calls[i] {
			running.Add(1)
			r.send(i, c, &running)
		}
	}
	go func() { // ends the calls' context once the last is answered
		running.Wait()
		cancel()
	}()
	timer := time.NewTimer(timeout)
	expired := false
	select {
	case <-r.ready:
	case <-timer.C:
		expired = true
	case <-ctx.Done():
	}
	timer.Stop()
	r.mu.Lock()
	r.closed = true
	res.TimedOut = r.undecided > 0
	var missed uint64 // the masters the deadline decided without
	for i := range r.masters {
		if expired && res.TimedOut && r.masters[i].left > 0 {
			missed |= 1 << i
		}
	}
	r.mu.Unlock()
	for ; missed != 0; missed &= missed - 1 {
		e.health.missed(bits.TrailingZeros64(missed), r.start)
	}
	res.Elapsed = time.Since(res.Start)
	return res, nil
}

// send sends call c to master i. Its answer is counted when it comes.
func (r *manyRound) send(i int, c Call, running *sync.WaitGroup) {
	done := func() { // the answer is counted
		running.Done()
		r.e.cfg.Work.Leave(1)
	}
	var w written
	t, err := r.e.route(i, c.Keys)
	if err != nil {
		r.answered(i, c, nil, err, w, done)
		return
	}
	w.t = t
	opts := pipeline.Options{MustSend: true, Index: i}
	w.target = follow(t.durable, &opts, r.waitEnd)
	w.role = opts.Role
	if c.Items == 1 {
		t.Pipe.Go(r.ctx, c.Script, c.Keys, c.Args, opts, &manyCompletion{r: r, i: i, c: c, done: done, w: w})
		return
	}
	if r.silent&(1<<i) != 0 && !r.e.health.mayShed(i) {
		// A silent master would only pile up calls that hold a
		// connection each. Keeping them back is safe: a renewal that
		// fails is retried. Its canary, once per interval, is sent.
		r.answered(i, c, nil, ErrSilent, w, done)
		return
	}
	busy := &r.e.many[i].calls
	if busy.Add(1) > MaxManyCalls {
		// The master is behind: more would only queue for a connection.
		busy.Add(-1)
		r.answered(i, c, nil, ErrBehind, w, done)
		return
	}
	go func() {
		vals, rep, err := t.Pipe.RunValues(r.ctx, c.Script, c.Keys, c.Args, opts)
		busy.Add(-1)
		w.rep = rep
		r.answered(i, c, vals, err, w, done)
	}()
}

// MaxManyCalls bounds the calls of many items under way to one master.
// Each holds a connection until its reply, for up to LateCallFactor
// times the master timeout, while rounds may be decided much faster.
const MaxManyCalls = 8

// ErrBehind answers, unsent, a call of many items to a master that has
// MaxManyCalls under way already. It matches pipeline.ErrNotSent.
var ErrBehind = fmt.Errorf("%w: %d calls of many items already under way to this master", pipeline.ErrNotSent, MaxManyCalls)

// written is what followed a call's write, and what it asked: see
// follow and judgeDurable.
type written struct {
	t      target               // where the call went; zero if unsent
	target int                  // the replicas WAIT asked for
	role   bool                 // ROLE followed
	rep    pipeline.Replication // what they told
}

// manyCompletion is the pipeline's Completion of a call of one item.
type manyCompletion struct {
	r    *manyRound
	i    int
	c    Call
	done func() // once the answer is counted
	w    written
}

// Replicated takes what WAIT and ROLE told, before Complete.
func (d *manyCompletion) Replicated(rep pipeline.Replication) { d.w.rep = rep }

// Complete counts the answer. It runs on the pipeline, so it does not
// block: a server to ask who it is gets a goroutine (see answered).
func (d *manyCompletion) Complete(v int64, err error) {
	d.r.answered(d.i, d.c, []int64{v}, err, d.w, d.done)
}

// answered counts master i's answer vals, or err, to call c, whose write
// w followed, then calls done. An agreement whose server must be asked
// again (its pool opened a connection since) is held until asked, as Do
// holds it. The ask runs on a goroutine, so answered never blocks.
func (r *manyRound) answered(i int, c Call, vals []int64, err error, w written, done func()) {
	switch h := r.e.health; {
	case !answered(err) && Unanswered(err):
		h.missed(i, r.start) // counts once per stall, even if the deadline counted it
	case answered(err) && h.misses[i].Load() != 0 && time.Now().Before(r.deadline):
		h.heard(i) // the master answers in time again
	}
	r.e.answered(i, w.t, err)
	if err == nil && len(vals) != c.Items {
		err = errWrongCount
	}
	id := w.t.ID
	if id == nil { // its agreements count: nothing to ask
		r.count(i, c, vals, err, w, "", nil, true)
		done()
		return
	}
	server, verdict, known := id.Known()
	if known || err != nil || !anyApplied(vals) {
		// An identity unknown judges nothing here: no agreement.
		r.count(i, c, vals, err, w, server, verdict, known)
		done()
		return
	}
	go func() {
		pprof.SetGoroutineLabels(r.ctx)
		server, verdict := r.ask(i, id)
		r.count(i, c, vals, err, w, server, verdict, true)
		done()
	}()
}

// ask asks master i's server, id, who it is, under the calls' context.
// It asks once in the round: the master's other calls wait for the same
// answer. A master that routes has a server per call: each call asks.
func (r *manyRound) ask(i int, id Identity) (string, error) {
	if r.e.masters[i].Route != nil {
		return id.Admit(r.ctx)
	}
	a := &r.asks[i]
	a.once.Do(func() { a.server, a.verdict = id.Admit(r.ctx) })
	return a.server, a.verdict
}

// count counts master i's answer to call c. Its server and verdict are
// known only where identified: an unknown one judges no agreement.
func (r *manyRound) count(i int, c Call, vals []int64, err error, w written, server string, verdict error, identified bool) {
	var kept error
	if d := w.t.durable; d != nil && verdict == nil && err == nil && anyApplied(vals) {
		kept = judgeDurable(d, w.target, w.role, w.rep)
	}
	if r.e.masters[i].Route != nil {
		// Its calls reach several servers: each call's server judges
		// that call alone. None stands for the master in the round.
		if verdict != nil {
			kept = verdict
		}
		server, verdict = "", nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := &r.masters[i]
	if ms.left--; ms.left == 0 {
		r.pending--
	}
	if r.closed {
		return
	}
	switch {
	case !identified:
	case ms.server == "" && ms.verdict == nil:
		ms.server, ms.verdict = server, verdict
		r.sameServerLocked(i)
	case ms.verdict == nil && kept == nil:
		// The server was asked again in the round: its verdict judges
		// this call's agreements. A new server may count elsewhere.
		if kept = verdict; kept == nil && server != ms.server {
			kept = r.sameAsLocked(i, server)
		}
	}
	if kept != nil && ms.kept == nil {
		ms.kept = make([]error, r.items)
	}
	for k := range c.Items {
		item := c.First + k
		if kept != nil {
			ms.kept[item] = kept
		}
		if err != nil {
			ms.errs[item] = err
		} else {
			ms.vals[item] = vals[k]
		}
		r.tallyLocked(i, item)
	}
	if r.undecided == 0 || r.pending == 0 {
		select {
		case r.ready <- struct{}{}:
		default:
		}
	}
}

// anyApplied reports whether a reply agrees to some item.
func anyApplied(vals []int64) bool {
	for _, v := range vals {
		if (Answer{Val: v}).Applied() {
			return true
		}
	}
	return false
}

// errWrongCount is the error of a reply that does not answer each item.
var errWrongCount = errorString("quorum: the reply does not answer each item once")

type errorString string

func (e errorString) Error() string { return string(e) }

// manyState is the Engine's state of DoMany for one master.
type manyState struct {
	calls atomic.Int32 // calls of many items under way
}

// sameServerLocked keeps master i from counting where its server counts
// already through another master. It is stricter than Do, which judges
// each agreement: here none of i's counts. r.mu must be held.
func (r *manyRound) sameServerLocked(i int) {
	if ms := &r.masters[i]; ms.verdict == nil {
		ms.verdict = r.sameAsLocked(i, ms.server)
	}
}

// sameAsLocked returns why master i must not count as server, which
// counts already through another master, or nil. r.mu must be held.
func (r *manyRound) sameAsLocked(i int, server string) error {
	if server == "" {
		return nil
	}
	for j := range r.masters {
		if o := &r.masters[j]; j != i && o.server == server && o.verdict == nil {
			return r.e.cfg.SameServer(j, i, server)
		}
	}
	return nil
}

// tallyLocked counts master i's answer to item, and marks it read. r.mu
// must be held.
func (r *manyRound) tallyLocked(i, item int) {
	before := r.decidedLocked(item)
	ms := &r.masters[i]
	ms.read[item] = true
	if ms.counts(item) {
		r.agreed[item]++
	} else {
		r.refused[item]++
	}
	// A silent master's agreement may undo a decision its silence made:
	// the others not heard yet may make a quorum with it.
	switch after := r.decidedLocked(item); {
	case !before && after:
		r.undecided--
	case before && !after:
		r.undecided++
	}
}

// decidedLocked reports whether item's quorum agreed or no longer can. A
// silent master that has not answered may still agree, but is not waited
// for. r.mu must be held.
func (r *manyRound) decidedLocked(item int) bool {
	q := int32(r.e.cfg.Quorum)
	left := int32(0) // silent masters not heard on item
	for set := r.silent; set != 0; set &= set - 1 {
		if !r.masters[bits.TrailingZeros64(set)].read[item] {
			left++
		}
	}
	return r.agreed[item] >= q || int32(len(r.masters))-r.refused[item]-left < q
}
