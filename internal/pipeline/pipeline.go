// Package pipeline sends one Redis master's script calls, pipelining those
// made while another is in flight (auto-pipelining).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeliner is a master's client that can pipeline: *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient are.
type pipeliner interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// processor is a master's client that runs a command made by its caller.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Keys are the keys of a script call, also boxed for its command's
// arguments: made once with NewKeys, they serve many calls without boxing
// each key again. The zero Keys is no key.
type Keys struct {
	Names []string
	boxed []any
	hash  uint32 // of Names[0] (see laneOf)
}

// NewKeys returns the Keys of names; names must not change afterwards.
func NewKeys(names ...string) Keys {
	boxed := make([]any, len(names))
	for i, n := range names {
		boxed[i] = n
	}
	k := Keys{Names: names, boxed: boxed}
	if len(names) > 0 {
		k.hash = hashKey(names[0])
	}
	return k
}

// hashKey is FNV-1a.
func hashKey(key string) uint32 {
	h := uint32(2166136261)
	for i := range len(key) {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return h
}

const (
	// maxBatch bounds the calls written together: about 150 bytes each, so
	// a batch stays well under go-redis's write buffer.
	maxBatch = 128
	// maxQueued bounds the calls of one master that may be shed (those
	// not mustSend): queued in its lanes, or, for a client that cannot
	// pipeline, on their way through workers (not for a cluster client or
	// a ring, whose servers answer each on its own).
	maxQueued = 512
)

var (
	// ErrNotSent marks a call that surely did not reach its master: nothing
	// was applied there, so nothing needs undoing. A call is never
	// answered with it alone but wrapped with the reason: ErrQueueFull,
	// ErrClosed, ErrWithdrawn, or the context's error when the call's
	// context ended before it was sent.
	ErrNotSent = errors.New("redlock: not sent")
	// ErrQueueFull answers at once a call that may be shed when its
	// master's queue is full: the master is slow or unreachable. It
	// matches ErrNotSent.
	ErrQueueFull = fmt.Errorf("%w: %d calls already waiting for this master", ErrNotSent, maxQueued)
	// ErrClosed answers calls made after Close. It matches ErrNotSent.
	// This package cannot import redlock (which imports it), so it does
	// not match redlock.ErrClosed: the engine, which closes its pipelines
	// only in Client.Close, reports errors.Is(err, ErrClosed) as
	// redlock.ErrClosed.
	ErrClosed = fmt.Errorf("%w: client closed", ErrNotSent)
	// ErrWithdrawn answers a call withdrawn from the queue of a master that
	// is behind (see Withdraw). It matches ErrNotSent.
	ErrWithdrawn = fmt.Errorf("%w: withdrawn from the queue of a master that is behind", ErrNotSent)

	// The error of a call whose context ended before it was sent; each
	// also matches ctx.Err().
	errNotSentDeadline = fmt.Errorf("%w: %w", ErrNotSent, context.DeadlineExceeded)
	errNotSentCanceled = fmt.Errorf("%w: %w", ErrNotSent, context.Canceled)
)

// notSent is the error of a call not sent because its context ended with
// err.
func notSent(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errNotSentDeadline
	}
	return errNotSentCanceled
}

// Pipeline sends one master's script calls. Calls queue in one of its
// lanes, the lane of their first key, and each lane's sender goroutine
// sends them: a call made while its lane is idle goes out at once, alone,
// as Script.Run would send it; calls made while one is in flight go out
// together, as one pipelined write and read, when it ends, and with them,
// as a rule, the calls that its callers make as soon as they are answered
// (the sender yields to them first: see lane.yield). So at most one
// call or batch per lane is in flight, the calls of one lock reach the
// master in the order they were made, and a slow master holds at most one
// connection per lane. No goroutine waits for a call's reply: the sender
// hands each reply to the call's Completion.
//
// A client without Pipeline() gets no batching: every call is a plain
// Script.Run, on a goroutine of its own (reused from call to call), with
// the same bound on the calls that may be shed.
//
// A batch fires go-redis's pipeline hooks, a call sent alone its process
// hooks. A Pipeline is safe for concurrent use.
type Pipeline struct {
	client redis.Scripter
	proc   processor     // a go-redis client; nil: calls sent alone go through Script.Run
	piper  pipeliner     // nil: the client cannot pipeline
	shards bool          // a cluster client or a ring: several servers, no bound on the calls under way
	limit  time.Duration // bound of every call the Pipeline sends on its own

	fns     *Functions    // nil: scripts only (see UseFunctions)
	fnState atomic.Uint32 // fnUnknown, fnOn, fnOff

	// wg counts the calls accepted and not yet answered, and loads in the
	// background: Close waits for it.
	wg sync.WaitGroup
	// senders counts the lanes' senders; workers run the calls of a
	// client that cannot pipeline.
	senders sync.WaitGroup
	workers workers

	waitCap       time.Duration // the longest WAIT: half the client's ReadTimeout; 0 for no bound
	slowYield     time.Duration // see lane.yield: defaultSlowYield; tests may set it before the first call
	yieldsSkipped atomic.Int64  // yields skipped (see lane.yield), for tests

	mu      sync.Mutex
	closed  bool
	aborted bool // closed by Abort: a call accepted meanwhile is answered ErrClosed
	lanes   []lane
	loose   int // calls that may be shed queued in every lane, or on their way through workers
	stats   stats

	// Loads of the library while fnState is unknown (see probeLocked).
	probing bool      // one is under way
	probed  time.Time // when the last one ended
	probes  int       // how many got no usable answer
}

