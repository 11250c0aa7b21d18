package quorum

import (
	"context"
	"sync"
	"time"
)

// expirer is an entry of a timeouts queue.
type expirer interface {
	// expire runs when the entry's time has come. It must not block.
	expire()
}

// timeouts expires entries a fixed time after each was added. One timer
// serves them all, rather than a time.Timer or context.WithTimeout per
// round. Every entry waits the same time, so entries expire in the order
// they were added. A cancelled entry is marked. It is dropped once no
// pending entry is ahead of it, or when the timer fires. The timer is then
// armed for the first entry still pending. While rounds end well within
// their deadlines, it fires about once per that time. Expiries run on the
// timer's goroutine, one at a time. It is safe for concurrent use. after
// is set by New, then never changed.
type timeouts struct {
	after time.Duration

	// mu guards the fields below.
	mu      sync.Mutex
	queue   []pending   // queue[first:] are entries head, head+1, ...; a cancelled one holds no expirer
	first   int         // queue[:first] were dropped
	head    uint64      // the number of queue[first]
	timer   *time.Timer // runs fire; armed while entries are queued and fire is not running
	firing  bool
	expired []expirer // fire's buffer
}

type pending struct {
	at time.Time
	e  expirer
}

// add queues e to expire after t.after. It returns e's deadline, and its
// number for cancel.
func (t *timeouts) add(e expirer) (time.Time, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := time.Now().Add(t.after) // under mu: entries stay in time order
	n := t.head + uint64(len(t.queue)-t.first)
	t.queue = append(t.queue, pending{at, e})
	if len(t.queue)-t.first == 1 && !t.firing {
		t.arm(t.after)
	}
	return at, n
}

// cancel marks entry n so that it does not expire. If it has expired or
// is expiring already, its expire may still run after cancel returns.
// Cancelled entries at the head of the queue are dropped at once, all but
// the last one queued. So the queue holds about as many entries as are
// pending, not as many as were added within t.after. Only fire empties
// the queue. add arms the timer when it finds the queue empty. So the
// queue cannot be empty while a fire is due or under way.
func (t *timeouts) cancel(n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n < t.head {
		return
	}
	t.queue[t.first+int(n-t.head)].e = nil
	for ; t.first < len(t.queue)-1 && t.queue[t.first].e == nil; t.first++ {
		t.queue[t.first] = pending{}
		t.head++
	}
	t.compact()
}

// stop stops the timer where every entry queued was cancelled. cancel
// leaves the last one for fire. So nothing fires after closing. An add
// arms the timer again. Entries still pending keep it armed.
func (t *timeouts) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.queue[t.first:] {
		if p.e != nil {
			return
		}
	}
	// Stop fails where fire is due or under way: then fire empties it.
	if t.timer != nil && t.timer.Stop() {
		t.head += uint64(len(t.queue) - t.first)
		clear(t.queue)
		t.queue, t.first = t.queue[:0], 0
	}
}

// quiet reports whether no entry is queued and the timer is not armed.
// It stops an armed timer to tell, so call it only once t is stopped.
func (t *timeouts) quiet() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	armed := t.timer != nil && t.timer.Stop()
	return len(t.queue) == t.first && !armed
}

// arm sets the timer to fire in d. t.mu must be held.
func (t *timeouts) arm(d time.Duration) {
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.fire)
		return
	}
	t.timer.Reset(d)
}

// fire expires the entries whose time has come. It drops the cancelled
// ones ahead of the first entry still pending, and arms the timer for it.
func (t *timeouts) fire() {
	t.mu.Lock()
	t.firing = true
	now := time.Now()
	expired := t.expired[:0]
	for ; t.first < len(t.queue); t.first++ {
		p := &t.queue[t.first]
		if p.e != nil {
			if p.at.After(now) {
				break
			}
			expired = append(expired, p.e)
		}
		*p = pending{}
		t.head++
	}
	t.compact()
	t.mu.Unlock()

	for _, e := range expired {
		e.expire()
	}
	clear(expired)

	t.mu.Lock()
	t.expired = expired[:0]
	t.firing = false
	if t.first < len(t.queue) {
		t.arm(time.Until(t.queue[t.first].at))
	}
	t.mu.Unlock()
}

// compact moves the entries queued to the front of t.queue once the
// dropped ones are as many. The array is then reused rather than grown.
// t.mu must be held.
func (t *timeouts) compact() {
	if t.first < len(t.queue)-t.first {
		return
	}
	n := copy(t.queue, t.queue[t.first:])
	clear(t.queue[n:])
	t.queue, t.first = t.queue[:n], 0
}

// callContext is the context of a round's calls. It has its parent's
// values, not its cancellation. It ends when the round's calls are done
// (end), or at its deadline. The Engine's timeouts queue fires the
// deadline. Its fields are set by newCallContext, then never changed.
type callContext struct {
	context.Context // a context.WithCancelCause without the parent's cancellation
	cancel          context.CancelCauseFunc
	deadline        time.Time
	q               *timeouts
	n               uint64
}

// newCallContext returns a callContext with parent's values that ends
// q.after from now at the latest.
func newCallContext(parent context.Context, q *timeouts) *callContext {
	c := &callContext{q: q}
	c.Context, c.cancel = context.WithCancelCause(context.WithoutCancel(parent))
	c.deadline, c.n = q.add(c)
	return c
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Err is context.DeadlineExceeded once the deadline ended c. Contexts
// derived from c then end with context.Canceled. Their cause is
// DeadlineExceeded.
func (c *callContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

func (c *callContext) expire() { c.cancel(context.DeadlineExceeded) }

// end ends c before its deadline.
func (c *callContext) end() {
	c.q.cancel(c.n)
	c.cancel(context.Canceled)
}
