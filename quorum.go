package redlock

import (
	"context"
	"sync"
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
	ttl      time.Duration // > 0: the round also needs validity left
	sentinel error         // what a failed round wraps
}

// round is the shared state of one op's fan-out. The decider (Client.do)
// and one goroutine per master communicate through it:
//   - a goroutine writes its slot, then sends the slot's index on replies;
//   - the decider marks the slots it read, sets failed, then closes decided;
//   - after decided, a goroutine reads failed and its slot's read mark.
type round struct {
	op      *op
	slots   []slot
	replies chan int
	decided chan struct{}
	failed  bool
	undone  sync.WaitGroup // undo calls the decider waits for
	running atomic.Int32   // goroutines still running
	cancel  context.CancelFunc
}

type slot struct {
	val  int64
	err  error
	read bool // the decider saw this reply before deciding
}

func (s *slot) agreed() bool { return s.err == nil && s.val > 0 }

// do runs o on every master in parallel and decides as soon as a quorum has
// agreed or can no longer agree. Every call shares one deadline,
// NodeTimeout after the round starts: since all calls start together, that
// is each call's own timeout, and it also bounds the decision, whether or
// not the Redis client honours contexts. Calls still running after the
// decision go on in the background, bounded by the same deadline, so a
// release or extend still reaches slow masters.
//
// If the round fails and o.undo is set, o.undo runs on every master where
// o.script may have applied, with a fresh context: do waits for that on the
// masters whose agreement it saw, and masters that answer later undo their
// own reply in the background.
//
// It returns the time the round started; on failure a *QuorumError.
func (c *Client) do(ctx context.Context, o *op) (time.Time, error) {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return time.Time{}, ErrClosed
	}
	n := len(c.nodes)
	r := &round{
		op:      o,
		slots:   make([]slot, n),
		replies: make(chan int, n),
		decided: make(chan struct{}),
	}
	start := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, c.nodeTimeout)
	r.cancel = cancel
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
		case <-callCtx.Done():
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
	elapsed := time.Since(start)

	ok := agreed >= c.quorum
	expired := ok && o.ttl > 0 && Validity(o.ttl, elapsed, c.driftFactor) <= 0
	if ok && !expired {
		close(r.decided)
		return start, nil
	}
	if o.undo != nil {
		r.failed = true
		for i := range r.slots {
			if r.slots[i].read && r.slots[i].agreed() {
				r.undone.Add(1)
			}
		}
	}
	close(r.decided)
	err := c.quorumError(ctx, r, agreed, expired, timedOut, elapsed)
	r.undone.Wait()
	return start, err
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
	waited := s.agreed()
	r.replies <- i
	if o.undo == nil {
		return
	}
	<-r.decided
	if r.failed && mayHaveApplied {
		nd.undo(ctx, o.undo, o.keys, o.args)
	}
	if r.failed && waited && s.read {
		r.undone.Done()
	}
}

// quorumError describes a failed round. It reads only the slots the decider
// saw; the others are still being written by their goroutines.
func (c *Client) quorumError(ctx context.Context, r *round, agreed int, expired, timedOut bool, elapsed time.Duration) *QuorumError {
	e := &QuorumError{
		Op:       r.op.name,
		Key:      r.op.key,
		Quorum:   c.quorum,
		Agreed:   agreed,
		Expired:  expired,
		Elapsed:  elapsed,
		Masters:  make([]MasterResult, len(c.nodes)),
		sentinel: r.op.sentinel,
		ctxErr:   ctx.Err(),
	}
	for i := range c.nodes {
		m := MasterResult{Master: c.nodes[i].name}
		switch s := &r.slots[i]; {
		case s.read:
			m.Agreed, m.Err = s.agreed(), s.err
		case e.ctxErr != nil:
			m.Err = e.ctxErr
		case timedOut:
			m.Err = ErrNodeTimeout
		default:
			m.Err = ErrNoReply
		}
		e.Masters[i] = m
	}
	return e
}