// lane is a queue of a Pipeline with its own sender and connection: the
// calls of one lock (those whose first key is the same) always go through
// the same lane, one batch at a time, so that they reach the master in the
// order they were made, as they would through a single connection. Its
// fields are guarded by Pipeline.mu, but for the sender's own.
type lane struct {
	p         *Pipeline
	wake      chan struct{} // cap 1: a token for the idle sender
	up        bool          // the sender goroutine runs
	busy      bool          // the sender has calls to send, or in flight
	sending   bool          // the sender has a call or batch in flight
	busySince time.Time     // when that was sent
	queue     []*call       // FIFO

	// The sender's own, reused from batch to batch.
	pipe    redis.Pipeliner
	batch   []*call
	cmds    []redis.Cmder
	dropped []answer

	noYieldUntil time.Time // the sender's own: see yield
}

// stats counts what a Pipeline did, for tests.
type stats struct {
	alone     int // calls sent without a batch
	batches   int // pipelined writes of two or more queued calls
	batched   int // calls sent in those
	dropped   int // queued calls not sent because their context had ended
	shed      int // calls refused because the queue was full
	resent    int // follow-up writes after NOSCRIPT or a missing function
	withdrawn int // calls withdrawn (see Withdraw)
	skipped   int // calls that Skip answered
}

// Completion receives the outcome of a call started with Go.
type Completion interface {
	// Complete receives the script's integer reply, or why there is none
	// (see Run for the errors). It is called once per call: on the
	// Pipeline's goroutine that sent the call, or dropped it unsent from
	// its queue; or, for a call answered without being sent, on the
	// goroutine that called Go, Withdraw or Abort. It must not block:
	// other calls' replies wait for it.
	Complete(v int64, err error)
}

// Skipped is a Completion told that Skip answered its call: the master
// was not asked. Skipped runs just before Complete(0, nil), on the same
// goroutine. It must not block.
type Skipped interface {
	Skipped()
}

// noteSkipped tells done, if it asks, that Skip answered its call.
func noteSkipped(done Completion) {
	if s, ok := done.(Skipped); ok {
		s.Skipped()
	}
}

// Skipper tells whether a call is needless: see Options.Skip. Its Skip
// runs with the Pipeline's lock held, and must not block.
type Skipper interface {
	Skip(i int) bool
}

// Options are what Go may do with a call besides sending it.
type Options struct {
	// MustSend: the call is never refused for a full queue, and once
	// queued it is sent whatever its context does meanwhile: in a batch
	// under the batch's own context, alone under the call's context
	// while that lasts, else under one that keeps only its values,
	// bounded by limit.
	MustSend bool
	// Skip, if not nil, is asked whether the call is needless, with
	// Index, when the call is made and again when it would be sent; if
	// Skip(Index) is true the call is answered 0 instead, unsent (see
	// Skipped).
	Skip Skipper
	// Group, if not nil, withdraws the call if it is still queued when
	// Withdraw is called for Group, or would be queued after that, on a
	// master that is behind (see Withdraw): then it sets bit Index of
	// Unsent, if not nil, and is answered ErrWithdrawn. Not with MustSend.
	Group  *Group
	Unsent *atomic.Uint64
	Index  int
	// Wait, if > 0, follows the call with WAIT on its connection, in the
	// same write: how many replicas acknowledged it goes to the
	// Completion's Replicated, if it has one. WAIT waits for Wait
	// replicas until WaitUntil, and at least 1ms, but at most half the
	// client's ReadTimeout: a read that times out costs the connection.
	// A batch sends one WAIT after its last call: it covers every write
	// of the connection before it. Only a client that pipelines sends
	// it; others answer 0.
	Wait      int
	WaitUntil time.Time
	// Role follows the call, and its WAIT, with ROLE on its connection.
	// What the server is right after the write, and which replicas it
	// then has, go to the Completion's Replicated. A batch sends one
	// ROLE after its WAIT. Only a client that pipelines sends it; others
	// answer errNoRole.
	Role bool
}

// Replication is what the commands that followed a call told (see
// Options.Wait and Options.Role).
type Replication struct {
	Acked   int   // the replicas that acknowledged the write; 0 where WAIT failed or was not sent
	WaitErr error // why WAIT failed, if it was sent
	Role    Role  // with Options.Role only
}

// Role is ROLE's answer on the connection of a call, right after it.
type Role struct {
	Name string // "master", "slave" or "sentinel"; "" where Err is set
	// Replicas counts the replicas a master lists: those online, which
	// WAIT can count. 0 for another role.
	Replicas int
	Err      error // why there is no answer
}

// errNoRole is the Role of a call whose client cannot pipeline.
var errNoRole = errors.New("redlock: ROLE not sent: the client cannot pipeline")

// Replicator is a Completion that takes what followed its call (see
// Options.Wait and Options.Role).
type Replicator interface {
	// Replicated receives WAIT's and ROLE's answers. It runs just
	// before Complete, on the same goroutine, and must not block.
	Replicated(r Replication)
}

