package election

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/link"
)

// Observe reports the election's leader, then every change of leader or
// value, in epoch order, on the channel it returns: a new leader, a
// Proclaim, and Vacant once a leader resigned or lost its lock. It reads
// every master at once, and merges what a quorum of them hold. It reads
// again when a change is published, when the leader's validity would run
// out, and on a fallback timer (a quarter of the TTL) in case a
// publication was missed: a subscription reconnecting, say. Each read
// goes on from the last entry reported, so no leader is missed while the
// masters keep the history (128 entries, for 10 TTLs after the last).
//
// A send blocks until the caller receives. The channel is closed once
// ctx ends, or the client is closed, and no goroutine of Observe's is
// left then. The client's
// subscription to the election's channel, shared with Campaign's
// waiters, lingers for 2s after its last user, and ends at Client.Close.
// A nil ctx or a zero Election gets a closed channel.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	ch := make(chan LeaderInfo)
	if e.check(ctx, "Observe") != nil {
		close(ch)
		return ch
	}
	go e.observe(ctx, ch)
	return ch
}

// observer is Observe's state.
type observer struct {
	e    *Election
	ch   chan<- LeaderInfo
	read func(ctx context.Context, after string, count int) *reading // e.read
	// pos is the last entry of the history reported or passed over. Reads
	// go on after it.
	pos     link.Entry
	started bool
	cur     LeaderInfo // the last reported
	ended   uint64     // the latest epoch reported ended: its later entries are stale
	closed  bool       // the client is closed: Observe ends
}

func (e *Election) observe(ctx context.Context, ch chan<- LeaderInfo) {
	defer close(ch)
	w := hooks.NewWaker(e.client, e.name, true, time.Time{})
	defer w.Close()
	o := &observer{e: e, ch: ch, read: e.read}
	delay := e.opts.MinRetryDelay
	poll := max(e.opts.TTL/4, e.opts.MinRetryDelay)
	for ctx.Err() == nil {
		next, ok := o.step(ctx)
		if o.closed {
			return
		}
		if !ok { // too few masters answered: again soon, backing off
			next = delay/2 + rand.N(delay/2+1)
			delay = min(2*delay, e.opts.MaxRetryDelay)
		} else {
			delay = e.opts.MinRetryDelay
		}
		if next <= 0 {
			continue // more history to read
		}
		t := time.NewTimer(min(next, poll))
		select {
		case <-w.Wake():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// step reads the election once and reports what changed. It returns how
// long to wait for the next read (0: at once), or false where too few
// masters answered.
func (o *observer) step(ctx context.Context) (time.Duration, bool) {
	after := ""
	if o.started {
		after = o.pos.ID()
	}
	r := o.read(ctx, after, readBatch)
	if r.answered < r.quorum {
		o.closed = r.answered == 0 && len(r.errs) > 0 && errors.Is(r.errs[0], redlock.ErrClosed)
		return 0, false
	}
	if !o.started {
		o.started = true
		if r.last != nil {
			o.pos = *r.last
		}
		info, ok := r.leader()
		if !ok {
			info = LeaderInfo{Vacant: true}
			if r.last != nil {
				info.Epoch = r.last.Epoch
			}
		}
		if !o.send(ctx, info) {
			return 0, true
		}
	}
	fresh := false // the leader reported last was first seen by this read
	for _, en := range r.entries {
		o.pos = en
		switch {
		case en.Resigned:
			if !o.cur.Vacant {
				o.vacate(ctx, en.Epoch)
			}
		case en.Epoch <= o.ended:
			// A Proclaim that landed where a lost leader still held
			// the lock, after its loss was reported.
		default:
			info := LeaderInfo{Epoch: en.Epoch, Seq: en.Seq, Value: en.Value}
			if r.holder != nil && r.holder.epoch == en.Epoch {
				info.Until = r.holder.until
			}
			fresh = fresh || o.cur.Vacant || o.cur.Epoch != en.Epoch
			o.send(ctx, info)
		}
		if ctx.Err() != nil {
			return 0, true
		}
	}
	if r.more {
		return 0, true // read on
	}
	if o.cur.Vacant {
		return o.e.opts.TTL, true // the poll bounds it
	}
	// The leader reported last: still holding, or gone?
	h := r.holder
	if h != nil && h.epoch == o.cur.Epoch {
		o.cur.Until = h.until
		return max(time.Until(h.until), o.e.opts.MinRetryDelay), true
	}
	// The masters answer a read at different instants. Those that
	// answered before a new leader's acquire show no lock, or an older
	// one. So only a later leader's lock proves it gone in the read that
	// first showed it. The next read, sent after its acquire, tells.
	if fresh && (h == nil || h.epoch < o.cur.Epoch) {
		return o.e.opts.MinRetryDelay, true
	}
	if r.vacant || h != nil {
		o.vacate(ctx, o.cur.Epoch)
	}
	return o.e.opts.MinRetryDelay, true
}

// vacate reports that the leader of epoch is gone.
func (o *observer) vacate(ctx context.Context, epoch uint64) {
	o.ended = max(o.ended, epoch)
	o.send(ctx, LeaderInfo{Vacant: true, Epoch: epoch})
}

// send reports info, unless ctx ends first.
func (o *observer) send(ctx context.Context, info LeaderInfo) bool {
	select {
	case o.ch <- info:
		o.cur = info
		return true
	case <-ctx.Done():
		return false
	}
}
