package redlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// op is one operation sent to every master at once.
type op struct {
	name     string        // "acquire", "extend", "release": for errors
	key      string        // the caller's key, for errors
	script   *redis.Script // run on every master
	undo     *redis.Script // run where script may have applied, if the round fails; nil for none
	keys     []string
	args     []any
	undoArgs []any // arguments of undo
	// late, if set, runs after a successful round on each master i that
	// agreed after the decision, or failed then (a timed-out write may
	// still land): such an agreement may land after the lock's release
	// (see Lock.lateAgreement).
	late func(ctx context.Context, i int)
	// after, if set, runs when master i has answered, with whether it
	// agreed (see Lock.releasedOn).
	after    func(ctx context.Context, i int, agreed bool)
	ttl      time.Duration // > 0: the round also needs validity left
	sentinel error         // what a failed round wraps
}

// outcome is what a successful round tells besides success.
type outcome struct {
	start time.Time // when the round started
	max   int64     // the largest reply among the agreeing masters seen
	mixed bool      // those replies were not all equal
}

// round is the shared state of one op's fan-out. The decider (Client.do)
// and one goroutine per master communicate through it:
//   - a goroutine writes its slot, then sends the slot's index on replies;
//   - the decider marks the slots it read, sets failed, then closes decided;
//   - after decided, a goroutine reads failed; if the round failed it
//     undoes its call and sends its index on finished.
type round struct {
	op       *op
	slots    []slot
	replies  chan int
	decided  chan struct{}
	failed   bool
	finished chan int     // masters done with their undo; nil without undo
	running  atomic.Int32 // goroutines still running
	cancel   context.CancelFunc
}

type slot struct {
	val  int64
	err  error
	read bool // the decider saw this reply before deciding
}

func (s *slot) agreed() bool { return s.err == nil && s.val > 0 }

// lateCallFactor times NodeTimeout bounds a call that its round was decided
// without.
const lateCallFactor = 4

// replyUpgrade is a master's reply when an owner that holds a read lock
// asks for the write lock.
const replyUpgrade = -1

// do runs o on every master in parallel and decides as soon as a quorum has
// agreed or can no longer agree. Every call shares one deadline,
// NodeTimeout after the round starts: since all calls start together, that
// is each call's own timeout, and it also bounds the decision, whether or
// not the Redis client honours contexts. Calls still running after the
// decision go on in the background, bounded by the same deadline, so a
// release or extend still reaches slow masters.
//
// If the round fails and o.undo is set, o.undo runs on every master where
// o.script may have applied, with a fresh context. do waits for that until
// every master is done or the round's deadline (or the caller's context)
// ends, and in any case for the masters whose agreement it saw; a master
// that answers later undoes its own reply in the background.
//
// On failure it returns a *QuorumError.
func (c *Client) do(ctx context.Context, o *op) (outcome, error) {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return outcome{}, ErrClosed
	}
	n := len(c.nodes)
	r := &round{
		op:      o,
		slots:   make([]slot, n),
		replies: make(chan int, n),
		decided: make(chan struct{}),
	}
	res := outcome{start: time.Now()}
	// Calls may finish after the decision (a release must still reach slow
	// masters), so they get longer than the decision: a call cut off
	// mid-reply costs the pool its connection.
	callCtx, cancel := context.WithTimeout(ctx, lateCallFactor*c.nodeTimeout)
	decideCtx, stopDecide := context.WithTimeout(callCtx, c.nodeTimeout)
	defer stopDecide()
	r.cancel = cancel
	if o.undo != nil {
		r.finished = make(chan int, n)
	}
	r.running.Store(int32(n))
	c.inflight.Add(n)
	c.mu.RUnlock()
	for i := range c.nodes {
		go c.call(callCtx, r, i)
	}

	agreed, refused := 0, 0
	tally := func(i int) {
		s := &r.slots[i]
		s.read = true
		if s.agreed() {
			if agreed > 0 && s.val != res.max {
				res.mixed = true
			}
			res.max = max(res.max, s.val)
			agreed++
		} else {
			refused++
		}
	}
	undecided := func() bool { return agreed < c.quorum && n-refused >= c.quorum }
	timedOut := false
