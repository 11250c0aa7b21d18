package redlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// A Client renews all its auto-renewed locks as a session does: one
// goroutine plans them all, by next renewal time, and renews those due
// together in batches. A batch is one call per master for many locks
// (extend_many in scripts.lua). Each lock is still decided by its own
// quorum. So the goroutines, calls and timers do not grow with the locks
// held, and renewals never queue behind acquires.
const (
	// renewBatchKeys bounds the keys of one batch's call to a master.
	// It keeps a script call at a few milliseconds on a master.
	renewBatchKeys = 512
	// renewInFlight bounds the batches under way at once.
	renewInFlight = 4
	// renewWindow: a lock due within it joins a batch whose first lock is
	// due. Batches of a steady stream of locks come that far apart.
	renewWindow = 50 * time.Millisecond
)

// renewer renews a Client's auto-renewed locks. Its goroutine and its
// batches count in gate.renewals. It is made ready on first use.
type renewer struct {
	mu       sync.Mutex // guards the fields below, and each renewal's
	queue    renewQueue // every renewal, busy ones last
	idle     sync.Cond  // on mu: a batch ended
	started  bool       // the goroutine runs, or ran
	closed   bool       // Client.Close stopped renewal: nothing is added
	inflight int        // batches under way
	wake     chan struct{}
	ctx      context.Context // of the batches: cancelled by close
	cancel   context.CancelFunc
}

// renewal is one Lock's auto-renewal. It is the context of its rounds and
// events: its Done closes once the renewal ended. l and done are set at
// creation; the other fields are guarded by renewer.mu.
type renewal struct {
	l     *Lock
	rn    *renewer
	done  chan struct{}
	at    int64 // when it is due, in ns since the client's epoch; max while busy
	index int   // in the queue; -1 once ended
	busy  bool  // in a batch under way
	ended bool  // done is closed
}

// A renewal is a context.Context: that of the library's own goroutine.

func (r *renewal) Deadline() (time.Time, bool) { return time.Time{}, false }
func (r *renewal) Done() <-chan struct{}       { return r.done }

func (r *renewal) Err() error {
	select {
	case <-r.done:
		return context.Canceled
	default:
		return nil
	}
}

// Value has the values of the lock's first acquire, such as the span
// of the work the lock guards.
func (r *renewal) Value(key any) any {
	if key == (backgroundKey{}) {
		return true
	}
	if o := r.l.origin; o != nil {
		return o.Value(key)
	}
	return nil
}

// stop ends the renewal, then waits until no batch renews it. Its
// context ends first, so no later batch takes it. A batch under way runs
// on: it renews other locks too, under rn.ctx, which only close cancels.
// So stop waits for that batch: its round alone may take up to
// lateCallFactor*MasterTimeout.
func (r *renewal) stop() {
	rn := r.rn
	rn.mu.Lock()
	rn.endLocked(r)
	for r.busy {
		rn.idle.Wait()
	}
	rn.mu.Unlock()
}

// replanned moves r's next turn after an Extend set the lock's TTL to ttl
// and its deadline to until: the turn may come sooner. It does not block
// on I/O. A renewal under way plans from what it finds.
func (r *renewal) replanned(ttl time.Duration, until time.Time) {
	rn := r.rn
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if r.busy || r.ended {
		return
	}
	r.at = r.l.client.since(until.Add(-2 * ttl / 3))
	heap.Fix(&rn.queue, r.index)
	if r.index == 0 {
		rn.wakeLocked()
	}
}

// renewQueue is a min-heap of renewals by due time.
type renewQueue []*renewal

func (q renewQueue) Len() int           { return len(q) }
func (q renewQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *renewQueue) Push(x any) {
	r := x.(*renewal)
	r.index = len(*q)
	*q = append(*q, r)
}
func (q *renewQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	r.index = -1
	return r
}

// add starts renewing l, due a third of its TTL into its validity, less
// a random twelfth (see after). It
// starts the goroutine on first use. It returns nil once Close has
// begun. l.mu must be held.
func (rn *renewer) add(l *Lock) *renewal {
	c := l.client
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.closed || c.gate.closing() {
		return nil
	}
	if !rn.started {
		rn.started = true
		rn.idle.L = &rn.mu
		rn.wake = make(chan struct{}, 1)
		rn.ctx, rn.cancel = context.WithCancel(inBackground(context.Background()))
		c.gate.renewals.Add(1)
		go rn.run(c)
	}
	r := &renewal{l: l, rn: rn, done: make(chan struct{})}
	r.at = c.since(l.Until().Add(-2*l.ttl/3 - jitter(l.ttl/12)))
	heap.Push(&rn.queue, r)
	if r.index == 0 {
		rn.wakeLocked()
	}
	return r
}