// call is a call accepted. The Pipeline owns it until it is answered, then
// puts it back in callPool.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   Keys
	args   []any
	// detach: sent alone, the call's context never cuts it (Run's
	// mustSend: its caller stops waiting when that context ends).
	detach bool
	// queuedBehind: the call queued behind another in flight; sent alone,
	// it is still bounded as in a batch (see sendContext).
	queuedBehind bool
	argv         []any      // EVALSHA's or FCALL's arguments; its buffer is reused
	cmd          *redis.Cmd // what is sent
	done         Completion
	rep          Replication // what followed it, with Wait or Role; set by the sender
	Options
}

// answer is a call's outcome, for Completion once no lock is held.
type answer struct {
	c       *call
	val     int64
	err     error
	skipped bool // Skip answered it
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// recycle returns c to callPool; nothing may hold c any more.
func (c *call) recycle() {
	argv := c.argv
	clear(argv)
	*c = call{argv: argv[:0]}
	callPool.Put(c)
}

// Ordered reports whether the calls on one key reach the master in the
// order they were made, through one lane: the client pipelines (not a
// cluster client, a ring, nor a client of another kind, whose calls go
// through workers). Two exceptions: a call answered NOSCRIPT, or told that
// the function is missing, goes again after the calls that followed it;
// and a call whose reply timed out may still be on its way when the next
// ones go out on a new connection, and land after them.
func (p *Pipeline) Ordered() bool { return p.piper != nil }

// LanesPerMaster is how many batches of calls a client keeps in flight to
// each of its masters (the lanes of New): two in all at least, so that
// the client reads one master's replies while the masters work on the
// others. With several masters their batches overlap already; with one, a
// single batch in flight would leave the master idle while the client
// handles its replies, and the other way round. The calls of one lock
// always go through the same lane, in order.
func LanesPerMaster(masters int) int {
	if masters == 1 {
		return 2
	}
	return 1
}

// New returns the Pipeline of the master that client talks to, with lanes
// (> 0) lanes: batches in flight at once. limit (> 0) bounds every call
// the Pipeline sends under a context of its own: every batch (a batch runs
// until the latest deadline of its calls, or limit from when it is sent if
// one of them has no deadline or is MustSend), and every call sent alone
// whose context has no deadline, has ended (MustSend) or must not cut it
// (Run's mustSend). New panics if limit or lanes is not positive.
func New(client redis.Scripter, limit time.Duration, lanes int) *Pipeline {
	if limit <= 0 || lanes <= 0 {
		panic("redlock: pipeline limit and lanes must be positive")
	}
	p := &Pipeline{client: client, limit: limit, slowYield: defaultSlowYield}
	switch c := client.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		// Their EvalSha is a Process of its command. Another type's may
		// be its own.
		p.proc = c.(processor)
	}
	if c, ok := client.(*redis.Client); ok {
		// A WAIT that outlasts the read timeout costs its connection.
		switch rt := c.Options().ReadTimeout; {
		case rt == 0:
			p.waitCap = 3 * time.Second / 2 // go-redis's default is 3s
		case rt > 0:
			p.waitCap = rt / 2
		}
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		// One pipeline for several servers: a slow one would hold up the
		// others' calls, and its calls on their way count toward no
		// bound, which would shed theirs.
		p.shards = true
	default:
		if pc, ok := client.(pipeliner); ok {
			p.piper = pc
		}
	}
	p.workers.init(p.sendWorked)
	p.lanes = make([]lane, lanes)
	for i := range p.lanes {
		p.lanes[i] = lane{p: p, wake: make(chan struct{}, 1)}
	}
	return p
}

// laneOf returns the lane of the calls with keys.
func (p *Pipeline) laneOf(keys Keys) *lane {
	h := keys.hash
	if h == 0 && len(keys.Names) > 0 {
		h = hashKey(keys.Names[0])
	}
	return &p.lanes[h%uint32(len(p.lanes))]
}

// Go starts s on the master, with keys and args, and returns at once;
// done.Complete receives the outcome (see Completion). It never blocks on
// the master.
//
// A call whose context has ended is answered as not sent (ErrNotSent, also
// matching ctx.Err()), unless MustSend. A call that may be shed is refused
// with ErrQueueFull when the master's queue is full, and one still queued
// when its context ends is dropped, answered as not sent. Once sent, a
// call's context bounds the wait for its reply, as go-redis's contexts do
// (a batch waits until the latest deadline of its calls).
//
// keys and args are only read, until the call is answered: the caller
// must not modify them meanwhile. As go-redis does, a lone []string or
// []any argument is expanded; maps and structs are not.
func (p *Pipeline) Go(ctx context.Context, s *redis.Script, keys Keys, args []any, o Options, done Completion) {
	p.start(ctx, s, keys, args, o, false, done)
}

