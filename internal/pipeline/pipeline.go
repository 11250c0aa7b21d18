// Package pipeline sends one Redis master's script calls, pipelining those
// made while another is in flight (auto-pipelining).
package pipeline

import (
	"context"
	"errors"
	"fmt"
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
}

// NewKeys returns the Keys of names; names must not change afterwards.
func NewKeys(names ...string) Keys {
	boxed := make([]any, len(names))
	for i, n := range names {
		boxed[i] = n
	}
	return Keys{Names: names, boxed: boxed}
}

const (
	// maxBatch bounds the calls written together: about 150 bytes each, so
	// a batch stays well under go-redis's write buffer.
	maxBatch = 128
	// maxQueued bounds the queued calls of one master that may be shed
	// (those not mustSend).
	maxQueued = 512
)

var (
	// ErrNotSent marks a call that surely did not reach its master: nothing
	// was applied there, so nothing needs undoing. Run never returns it
	// alone but wrapped with the reason: ErrQueueFull, ErrClosed,
	// ErrWithdrawn (RunWithdrawable), or the context's error when the
	// caller's context ended before the call was sent.
	ErrNotSent = errors.New("redlock: not sent")
	// ErrQueueFull is returned at once by a call that may be shed when its
	// master's queue is full: the master is slow or unreachable. It
	// matches ErrNotSent.
	ErrQueueFull = fmt.Errorf("%w: %d calls already queued for this master", ErrNotSent, maxQueued)
	// ErrClosed is returned by calls made after Close. It matches
	// ErrNotSent. This package cannot import redlock (which imports it),
	// so it does not match redlock.ErrClosed: the engine, which closes its
	// pipelines only in Client.Close, reports errors.Is(err, ErrClosed) as
	// redlock.ErrClosed.
	ErrClosed = fmt.Errorf("%w: client closed", ErrNotSent)
	// ErrWithdrawn is returned by a call of RunWithdrawable withdrawn from
	// the queue of a master that is behind (see Withdraw). It matches
	// ErrNotSent.
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

// Pipeline sends one master's script calls. A call made while the master is
// idle goes out at once, alone, exactly like Script.Run; calls made while
// one is in flight queue and go out together, as one pipelined write and
// read, when it ends. One drainer goroutine per master sends the queued
// batches, one at a time, and exits when the queue is empty, so at most one
// call or batch per master is in flight and a slow master holds at most one
// connection.
//
// A client without Pipeline() gets no batching: every call is a plain
// Script.Run.
//
// A batch fires go-redis's pipeline hooks, a call sent alone its process
// hooks. A Pipeline is safe for concurrent use.
type Pipeline struct {
	client redis.Scripter
	proc   processor     // a go-redis client; nil: calls sent alone go through Script.Run
	piper  pipeliner     // nil: the client cannot pipeline
	limit  time.Duration // bound of every batch and of every mustSend call

	fns     *Functions    // nil: scripts only (see UseFunctions)
	fnState atomic.Uint32 // fnUnknown, fnOn, fnOff

	// wg counts the calls accepted and not yet done with: Close waits for
	// it. busy, and its count in wg, is held by the call sent alone, then
	// handed to the drainer if calls queued meanwhile.
	wg sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	busy      bool
	busySince time.Time // when what is in flight was sent
	queue     []*call   // FIFO
	loose     int       // calls in queue that may be shed
	stats     stats

	// Loads of the library while fnState is unknown (see probeLocked).
	probing bool      // one is under way
	probed  time.Time // when the last one ended
	probes  int       // how many got no usable answer

	// Drainer state, reused from batch to batch.
	pipe  redis.Pipeliner
	batch []*call
	cmds  []redis.Cmder
}

// stats counts what a Pipeline did, for tests.
type stats struct {
	alone     int // calls sent at once, without a batch
	batches   int // pipelined writes of queued calls
	batched   int // calls sent in those
	dropped   int // queued calls not sent because their context had ended
	shed      int // calls refused because the queue was full
	resent    int // follow-up writes after NOSCRIPT or a missing function
	withdrawn int // calls of RunWithdrawable withdrawn
	skipped   int // calls of RunKept that Skip answered
}

// Skipper tells RunKept whether a call is needless: see RunKept. Its Skip
// runs with the Pipeline's lock held, and must not block.
type Skipper interface {
	Skip(i int) bool
}

// hooks are what RunWithdrawable and RunKept add to a call.
type hooks struct {
	group  *Group
	unsent *atomic.Uint64
	skip   Skipper
	index  int
}

// call is a call queued, or a mustSend call sent alone on a goroutine of
// its own. Until it is done, the caller reads no field but state, under
// Pipeline.mu.
type call struct {
	ctx      context.Context
	script   *redis.Script
	keys     Keys
	args     []any
	mustSend bool       // never refused for a full queue nor dropped once queued
	detach   bool       // sent alone on a goroutine of its own (Run's mustSend)
	argv     []any      // EVALSHA's or FCALL's arguments; its buffer is reused
	cmd      *redis.Cmd // what was sent
	hooks

	state     callState
	abandoned bool // the caller left; whoever holds the call recycles it
	val       int64
	err       error
	done      chan struct{} // receives once the call is done; cap 1
}

type callState uint8

const (
	queued callState = iota
	sent
	done
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// recycle returns c to callPool. Nothing may hold c any more, and c.done
// is empty.
func (c *call) recycle() {
	argv := c.argv
	clear(argv)
	*c = call{argv: argv[:0], done: c.done}
	callPool.Put(c)
}

// New returns the Pipeline of the master that client talks to. limit (> 0)
// bounds every call the Pipeline sends on its own: every batch (a batch
// runs until the latest deadline of its calls, or limit from when it is
// sent if one of them has no deadline or is mustSend) and every mustSend
// call sent alone (limit from when it is sent, whatever its context). New
// panics if limit is not positive.
func New(client redis.Scripter, limit time.Duration) *Pipeline {
	if limit <= 0 {
		panic("redlock: pipeline limit must be positive")
	}
	p := &Pipeline{client: client, limit: limit}
	switch c := client.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		// Their EvalSha is a Process of its command. Another type's may
		// be its own.
		p.proc = c.(processor)
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		// One pipeline for several servers: a slow one would hold up the
		// others' calls.
	default:
		if pc, ok := client.(pipeliner); ok {
			p.piper = pc
		}
	}
	return p
}

// Run runs s on the master and returns its integer reply. It blocks until
// the reply or until ctx ends, whichever comes first: ctx bounds the
// caller's wait even when the call joins a batch. When ctx ends first, Run
// returns ctx.Err() alone (not ErrNotSent): the call may be in flight, or,
// if mustSend, still queued, so it may yet be applied.
//
// An error matching ErrNotSent says the call was surely not sent, so
// nothing needs undoing: ctx ended before it was sent (the error also
// matches ctx.Err()), the master's queue was full (ErrQueueFull), or the
// Pipeline is closed (ErrClosed).
//
// A mustSend call (a release, an undo) is never refused for a full queue
// nor dropped when ctx ends: once accepted (that is, unless Run returns
// ErrClosed) it is sent, even after Run has returned, unless Abort drops
// it first: alone under a context that keeps ctx's values but not its
// cancellation nor its deadline, in a batch under the batch's own context,
// either way bounded by limit. A mustSend call sent alone therefore runs on a goroutine of its
// own, which Run waits for until ctx ends.
//
// keys and args are only read, but possibly after Run returns (a mustSend
// call), so the caller must not modify them afterwards. As go-redis does,
// a lone []string or []any argument is expanded; maps and structs are not.
func (p *Pipeline) Run(ctx context.Context, s *redis.Script, keys Keys, args []any, mustSend bool) (int64, error) {
	return p.run(ctx, s, keys, args, mustSend, mustSend, hooks{})
}

// RunKept is Run for a mustSend call whose caller's ctx cannot end before
// the call's own bound: sent alone, it runs on the caller's goroutine under
// ctx, which saves the goroutine and context of a detached send. Once
// queued it is sent, as a mustSend call is, whatever ctx does meanwhile;
// an ended ctx before it is queued sends nothing (ErrNotSent).
//
// If skip is not nil and skip.Skip(index) is true when the call would be
// sent, alone or in a batch, it is answered 0 instead, without being sent.
func (p *Pipeline) RunKept(ctx context.Context, s *redis.Script, keys Keys, args []any, skip Skipper, index int) (int64, error) {
	return p.run(ctx, s, keys, args, true, false, hooks{skip: skip, index: index})
}

// Group is the calls of RunWithdrawable that are withdrawn together: the
// calls of one quorum round, say. Its zero value is ready to use.
type Group struct {
	behind atomic.Int64 // > 0 once Withdraw was called: its behind
}

// RunWithdrawable is Run for a call that may be shed and that is withdrawn
// if it is still queued when Withdraw is called for group, or if it would
// be queued after that, on a master that is behind (see Withdraw): then it
// sets bit index of unsent, if not nil, and answers ErrWithdrawn.
func (p *Pipeline) RunWithdrawable(ctx context.Context, s *redis.Script, keys Keys, args []any, group *Group, unsent *atomic.Uint64, index int) (int64, error) {
	return p.run(ctx, s, keys, args, false, false, hooks{group: group, unsent: unsent, index: index})
}

// Withdraw takes back group's calls queued to this master, and those that
// would be queued to it later, while what the master has in flight ahead
// of them was sent at least behind (> 0) ago: the master is behind, and
// their answers are no longer awaited. Each call withdrawn sets its bit in
// its unsent before Withdraw returns (or before it would have been
// queued). It does not block on the master.
func (p *Pipeline) Withdraw(group *Group, behind time.Duration) {
	group.behind.Store(int64(max(behind, 1)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 || !p.behindLocked(group) {
		return
	}
	kept := p.queue[:0]
	for _, c := range p.queue {
		if c.group != group {
			kept = append(kept, c)
			continue
		}
		p.loose--
		p.withdrawnLocked(c.hooks)
		p.doneLocked(c, 0, ErrWithdrawn)
	}
	clear(p.queue[len(kept):])
	p.queue = kept
}

// behindLocked reports whether Withdraw was called for group and what is
// in flight was sent at least its behind ago. p.mu must be held, and the
// master busy.
func (p *Pipeline) behindLocked(group *Group) bool {
	b := group.behind.Load()
	return b > 0 && time.Since(p.busySince) >= time.Duration(b)
}

// withdrawnLocked counts a withdrawn call and sets its bit. p.mu must be
// held.
func (p *Pipeline) withdrawnLocked(h hooks) {
	p.stats.withdrawn++
	if h.unsent != nil {
		h.unsent.Or(1 << h.index)
	}
}

func (p *Pipeline) run(ctx context.Context, s *redis.Script, keys Keys, args []any, mustSend, detach bool, h hooks) (int64, error) {
	ended := ctx.Err()
	if ended != nil && !detach {
		return 0, notSent(ended)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	p.probeLocked()
	if h.skip != nil && h.skip.Skip(h.index) {
		p.stats.skipped++
		p.mu.Unlock()
		return 0, nil
	}
	if p.piper == nil || !p.busy && ended == nil {
		if p.piper != nil {
			p.busy, p.busySince = true, time.Now()
			p.stats.alone++
		}
		p.wg.Add(1)
		p.mu.Unlock()
		if detach {
			return p.runAloneDetached(ctx, s, keys, args)
		}
		v, err := p.runAlone(ctx, s, keys, args)
		if p.endAlone() {
			go p.drain()
		}
		return v, err
	}
	if h.group != nil && p.behindLocked(h.group) {
		// Its round was decided while this call was on its way.
		p.withdrawnLocked(h)
		p.mu.Unlock()
		return 0, ErrWithdrawn
	}
	if !mustSend {
		if p.loose >= maxQueued {
			p.stats.shed++
			p.mu.Unlock()
			return 0, ErrQueueFull
		}
		p.loose++
	}
	p.wg.Add(1) // so that Close waits for this call to be queued
	p.mu.Unlock()

	// Build the command outside the lock, then queue it.
	c := callPool.Get().(*call)
	c.ctx, c.script, c.keys, c.args, c.mustSend, c.detach, c.hooks = ctx, s, keys, args, mustSend, detach, h
	c.cmd = p.build(ctx, c, s, keys, args)
	p.mu.Lock()
	p.queue = append(p.queue, c)
	if !p.busy {
		// The master went idle meanwhile: nothing would take the queue.
		p.busy, p.busySince = true, time.Now()
		p.wg.Add(1)
		go p.drain()
	}
	p.mu.Unlock()
	p.wg.Done()
	return p.wait(ctx, c)
}

// runAloneDetached sends mustSend call s alone, on a goroutine of its own
// so that ctx's end cannot cut it, and waits for its reply or for ctx to
// end. The call holds busy (if the client pipelines) and a count in wg.
func (p *Pipeline) runAloneDetached(ctx context.Context, s *redis.Script, keys Keys, args []any) (int64, error) {
	c := callPool.Get().(*call)
	c.mustSend, c.detach, c.state = true, true, sent
	go p.sendAloneDetached(ctx, c, s, keys, args)
	return p.wait(ctx, c)
}

// sendAloneDetached sends mustSend call c, made with ctx, under a context
// that ctx's end cannot cut, bounded by limit, then ends it as a call sent
// alone.
func (p *Pipeline) sendAloneDetached(ctx context.Context, c *call, s *redis.Script, keys Keys, args []any) {
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.limit)
	v, err := p.runAlone(sendCtx, s, keys, args)
	cancel()
	p.mu.Lock()
	p.doneLocked(c, v, err)
	p.mu.Unlock()
	if p.endAlone() {
		p.drain()
	}
}

// endAlone ends a call sent alone, which holds busy (if the client
// pipelines) and a count in wg. It reports whether calls queued meanwhile:
// then the caller must run drain, which takes both over.
func (p *Pipeline) endAlone() (drain bool) {
	if p.piper == nil {
		p.wg.Done()
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 {
		p.busySince = time.Now() // the drainer's batch is next
		return true
	}
	p.busy = false
	p.wg.Done()
	return false
}

// evalSHA builds, in c's reused argument buffer, the EVALSHA command of s
// with keys and args.
func (c *call) evalSHA(ctx context.Context, s *redis.Script, keys Keys, args []any) *redis.Cmd {
	return c.command(ctx, evalSHAName, boxedHash(s), keys, args)
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
	return c.evalSHA(ctx, s, keys, args)
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

// runAlone sends s as Script.Run does (EVALSHA, then EVAL on NOSCRIPT),
// with the keys boxed once, or as an FCALL (see UseFunctions): where the
// master lost the function, after loading it again; as EVAL where the
// FCALL did not run and a script would (see asScript).
func (p *Pipeline) runAlone(ctx context.Context, s *redis.Script, keys Keys, args []any) (int64, error) {
	if p.proc == nil {
		return s.Run(ctx, p.client, keys.Names, args...).Int64()
	}
	c := callPool.Get().(*call)
	defer c.recycle()
	cmd := p.build(ctx, c, s, keys, args)
	_ = p.proc.Process(ctx, cmd)
	if p.fns != nil && noFunction(cmd.Err()) && p.loadFunctions(ctx, false) == nil {
		cmd = newCmd(ctx, cmd.Args())
		_ = p.proc.Process(ctx, cmd)
	}
	if p.asScript(cmd) {
		return s.Eval(ctx, p.client, keys.Names, args...).Int64()
	}
	return cmd.Int64()
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

// wait waits for call c, queued or sent alone, to be done or for ctx to
// end.
func (p *Pipeline) wait(ctx context.Context, c *call) (int64, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		p.mu.Lock()
		switch {
		case c.state == done:
			p.mu.Unlock()
			<-c.done
		case c.state == queued && !c.mustSend:
			p.withdrawLocked(c)
			p.mu.Unlock()
			c.recycle()
			return 0, notSent(ctx.Err())
		default: // sent, or must be sent: its sender recycles it
			c.abandoned = true
			p.mu.Unlock()
			return 0, ctx.Err()
		}
	}
	v, err := c.val, c.err
	c.recycle()
	return v, err
}

// withdrawLocked removes queued call c from the queue.
func (p *Pipeline) withdrawLocked(c *call) {
	for i, q := range p.queue {
		if q == c {
			n := copy(p.queue[i:], p.queue[i+1:])
			p.queue[i+n] = nil
			p.queue = p.queue[:i+n]
			p.loose--
			return
		}
	}
	panic("redlock: pipeline: queued call not in queue")
}

// drain sends the queued calls, batch after batch, until the queue is
// empty. It holds busy and its count in wg.
func (p *Pipeline) drain() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		batch := p.takeLocked()
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		p.busySince = time.Now()
		p.mu.Unlock()
		resent := p.send(batch)
		p.mu.Lock()
		p.finishLocked(batch, resent)
	}
}

// takeLocked moves up to maxBatch calls from the head of the queue into
// p.batch and returns it. A call that may be shed and whose context has
// ended is answered as not sent instead.
func (p *Pipeline) takeLocked() []*call {
	batch := p.batch[:0]
	taken := 0
	for _, c := range p.queue {
		if len(batch) == maxBatch {
			break
		}
		taken++
		if !c.mustSend {
			p.loose--
			if err := c.ctx.Err(); err != nil {
				p.stats.dropped++
				p.doneLocked(c, 0, notSent(err))
				continue
			}
		}
		if c.skip != nil && c.skip.Skip(c.index) {
			p.stats.skipped++
			p.doneLocked(c, 0, nil)
			continue
		}
		c.state = sent
		batch = append(batch, c)
	}
	n := copy(p.queue, p.queue[taken:])
	clear(p.queue[n:])
	p.queue = p.queue[:n]
	p.batch = batch
	return batch
}

// doneLocked answers c, or recycles it if its caller left.
func (p *Pipeline) doneLocked(c *call, val int64, err error) {
	if c.abandoned {
		c.recycle()
		return
	}
	c.val, c.err, c.state = val, err, done
	c.done <- struct{}{}
}

// send writes batch as one pipeline and reads the replies into each call's
// cmd; calls that did not run for want of their script or function are
// sent again, together (see resend). It reports whether it did that. The
// batch runs until the latest deadline of its calls, a call without one or
// mustSend counting as limit from now, and at most until then.
func (p *Pipeline) send(batch []*call) (resent bool) {
	limit := time.Now().Add(p.limit)
	var deadline time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok || c.mustSend {
			d = limit
		}
		if d.After(deadline) {
			deadline = d
		}
		p.cmds = append(p.cmds, c.cmd)
	}
	if deadline.After(limit) {
		deadline = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if p.pipe == nil {
		p.pipe = p.piper.Pipeline()
	}
	_ = p.pipe.BatchProcess(ctx, p.cmds...)
	clear(p.cmds)
	p.cmds = p.cmds[:0]
	_, _ = p.pipe.Exec(ctx) // each cmd holds its own error

	// A second resend: FCALLs sent after a FUNCTION LOAD that the master
	// refused go as EVAL.
	for range 2 {
		if !p.resend(ctx, batch) {
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
func (p *Pipeline) resend(ctx context.Context, batch []*call) bool {
	var load *redis.StatusCmd
	sent := false
	for _, c := range batch {
		if noFunction(c.cmd.Err()) && p.fnState.Load() == fnOn {
			if load == nil {
				load = p.fns.load(ctx)
				_ = p.pipe.Process(ctx, load) // queued on p.pipe, first
			}
			c.cmd = newCmd(ctx, c.cmd.Args())
			_ = p.pipe.Process(ctx, c.cmd)
			sent = true
		} else if p.asScript(c.cmd) {
			c.cmd = c.script.Eval(ctx, p.pipe, c.keys.Names, c.args...) // queued
			sent = true
		}
	}
	if !sent {
		return false
	}
	_, _ = p.pipe.Exec(ctx)
	if load != nil {
		_ = p.loaded(load.Err(), false)
	}
	return true
}

// finishLocked answers the calls of a batch that send has run.
func (p *Pipeline) finishLocked(batch []*call, resent bool) {
	p.stats.batches++
	p.stats.batched += len(batch)
	if resent {
		p.stats.resent++
	}
	for i, c := range batch {
		v, err := c.cmd.Int64()
		p.doneLocked(c, v, err)
		batch[i] = nil
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Close stops accepting calls and blocks until the calls already accepted
// are done: queued ones are still sent. A batch, or a mustSend call sent
// alone, takes at most limit; another call sent alone runs on its caller's
// goroutine until its reply or the end of its caller's context. Later
// calls return ErrClosed. Close does not close the client. It is
// idempotent and safe to call concurrently with Run.
func (p *Pipeline) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// Abort is Close that gives up on the queued calls: they are answered
// ErrClosed, mustSend ones included, and never sent. It still waits for
// what is in flight (a batch, a call sent alone), each bounded by limit.
func (p *Pipeline) Abort() {
	p.mu.Lock()
	p.closed = true
	for _, c := range p.queue {
		p.doneLocked(c, 0, ErrClosed)
	}
	clear(p.queue)
	p.queue, p.loose = p.queue[:0], 0
	p.mu.Unlock()
	p.wg.Wait()
}