func (rn *renewer) wakeLocked() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

// endLocked ends r: it leaves the queue and its context ends. rn.mu must
// be held.
func (rn *renewer) endLocked(r *renewal) {
	if r.ended {
		return
	}
	r.ended = true
	close(r.done)
	if r.index >= 0 {
		heap.Remove(&rn.queue, r.index)
	}
}

// close stops renewal for Client.Close. Every renewed lock is lost with
// ErrClosed, and each renewal's context ends. The caller then waits for
// gate.renewals.
func (rn *renewer) close() {
	rn.mu.Lock()
	rn.closed = true
	if !rn.started {
		rn.mu.Unlock()
		return
	}
	rn.cancel()
	locks := make([]*Lock, 0, len(rn.queue))
	for len(rn.queue) > 0 {
		r := rn.queue[0]
		locks = append(locks, r.l)
		rn.endLocked(r)
	}
	rn.wakeLocked()
	rn.mu.Unlock()
	for _, l := range locks {
		l.lose(ErrClosed)
		l.report()
	}
}

// since returns t as ns since the client's epoch.
func (c *Client) since(t time.Time) int64 { return int64(t.Sub(c.epoch)) }

// run starts the batches as their locks come due, until close.
func (rn *renewer) run(c *Client) {
	defer c.gate.renewals.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		rn.mu.Lock()
		if rn.closed {
			rn.mu.Unlock()
			return
		}
		wait := time.Duration(math.MaxInt64)
		var batch []*renewal
		if rn.inflight < renewInFlight {
			batch, wait = rn.takeLocked(c)
		}
		if batch != nil {
			rn.inflight++
			c.gate.renewals.Add(1)
			go rn.renew(c, batch)
			rn.mu.Unlock()
			continue
		}
		rn.mu.Unlock()
		if wait == math.MaxInt64 {
			wait = time.Hour
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-rn.wake:
			timer.Stop() // no stale tick is received after it (Go 1.23)
		}
	}
}

// takeLocked takes the renewals due within renewWindow, once the first is
// due, up to a batch's keys, and marks them busy. Else it returns how
// long until the next is due. rn.mu must be held.
func (rn *renewer) takeLocked(c *Client) ([]*renewal, time.Duration) {
	now := c.since(time.Now())
	var batch []*renewal
	keys := 0
	// Nothing goes before the first is due. Then what is due soon joins
	// it: the next batch comes a window later, not at once with a sliver.
	for len(rn.queue) > 0 && keys < renewBatchKeys && rn.queue[0].at <= now+int64(renewWindow) {
		r := rn.queue[0]
		if r.busy || batch == nil && r.at > now {
			break
		}
		batch = append(batch, r)
		keys += len(r.l.keys.Names)
		r.busy, r.at = true, math.MaxInt64
		heap.Fix(&rn.queue, 0)
	}
	if batch != nil || len(rn.queue) == 0 || rn.queue[0].busy {
		return batch, math.MaxInt64
	}
	return nil, time.Duration(max(rn.queue[0].at-now, 0))
}

// renew renews batch, then plans each renewal's next turn.
func (rn *renewer) renew(c *Client, batch []*renewal) {
	defer c.gate.renewals.Done()
	next := make([]time.Time, len(batch)) // zero: the renewal ended
	rn.renewMany(c, batch, next)
	rn.mu.Lock()
	for i, r := range batch {
		r.busy = false
		switch {
		case r.ended:
		case next[i].IsZero() || rn.closed:
			rn.endLocked(r)
		default:
			r.at = c.since(next[i])
			heap.Fix(&rn.queue, r.index)
		}
	}
	rn.inflight--
	rn.idle.Broadcast()
	rn.wakeLocked()
	rn.mu.Unlock()
}