// start is Go; detach is call.detach.
func (p *Pipeline) start(ctx context.Context, s *redis.Script, keys Keys, args []any, o Options, detach bool, done Completion) {
	if err := ctx.Err(); err != nil && !o.MustSend {
		done.Complete(0, notSent(err))
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		done.Complete(0, ErrClosed)
		return
	}
	p.probeLocked()
	var refused error
	switch {
	case o.Skip != nil && o.Skip.Skip(o.Index):
		p.stats.skipped++
		p.mu.Unlock()
		noteSkipped(done)
		done.Complete(0, nil)
		return
	case o.Group != nil && p.laneOf(keys).behindLocked(o.Group):
		// Its round was decided while this call was on its way.
		p.withdrawnLocked(o)
		refused = ErrWithdrawn
	case p.sheds(o) && p.loose >= maxQueued:
		p.stats.shed++
		refused = ErrQueueFull
	default:
		if p.sheds(o) {
			p.loose++ // before the lock is let go: the bound holds
		}
		p.wg.Add(1)
		p.mu.Unlock()
		p.accept(ctx, s, keys, args, o, detach, done)
		return
	}
	p.mu.Unlock()
	done.Complete(0, refused)
}

// accept builds the call, outside the lock, and queues it, or hands it to a
// worker if the client cannot pipeline. The call counts in wg.
func (p *Pipeline) accept(ctx context.Context, s *redis.Script, keys Keys, args []any, o Options, detach bool, done Completion) {
	c := callPool.Get().(*call)
	c.ctx, c.script, c.keys, c.args, c.Options, c.detach, c.done = ctx, s, keys, args, o, detach, done
	if p.proc != nil || p.piper != nil {
		c.cmd = p.build(ctx, c, s, keys, args) // a batch needs it too
	}
	if p.piper == nil {
		p.workers.run(c)
		return
	}
	ln := p.laneOf(keys)
	p.mu.Lock()
	if p.aborted {
		if p.sheds(c.Options) {
			p.loose--
		}
		p.mu.Unlock()
		p.answer(c, 0, ErrClosed)
		return
	}
	c.queuedBehind = ln.sending
	ln.queue = append(ln.queue, c)
	wake := !ln.busy
	if wake {
		ln.busy = true
		if !ln.up {
			ln.up = true
			p.senders.Add(1)
			go ln.sender()
			wake = false // it starts with the queue
		}
	}
	p.mu.Unlock()
	if wake {
		ln.wakeSender()
	}
}

// wakeSender wakes the lane's sender, idle until now. Its channel holds at
// most one token: one per time the sender went idle.
func (ln *lane) wakeSender() {
	select {
	case ln.wake <- struct{}{}:
	default:
	}
}

// answer hands a call's outcome to its Completion and lets the call go.
func (p *Pipeline) answer(c *call, v int64, err error) {
	done, rep, follows := c.done, c.rep, c.Wait > 0 || c.Role
	if follows && c.Role && p.piper == nil {
		rep.Role.Err = errNoRole
	}
	c.recycle()
	if follows {
		if r, ok := done.(Replicator); ok {
			r.Replicated(rep)
		}
	}
	done.Complete(v, err)
	p.wg.Done()
}

// answerAll answers as, and clears it.
func (p *Pipeline) answerAll(as []answer) []answer {
	for i, a := range as {
		if a.skipped {
			noteSkipped(a.c.done)
		}
		p.answer(a.c, a.val, a.err)
		as[i] = answer{}
	}
	return as[:0]
}

// Run runs s on the master and returns its integer reply: Go, and a wait
// for the reply or for ctx to end, whichever comes first. When ctx ends
// first, Run returns ctx.Err() alone (not ErrNotSent): the call may be in
// flight, or, if mustSend, still queued, so it may yet be applied. A call
// still queued that may be shed is then withdrawn: Run returns ErrNotSent.
//
// An error matching ErrNotSent says the call was surely not sent, so
// nothing needs undoing: ctx ended before it was sent (the error also
// matches ctx.Err()), the master's queue was full (ErrQueueFull), or the
// Pipeline is closed (ErrClosed).
//
// A mustSend call (a release, an undo) is never refused for a full queue
// nor dropped when ctx ends: once accepted (that is, unless Run returns
// ErrClosed) it is sent, even after Run has returned, unless Abort drops
// it first, under a context that keeps ctx's values but not its
// cancellation nor its deadline, bounded by limit.
func (p *Pipeline) Run(ctx context.Context, s *redis.Script, keys Keys, args []any, mustSend bool) (int64, error) {
	w := &waiter{reply: make(chan answer, 1)}
	p.start(ctx, s, keys, args, Options{MustSend: mustSend}, mustSend, w)
	select {
	case a := <-w.reply:
		return a.val, a.err
	case <-ctx.Done():
	}
	if !mustSend && p.withdrawQueued(w) {
		return 0, notSent(ctx.Err())
	}
	select {
	case a := <-w.reply: // it came meanwhile
		return a.val, a.err
	default:
		return 0, ctx.Err()
	}
}

// waiter is the Completion of a call of Run.
type waiter struct{ reply chan answer }

func (w *waiter) Complete(v int64, err error) { w.reply <- answer{val: v, err: err} }

// withdrawQueued takes the call answered to done out of the queue, if it
// is still there, and reports whether it was.
func (p *Pipeline) withdrawQueued(done Completion) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.lanes {
		ln := &p.lanes[l]
		for i, c := range ln.queue {
			if c.done == done {
				n := copy(ln.queue[i:], ln.queue[i+1:])
				ln.queue[i+n] = nil
				ln.queue = ln.queue[:i+n]
				p.loose--
				c.recycle()
				p.wg.Done()
				return true
			}
		}
	}
	return false
}