wait:
	for undecided() {
		select {
		case i := <-r.replies:
			tally(i)
		case <-decideCtx.Done():
			// Count what already arrived; the rest missed the deadline.
			for undecided() {
				select {
				case i := <-r.replies:
					tally(i)
				default:
					timedOut = true
					break wait
				}
			}
		}
	}
	elapsed := time.Since(res.start)

	ok := agreed >= c.quorum
	expired := ok && o.ttl > 0 && Validity(o.ttl, elapsed, c.driftFactor) <= 0
	if ok && !expired {
		close(r.decided)
		return res, nil
	}
	r.failed = true
	close(r.decided)
	if r.finished != nil && r.awaitUndo(decideCtx.Done()) {
		timedOut = true
	}
	return outcome{}, c.quorumError(ctx, r, expired, timedOut, elapsed)
}

// awaitUndo waits until every master has undone its call, or done is
// closed while some are still running; even then it waits for the masters
// whose agreement the decider saw, as their keys surely exist and they
// answer quickly. It marks each master it heard from as read, and reports
// whether it stopped waiting with masters still running.
func (r *round) awaitUndo(done <-chan struct{}) (gaveUp bool) {
	known := 0
	for i := range r.slots {
		if r.slots[i].read && r.slots[i].agreed() {
			known++
		}
	}
	for left := len(r.slots); left > 0 && (!gaveUp || known > 0); {
		select {
		case i := <-r.finished:
			left--
			s := &r.slots[i]
			if s.read && s.agreed() {
				known--
			}
			s.read = true
		case <-done:
			done = nil
			gaveUp = r.running.Load() > 0 // else every index is already in finished
		}
	}
	return gaveUp
}

// call runs the round's script on master i and, if the round fails, undoes
// it there. It never blocks on the decider: replies is buffered for every
// master.
func (c *Client) call(ctx context.Context, r *round, i int) {
	defer c.inflight.Done()
	defer func() {
		if r.running.Add(-1) == 0 {
			r.cancel()
		}
	}()
	nd, o, s := &c.nodes[i], r.op, &r.slots[i]
	s.val, s.err = nd.eval(ctx, o.script, o.keys, o.args)
	mayHaveApplied := s.val > 0 || s.err != nil // a timed-out write may still land
	agreed := s.agreed()
	r.replies <- i
	if o.after != nil {
		o.after(ctx, i, agreed)
	}
	if o.undo == nil {
		return
	}
	<-r.decided
	if !r.failed {
		if mayHaveApplied && !s.read && o.late != nil {
			o.late(ctx, i)
		}
		return
	}
	if mayHaveApplied {
		nd.undo(ctx, o.undo, o.keys, o.undoArgs)
	}
	r.finished <- i
}

// quorumError describes a failed round. It reads only the slots the decider
// saw (including those awaitUndo heard from); the others may still be
// written by their goroutines.
func (c *Client) quorumError(ctx context.Context, r *round, expired, timedOut bool, elapsed time.Duration) *QuorumError {
	e := &QuorumError{
		Op:       r.op.name,
		Key:      r.op.key,
		Quorum:   c.quorum,
		Expired:  expired,
		Elapsed:  elapsed,
		Masters:  make([]MasterResult, len(c.nodes)),
		sentinel: r.op.sentinel,
		ctxErr:   ctx.Err(),
	}
	upgrades := 0
	for i := range c.nodes {
		m := MasterResult{Master: c.nodes[i].name}
		switch s := &r.slots[i]; {
		case s.read:
			m.Agreed, m.Err = s.agreed(), s.err
			if m.Agreed {
				e.Agreed++
			}
			if s.err == nil && s.val == replyUpgrade {
				m.Err = ErrUpgrade
				upgrades++
			}
		case e.ctxErr != nil:
			m.Err = e.ctxErr
		case timedOut:
			m.Err = ErrNodeTimeout
		default:
			m.Err = ErrNoReply
		}
		e.Masters[i] = m
	}
	// A stale read entry on a few masters is no upgrade: it takes a quorum.
	e.upgrade = upgrades >= c.quorum
	return e
}