// after reports the outcome err of r's renewal, and returns when to renew
// next, or the zero time if the renewal ended. A failed renewal is retried
// sooner, after a random part of a tenth of the TTL (MasterTimeout at
// least), so that locks renewed together retry apart. The lock is lost
// once the next try could not end within the validity left.
func (r *renewal) after(err error) time.Time {
	l := r.l
	ttl := l.currentTTL() // what the renewal used: an Extend may have changed it since
	mt := l.client.masterTimeout
	retry := max(ttl/10, mt)
	switch {
	case err == nil:
		if !l.observeHeld(r, EventRenewed, nil) {
			return time.Time{}
		}
		// A third of the TTL into the validity, less a random twelfth:
		// locks taken together spread out.
		return l.Until().Add(-2*ttl/3 - jitter(ttl/12))
	case r.Err() != nil, errors.Is(err, ErrClosed): // Close loses the lock
		return time.Time{}
	case time.Until(l.Until()) < retry+mt:
		// The next attempt could not finish in time.
		var qe *QuorumError
		if errors.As(err, &qe) && qe.sentinel == ErrNoQuorum {
			err = qe.lost("too little validity left to try again") // said once, not wrapped again
		} else if !errors.Is(err, ErrNotHeld) {
			err = fmt.Errorf("%w: renew %s: %w", ErrNotHeld, quote(l.key), err)
		}
		l.lose(err)
		l.report()
		return time.Time{}
	default:
		if !l.observeHeld(r, EventRenewalFailed, err) {
			return time.Time{}
		}
		return time.Now().Add(retry - jitter(retry/2))
	}
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// renewItem is one lock of a batch of several.
type renewItem struct {
	r     *renewal
	ttl   time.Duration
	end   time.Time // the deadline the round would set: for repairs
	holds int64
	err   error // the renewal's outcome
}

// renewMany renews batch in one Many round: per master
// one call for them all (for each group of renewBatchKeys keys) where
// the master batches (node.batches), else one call per lock. It writes each renewal's
// next turn into next. A lock that another operation holds is retried
// soon, apart.
func (rn *renewer) renewMany(c *Client, batch []*renewal, next []time.Time) {
	items := make([]renewItem, 0, len(batch))
	for i, r := range batch {
		l := r.l
		if !l.mu.TryLock() { // an Extend or Release under way
			next[i] = time.Now().Add(jitter(c.masterTimeout))
			continue
		}
		it := renewItem{r: r}
		if it.err = l.checkHeld("renew"); it.err == nil {
			it.ttl, it.holds = l.ttl, int64(l.holds)
			it.end = c.deadline(time.Now(), it.ttl)
			l.sendsTTL(it.ttl)
		}
		items = append(items, it)
	}
	// The locks to renew, by their mode's rank: exclusive ones first.
	live := make([]int, 0, len(items))
	for k := range items {
		if items[k].err == nil {
			live = append(live, k)
		}
	}
	slices.SortStableFunc(live, func(a, b int) int {
		return items[a].r.l.mode.rank - items[b].r.l.mode.rank
	})
	var repairs []func()
	if len(live) > 0 {
		m := &quorum.Many{Items: len(live), Calls: func(i int) []quorum.Call { return c.renewCalls(i, items, live) },
			Timeout: c.renewTimeout(items, live)}
		res, err := c.engine.DoMany(rn.ctx, m)
		for j, k := range live {
			it := &items[k]
			if err != nil {
				it.err = errClosedOp("renew", it.r.l.key)
				continue
			}
			repairs, it.err = c.renewed(it, res, j, repairs)
		}
	}
	for k := range items {
		items[k].r.l.mu.Unlock()
	}
	for _, f := range repairs {
		f()
	}
	j := 0
	for i, r := range batch {
		if j < len(items) && items[j].r == r {
			r.l.report() // a loss the round found: EventLost
			next[i] = r.after(items[j].err)
			j++
		}
	}
}

// renewTimeout is how long a batch's round may take: a third of the
// validity its most pressed lock has left, at least MasterTimeout and at
// most lateCallFactor times it. A renewal is due with two thirds of the
// TTL left: a batch of many locks on a busy machine need not fail, and
// retry, for want of MasterTimeout. A lock with less left waits less.
func (c *Client) renewTimeout(items []renewItem, live []int) time.Duration {
	least := time.Duration(math.MaxInt64)
	for _, k := range live {
		least = min(least, time.Until(items[k].r.l.Until()))
	}
	return min(max(least/3, c.masterTimeout), lateCallFactor*c.masterTimeout)
}

// renewCalls returns the calls of a batch to master i. live are the
// indexes in items of the locks renewed, in the round's order.
func (c *Client) renewCalls(i int, items []renewItem, live []int) []quorum.Call {
	if !c.nodes[i].batches() {
		// One call per lock: it goes where its keys live.
		calls := make([]quorum.Call, len(live))
		for j, k := range live {
			it := &items[k]
			l := it.r.l
			calls[j] = quorum.Call{Script: l.mode.extend, Keys: l.keys, Args: l.args(argv{ttl: it.ttl, holds: it.holds}), First: j, Items: 1}
		}
		return calls
	}
	var calls []quorum.Call
	for first := 0; first < len(live); {
		m := items[live[first]].r.l.mode
		script := m.extendMany
		var names []string
		var args []any
		n := 0
		for ; first+n < len(live); n++ {
			it := &items[live[first+n]]
			l := it.r.l
			// A mode without extendMany renews each Lock on its own.
			if l.mode.extendMany != script || len(names) >= renewBatchKeys || n > 0 && script == nil {
				break
			}
			names = append(names, l.keys.Names[:m.batchKeys]...)
			ms := l.boxed.ttlMs
			if it.ttl != l.boxed.ttl {
				ms = it.ttl.Milliseconds()
			}
			args = append(args, l.boxed.value, ms, l.boxed.nonce)
		}
		if n == 1 { // the Lock's own extend: its keys and arguments are made already
			it := &items[live[first]]
			l := it.r.l
			calls = append(calls, quorum.Call{Script: l.mode.extend, Keys: l.keys, Args: l.args(argv{ttl: it.ttl, holds: it.holds}), First: first, Items: 1})
		} else {
			calls = append(calls, quorum.Call{Script: script, Keys: pipeline.NewKeys(names...), Args: args, First: first, Items: n})
		}
		first += n
	}
	return calls
}

// renewed decides item j of a batch's round for it, as extend decides its
// own round. l.mu must be held. It adds the repairs of the masters that
// answered without the lock to repairs, and returns the renewal's error.
func (c *Client) renewed(it *renewItem, res quorum.ManyOutcome, j int, repairs []func()) ([]func(), error) {
	l := it.r.l
	agreed := res.Agreed(j)
	validity := quorum.Validity(it.ttl, res.Elapsed, c.driftFactor)
	ok := agreed >= c.quorum && validity > 0
	var qe *QuorumError
	if !ok {
		qe = &QuorumError{Op: "renew", Key: l.key, Quorum: c.quorum, Expired: agreed >= c.quorum,
			Elapsed: res.Elapsed, sentinel: ErrNotHeld, ctxErr: it.r.Err()}
		qe.Masters, qe.Agreed = c.manyResults(res, j, qe.ctxErr)
		if !qe.Expired && !qe.refusedQuorum() {
			qe.sentinel = ErrNoQuorum
		}
	}
	if c.observer != nil {
		c.observeMany(it, res, j, qe, validity)
	}
	if qe != nil {
		l.loseIfRefused(qe)
		return repairs, qe
	}
	if err := l.setUntil(c.deadline(res.Start, it.ttl)); err != nil {
		if !errors.Is(err, ErrNotHeld) { // ErrClosed
			return repairs, fmt.Errorf("%w: renew %s: %w", ErrNotHeld, quote(l.key), err)
		}
		return repairs, fmt.Errorf("renew: %w", err)
	}
	if l.mode.repair == nil || c.noRepair {
		return repairs, nil
	}
	for i := range c.nodes {
		if m := res.Master(i, j); m.Heard && (quorum.Answer{Val: m.Val, Err: m.Err}).Refused() {
			until, holds, token := it.end, it.holds, max(l.token, 1)
			repairs = append(repairs, func() { c.repairLater(l, i, until, holds, token) })
		}
	}
	return repairs, nil
}

// repairLater sends the repair of l on master i (see repairOn) without
// waiting for it: a batch's repairs do not hold up the next batches. It
// is bounded by MasterTimeout, and may be shed as repairOn's may.
func (c *Client) repairLater(l *Lock, i int, until time.Time, holds int64, token uint64) {
	args := l.repairArgs(until, holds, token)
	if args == nil {
		return
	}
	ctx, cancel := context.WithTimeout(inBackground(context.Background()), c.masterTimeout)
	c.nodes[i].pipe.Go(ctx, l.mode.repair, l.keys, args, pipeline.Options{Index: i}, repairDone(cancel))
}

// repairDone is the Completion of a repair: it releases its context.
type repairDone context.CancelFunc

func (d repairDone) Complete(int64, error) { d() }

// manyResults reports each master's part in item j of a batch, as
// masterResults does for a round.
func (c *Client) manyResults(res quorum.ManyOutcome, j int, ctxErr error) (ms []MasterResult, agreed int) {
	ms = make([]MasterResult, len(c.nodes))
	for i := range c.nodes {
		ms[i] = c.masterResult(i, res.Master(i, j), ErrNotHeld, ctxErr, res.TimedOut)
		if ms[i].Agreed {
			agreed++
		}
	}
	return ms, agreed
}

// observeMany reports item j of a batch to the Observer as the lock's
// renew round. Its panic is dropped: it runs on the renewal's goroutine.
func (c *Client) observeMany(it *renewItem, res quorum.ManyOutcome, j int, qe *QuorumError, validity time.Duration) {
	defer func() { _ = recover() }()
	rd := Round{Op: "renew", Key: it.r.l.key, Start: res.Start, Elapsed: res.Elapsed}
	if qe != nil {
		rd.Masters, rd.Err = qe.Masters, qe
	} else {
		rd.Masters, _ = c.manyResults(res, j, nil)
		rd.Validity = validity
	}
	c.observer.ObserveRound(it.r, rd)
}