// Group is the calls that are withdrawn together: the calls of one quorum
// round, say. Its zero value is ready to use.
type Group struct {
	behind atomic.Int64 // > 0 once Withdraw was called: its behind
}

// Withdraw takes back group's calls queued to this master, and those that
// would be queued to it later, while what the master has in flight ahead
// of them was sent at least behind (> 0) ago: the master is behind, and
// their answers are no longer awaited. Each call withdrawn sets its bit in
// its Unsent, and is answered ErrWithdrawn, before Withdraw returns (or
// when Go is called). It does not block on the master.
func (p *Pipeline) Withdraw(group *Group, behind time.Duration) {
	group.behind.Store(int64(max(behind, 1)))
	var withdrawn []answer
	p.mu.Lock()
	for l := range p.lanes {
		ln := &p.lanes[l]
		if len(ln.queue) == 0 || !ln.behindLocked(group) {
			continue
		}
		kept := ln.queue[:0]
		for _, c := range ln.queue {
			if c.Group != group {
				kept = append(kept, c)
				continue
			}
			p.loose--
			p.withdrawnLocked(c.Options)
			withdrawn = append(withdrawn, answer{c: c, err: ErrWithdrawn})
		}
		clear(ln.queue[len(kept):])
		ln.queue = kept
	}
	p.mu.Unlock()
	p.answerAll(withdrawn)
}

// behindLocked reports whether Withdraw was called for group and the lane
// has in flight what it sent at least group's behind ago. p.mu must be
// held.
func (ln *lane) behindLocked(group *Group) bool {
	b := group.behind.Load()
	return b > 0 && ln.sending && time.Since(ln.busySince) >= time.Duration(b)
}

// withdrawnLocked counts a withdrawn call and sets its bit. p.mu must be
// held.
func (p *Pipeline) withdrawnLocked(o Options) {
	p.stats.withdrawn++
	if o.Unsent != nil {
		o.Unsent.Or(1 << o.Index)
	}
}

// sender sends the lane's queued calls, batch after batch, and waits for
// more while the queue is empty, until Close.
func (ln *lane) sender() {
	p := ln.p
	defer p.senders.Done()
	for answered := false; ; answered = true {
		p.mu.Lock()
		ln.sending = false
		if answered {
			// Nothing is in flight while it yields: a call queued
			// meanwhile is not behind.
			p.mu.Unlock()
			ln.yield()
			p.mu.Lock()
		}
		for len(ln.queue) == 0 {
			ln.busy = false
			if p.closed {
				ln.up = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			<-ln.wake
			p.mu.Lock()
		}
		batch := ln.takeLocked()
		ln.sending, ln.busySince = len(batch) > 0, time.Now()
		if len(batch) == 1 {
			p.stats.alone++
		} else if len(batch) > 1 {
			p.stats.batches++
			p.stats.batched += len(batch)
		}
		p.mu.Unlock()
		ln.dropped = p.answerAll(ln.dropped)
		switch len(batch) {
		case 0:
		case 1:
			c := batch[0]
			batch[0] = nil
			p.sendOne(c)
		default:
			pprof.SetGoroutineLabels(batch[0].ctx)
			if ln.send(batch) {
				p.mu.Lock()
				p.stats.resent++
				p.mu.Unlock()
			}
			for i, c := range batch {
				v, err := c.cmd.Int64()
				batch[i] = nil
				p.answer(c, v, err)
			}
		}
	}
}

// defaultSlowYield is Pipeline.slowYield: a yield lets the callers just
// answered run, each for microseconds; one that takes longer most likely
// waited for goroutines that ran for a time slice of Go's scheduler
// (10ms). It is above the few milliseconds for which a busy machine
// deschedules a thread now and then (2ms stopped the yields of a benchmark
// on one master from 16 goroutines for seconds at a time).
const defaultSlowYield = 5 * time.Millisecond

// noYieldFor is how long a lane's sender does not yield after a yield
// that took longer than Pipeline.slowYield.
const noYieldFor = time.Second

// yield lets the callers that the sender has just answered run before it
// takes its next batch, so that their next calls (a release after its
// acquire, the next acquire) join that batch rather than wait a round trip
// behind one sent without them. A yield that took longer than slowYield
// says that other goroutines keep the processors busy: the sender, at the
// back of Go's global run queue, would wait behind them once more per
// batch, so it does not yield for noYieldFor.
func (ln *lane) yield() {
	start := time.Now()
	if start.Before(ln.noYieldUntil) {
		ln.p.yieldsSkipped.Add(1)
		return
	}
	runtime.Gosched()
	if end := time.Now(); end.Sub(start) > ln.p.slowYield {
		ln.noYieldUntil = end.Add(noYieldFor)
	}
}

// takeLocked moves up to maxBatch calls from the head of the queue into
// ln.batch and returns it. A call that may be shed and whose context has
// ended is answered as not sent instead, and one that Skip finds needless
// is answered 0: both go to ln.dropped, for answering once p.mu is let go.
func (ln *lane) takeLocked() []*call {
	p := ln.p
	batch := ln.batch[:0]
	taken := 0
	for _, c := range ln.queue {
		if len(batch) == maxBatch {
			break
		}
		taken++
		if !c.MustSend {
			p.loose--
			if err := c.ctx.Err(); err != nil {
				p.stats.dropped++
				ln.dropped = append(ln.dropped, answer{c: c, err: notSent(err)})
				continue
			}
		}
		if c.Skip != nil && c.Skip.Skip(c.Index) {
			p.stats.skipped++
			ln.dropped = append(ln.dropped, answer{c: c, skipped: true})
			continue
		}
		batch = append(batch, c)
	}
	n := copy(ln.queue, ln.queue[taken:])
	clear(ln.queue[n:])
	ln.queue = ln.queue[:n]
	if len(batch) > 0 {
		for _, c := range ln.queue { // queued while nothing was in flight, past maxBatch
			c.queuedBehind = true
		}
	}
	ln.batch = batch
	return batch
}

// sendContext returns the context to send call c alone under, and its
// cancel (nil for c's own context): c's own while it lasts and has a
// deadline within limit, unless c must not be cut by it (detached, or
// MustSend and queued behind another call, as a batch would be); else one
// bounded by limit, without c's cancellation where c must be sent.
func (p *Pipeline) sendContext(c *call) (context.Context, context.CancelFunc) {
	d, ok := c.ctx.Deadline()
	left := time.Until(d) // meaningless where !ok
	// A context may report its end some time after its deadline (the
	// engine's end when a shared timer fires).
	ended := c.ctx.Err() != nil || ok && left <= 0
	must := c.detach || c.MustSend && (c.queuedBehind || ended)
	if !must && ok && left <= p.limit {
		return c.ctx, nil
	}
	if must {
		return context.WithTimeout(context.WithoutCancel(c.ctx), p.limit)
	}
	return context.WithTimeout(c.ctx, p.limit)
}

// sendAlone sends call c alone (see sendContext for its context).
func (p *Pipeline) sendAlone(c *call) (int64, error) {
	ctx, cancel := p.sendContext(c)
	if cancel != nil {
		defer cancel()
	}
	return p.runAlone(ctx, c)
}

// sendOne sends call c alone and answers it, under its caller's pprof
// labels (none where it has none): how a lane sends a batch of one, and a
// worker a call of a client that cannot pipeline.
func (p *Pipeline) sendOne(c *call) {
	pprof.SetGoroutineLabels(c.ctx)
	v, err := p.sendAlone(c)
	p.answer(c, v, err)
}

// sheds reports whether a call with options o counts toward maxQueued,
// and so may be shed.
func (p *Pipeline) sheds(o Options) bool { return !o.MustSend && !p.shards }

// sendWorked is sendOne on a worker: a call that may be shed counts
// toward maxQueued until it is answered, so that a master that does not
// answer holds at most that many workers (and their connections) for them.
func (p *Pipeline) sendWorked(c *call) {
	pprof.SetGoroutineLabels(c.ctx)
	v, err := p.sendAlone(c)
	if p.sheds(c.Options) {
		p.mu.Lock()
		p.loose--
		p.mu.Unlock()
	}
	p.answer(c, v, err)
}

// The command names, boxed once: a string boxed anew allocates.
var evalSHAName, fcallName any = "evalsha", "fcall"

// build builds the command of call c: FCALL where p sends them, else
// EVALSHA.
func (p *Pipeline) build(ctx context.Context, c *call, s *redis.Script, keys Keys, args []any) *redis.Cmd {
	if p.fns != nil && p.fnState.Load() == fnOn {
		if cmd := c.fcall(ctx, p.fns, s, keys, args); cmd != nil {
			return cmd
		}
	}
	return c.command(ctx, evalSHAName, boxedHash(s), keys, args)
}

// command builds, in c's reused argument buffer, the command name (EVALSHA
// or FCALL) of script or function id, with keys and args.
func (c *call) command(ctx context.Context, name, id any, keys Keys, args []any) *redis.Cmd {
	c.argv = append(c.argv, name, id, len(keys.Names))
	if keys.boxed != nil {
		c.argv = append(c.argv, keys.boxed...)
	} else {
		for _, k := range keys.Names {
			c.argv = append(c.argv, k)
		}
	}
	c.argv = appendArgs(c.argv, args)
	return newCmd(ctx, c.argv)
}

// newCmd returns the command argv of a script or function call (EVALSHA,
// EVAL, FCALL: the keys from the fourth argument on).
func newCmd(ctx context.Context, argv []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	if argv[2] != 0 {
		cmd.SetFirstKeyPos(3) // as go-redis does, for cluster routing
	}
	return cmd
}

// runAlone sends call c under ctx as Script.Run does (EVALSHA, then EVAL on
// NOSCRIPT), with the keys boxed once, or as an FCALL (see UseFunctions):
// where the master lost the function, after loading it again; as EVAL
// where the FCALL did not run and a script would (see asScript).
func (p *Pipeline) runAlone(ctx context.Context, c *call) (int64, error) {
	return p.runCmd(ctx, c).Int64()
}

// runCmd is runAlone, and returns the command answered.
func (p *Pipeline) runCmd(ctx context.Context, c *call) *redis.Cmd {
	s, keys, args := c.script, c.keys, c.args
	if p.proc == nil {
		return s.Run(ctx, p.client, keys.Names, args...)
	}
	cmd := c.cmd // built with the call's context; ctx is what bounds it
	p.process(ctx, c, cmd)
	if p.fns != nil && noFunction(cmd.Err()) && p.loadFunctions(ctx, false) == nil {
		cmd = newCmd(ctx, cmd.Args())
		p.process(ctx, c, cmd)
	}
	if p.asScript(cmd) {
		if !p.follows(c) {
			return s.Eval(ctx, p.client, keys.Names, args...)
		}
		pipe := p.piper.Pipeline()
		cmd = s.Eval(ctx, pipe, keys.Names, args...) // queued
		p.execFollowed(ctx, pipe, []*call{c})
	}
	return cmd
}

// follows reports whether call c is followed by WAIT or ROLE.
func (p *Pipeline) follows(c *call) bool { return (c.Wait > 0 || c.Role) && p.piper != nil }

// process sends cmd, call c's command, alone. Where WAIT or ROLE follow
// it, they go in one pipelined write on one connection. So it fires the
// pipeline hooks.
func (p *Pipeline) process(ctx context.Context, c *call, cmd redis.Cmder) {
	if !p.follows(c) {
		_ = p.proc.Process(ctx, cmd)
		return
	}
	pipe := p.piper.Pipeline()
	_ = pipe.Process(ctx, cmd)
	p.execFollowed(ctx, pipe, []*call{c})
}

// execFollowed queues the WAIT and ROLE that calls need on pipe, sends
// what pipe holds, and gives their answers to calls.
func (p *Pipeline) execFollowed(ctx context.Context, pipe redis.Pipeliner, calls []*call) {
	f := p.followUp(ctx, calls)
	f.queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	f.answer(calls)
}

// followUp is the WAIT and ROLE that follow a write of calls.
type followUp struct {
	wait *redis.IntCmd   // nil: none waits
	role *redis.SliceCmd // nil: none asks
}

// followUp returns what follows calls: WAIT for the most replicas any
// asks, until the latest WaitUntil, and ROLE where any asks.
func (p *Pipeline) followUp(ctx context.Context, calls []*call) followUp {
	var f followUp
	if p.piper == nil {
		return f
	}
	f.wait = p.batchWait(ctx, calls)
	for _, c := range calls {
		if c.Role {
			f.role = redis.NewSliceCmd(ctx, "role")
			break
		}
	}
	return f
}

// queue queues f on pipe, WAIT first: ROLE then tells the replicas
// after the wait.
func (f followUp) queue(ctx context.Context, pipe redis.Pipeliner) {
	if f.wait != nil {
		_ = pipe.Process(ctx, f.wait)
	}
	if f.role != nil {
		_ = pipe.Process(ctx, f.role)
	}
}

// answer gives f's answers to the calls that asked for them.
func (f followUp) answer(calls []*call) {
	var rep Replication
	if f.wait != nil {
		rep.Acked, rep.WaitErr = int(f.wait.Val()), f.wait.Err()
	}
	var role Role
	if f.role != nil {
		role = parseRole(f.role)
	}
	for _, c := range calls {
		if c.Wait > 0 {
			c.rep.Acked, c.rep.WaitErr = rep.Acked, rep.WaitErr
		}
		if c.Role {
			c.rep.Role = role
		}
	}
}

// parseRole reads ROLE's answer. A master's is its role, its offset,
// and one entry per online replica.
func parseRole(cmd *redis.SliceCmd) Role {
	v, err := cmd.Result()
	if err != nil {
		return Role{Err: err}
	}
	if len(v) == 0 {
		return Role{Err: errors.New("redlock: ROLE answered an empty array")}
	}
	name, ok := v[0].(string)
	if !ok {
		return Role{Err: fmt.Errorf("redlock: ROLE answered role %v", v[0])}
	}
	r := Role{Name: name}
	if name == "master" {
		if len(v) < 3 {
			return Role{Err: fmt.Errorf("redlock: ROLE answered %d fields for a master", len(v))}
		}
		replicas, ok := v[2].([]any)
		if !ok {
			return Role{Err: fmt.Errorf("redlock: ROLE answered replicas %v", v[2])}
		}
		r.Replicas = len(replicas)
	}
	return r
}

// waitCmd returns WAIT for replicas until until, at least 1ms: WAIT 0
// would block for good. It waits at most waitCap.
func (p *Pipeline) waitCmd(ctx context.Context, replicas int, until time.Time) *redis.IntCmd {
	d := time.Until(until)
	if p.waitCap > 0 {
		d = min(d, p.waitCap)
	}
	return redis.NewIntCmd(ctx, "wait", replicas, max(d.Milliseconds(), 1))
}

// batchWait returns the WAIT that covers the waiting calls of batch, or
// nil if none waits: for the most replicas any asks, until the latest
// WaitUntil.
func (p *Pipeline) batchWait(ctx context.Context, batch []*call) *redis.IntCmd {
	replicas, until := 0, time.Time{}
	for _, c := range batch {
		if c.Wait > 0 {
			replicas = max(replicas, c.Wait)
			if c.WaitUntil.After(until) {
				until = c.WaitUntil
			}
		}
	}
	if replicas == 0 {
		return nil
	}
	return p.waitCmd(ctx, replicas, until)
}

// scriptHashes maps a *redis.Script to its SHA1 as an any, so that queued
// calls do not box it each time.
var scriptHashes sync.Map

func boxedHash(s *redis.Script) any {
	if h, ok := scriptHashes.Load(s); ok {
		return h
	}
	h := s.Hash()
	if h == "" { // a server-side SHA not loaded yet: EVALSHA meets NOSCRIPT
		return h
	}
	v, _ := scriptHashes.LoadOrStore(s, any(h))
	return v
}

// appendArgs appends args to argv as go-redis's Eval does for the common
// cases: a lone []string or []any is expanded.
func appendArgs(argv []any, args []any) []any {
	if len(args) == 1 {
		switch a := args[0].(type) {
		case []string:
			for _, s := range a {
				argv = append(argv, s)
			}
			return argv
		case []any:
			return append(argv, a...)
		case nil:
			return argv
		}
	}
	return append(argv, args...)
}

// send writes batch as one pipeline and reads the replies into each call's
// cmd; calls that did not run for want of their script or function are
// sent again, together (see resend). It reports whether it did that. The
// batch runs until the latest deadline of its calls, a call without one or
// MustSend counting as limit from now, and at most until then.
func (ln *lane) send(batch []*call) (resent bool) {
	p := ln.p
	limit := time.Now().Add(p.limit)
	var deadline time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok || c.MustSend { // a detached call is MustSend
			d = limit
		}
		if d.After(deadline) {
			deadline = d
		}
		ln.cmds = append(ln.cmds, c.cmd)
	}
	if deadline.After(limit) {
		deadline = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if ln.pipe == nil {
		ln.pipe = p.piper.Pipeline()
	}
	// One WAIT and one ROLE after the batch cover every write of its
	// connection.
	f := p.followUp(ctx, batch)
	if f.wait != nil {
		ln.cmds = append(ln.cmds, f.wait)
	}
	if f.role != nil {
		ln.cmds = append(ln.cmds, f.role)
	}
	_ = ln.pipe.BatchProcess(ctx, ln.cmds...)
	clear(ln.cmds)
	ln.cmds = ln.cmds[:0]
	_, _ = ln.pipe.Exec(ctx) // each cmd holds its own error
	f.answer(batch)

	// A second resend: FCALLs sent after a FUNCTION LOAD that the master
	// refused go as EVAL.
	for range 2 {
		if !ln.resend(ctx, batch) {
			break
		}
		resent = true
	}
	return resent
}

// resend sends again, together, the calls of a batch that did not run
// because the master lacked their script or function: FCALLs after a
// FUNCTION LOAD, EVALSHAs as EVAL (see asScript). It reports whether it
// sent any.
func (ln *lane) resend(ctx context.Context, batch []*call) bool {
	p := ln.p
	var load *redis.StatusCmd
	var resent []*call
	for _, c := range batch {
		if noFunction(c.cmd.Err()) && p.fnState.Load() == fnOn {
			if load == nil {
				load = p.fns.load(ctx)
				_ = ln.pipe.Process(ctx, load) // queued on ln.pipe, first
			}
			c.cmd = newCmd(ctx, c.cmd.Args())
			_ = ln.pipe.Process(ctx, c.cmd)
			resent = append(resent, c)
		} else if p.asScript(c.cmd) {
			c.cmd = c.script.Eval(ctx, ln.pipe, c.keys.Names, c.args...) // queued
			resent = append(resent, c)
		}
	}
	if resent == nil {
		return false
	}
	// The calls sent again write only now, maybe on another connection:
	// a WAIT and ROLE of their own cover them.
	p.execFollowed(ctx, ln.pipe, resent)
	if load != nil {
		_ = p.loaded(load.Err(), false)
	}
	return true
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Close stops accepting calls and blocks until the calls already accepted
// are answered: queued ones are still sent. A batch takes at most limit; a
// call sent alone, until its reply or the end of its context (limit, where
// that has no deadline or must not cut it). Later calls are answered
// ErrClosed. Close does not close the client. It is idempotent and safe to
// call concurrently with Go and Run.
func (p *Pipeline) Close() {
	p.mu.Lock()
	p.closeLocked()
	p.mu.Unlock()
	p.wait()
}

// closeLocked marks p closed and wakes the idle senders, so that they
// end. p.mu must be held.
func (p *Pipeline) closeLocked() {
	if p.closed {
		return
	}
	p.closed = true
	for l := range p.lanes {
		if ln := &p.lanes[l]; ln.up && !ln.busy {
			ln.wakeSender()
		}
	}
}

// wait waits for every accepted call to be answered, then for the senders
// and the workers to end.
func (p *Pipeline) wait() {
	p.wg.Wait()
	p.senders.Wait()
	p.workers.end()
}

// Abort is Close that gives up on the queued calls: they are answered
// ErrClosed, MustSend ones included, and never sent. It still waits for
// what is in flight (a batch, a call sent alone).
func (p *Pipeline) Abort() {
	p.mu.Lock()
	p.closeLocked()
	p.aborted = true
	var aborted []answer
	for l := range p.lanes {
		ln := &p.lanes[l]
		for _, c := range ln.queue {
			if p.sheds(c.Options) {
				p.loose--
			}
			aborted = append(aborted, answer{c: c, err: ErrClosed})
		}
		clear(ln.queue)
		ln.queue = ln.queue[:0]
	}
	p.mu.Unlock()
	p.answerAll(aborted)
	p.wait()
}
