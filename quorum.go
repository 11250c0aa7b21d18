package redlock

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// op is one operation: the spec of its round, and what its errors say.
// Its fields are set before its round, then never changed.
type op struct {
	name     string // "acquire", "extend", "release": for errors
	key      string // the caller's key, for errors
	sentinel error  // what a failed round wraps
	// refused is a master's error where it answered no: ErrNotHeld (the
	// lock is not ours there) unless set.
	refused error
	// names are a multi-resource acquire's, which a refusal may index
	// (see replyHeld).
	names []string
	quorum.Spec
}

// lateCallFactor times MasterTimeout bounds a call that its round was
// decided without.
const lateCallFactor = quorum.LateCallFactor

// replyUpgrade is a master's reply when an owner that holds a read lock
// asks for the write lock.
const replyUpgrade = -1

// Replies below replyUpgrade are refusals that name something; the mode
// that asked reads them. replyHeld - i: a multi-resource acquire found its
// i-th name (from 0) held. replyFreeSlot - s: a permit's slot was taken,
// and slot s is free. replyQueued: a fair acquire found a live waiter
// ahead of its ticket.
const (
	replyHeld     = -2
	replyFreeSlot = -2
	replyQueued   = -2
)

// replyWaited is a master's reply to a last release where an acquire was
// refused while the Lock held the lock.
const replyWaited = 2

// do runs o's round. It returns once a quorum has agreed or can no longer
// agree: at the latest MasterTimeout after the round starts, or when ctx
// ends. A failed round is undone where o has an undo. do reports the
// round to the Observer. It returns a *QuorumError on failure, or
// ErrClosed once Close has begun.
func (c *Client) do(ctx context.Context, o *op) (quorum.Outcome, error) {
	res, err := c.engine.Do(ctx, &o.Spec)
	if err != nil {
		return res, errClosedOp(o.name, o.key)
	}
	var qe *QuorumError
	if !res.OK {
		qe = c.quorumError(ctx, o, res)
	}
	// A round whose context had ended sent nothing: it is not reported.
	if c.observer != nil && !res.Start.IsZero() { // reads only the masters the decision read
		c.observeRound(ctx, o, res, qe)
	}
	if qe != nil {
		return res, qe
	}
	return res, nil
}

// observeRound reports a decided round to the Observer. qe is the round's
// error, nil if it succeeded. On the renewal's goroutine the Observer's
// panic is dropped, so that renewal goes on.
func (c *Client) observeRound(ctx context.Context, o *op, res quorum.Outcome, qe *QuorumError) {
	if isBackground(ctx) {
		defer func() { _ = recover() }()
	}
	rd := Round{Op: o.name, Key: o.key, Start: res.Start, Elapsed: res.Elapsed}
	if qe != nil {
		rd.Masters, rd.Err = qe.Masters, qe
	} else {
		rd.Masters, _, _ = c.masterResults(o, res, nil)
		if o.TTL > 0 {
			rd.Validity = quorum.Validity(o.TTL, res.Elapsed, c.driftFactor)
		}
		if o.name == "acquire" && res.Max > 1 {
			rd.Token = uint64(res.Max)
		}
	}
	c.observer.ObserveRound(ctx, rd)
}

// isReply reports whether err is an error reply of the server.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// quorumError describes a failed round from what the decider saw. A
// master that had not answered gets ErrMasterTimeout if the round's
// deadline decided it. Else it gets ErrNoReply, or the caller's context
// error. An extend or release wraps ErrNotHeld only where the refusals or
// the validity prove the lock lost. Else it wraps ErrNoQuorum.
func (c *Client) quorumError(ctx context.Context, o *op, res quorum.Outcome) *QuorumError {
	e := &QuorumError{
		Op:       o.name,
		Key:      o.key,
		Quorum:   c.quorum,
		Expired:  res.Expired,
		Elapsed:  res.Elapsed,
		sentinel: o.sentinel,
		ctxErr:   ctx.Err(),
		late:     res.Late,
	}
	var upgrades int
	e.Masters, e.Agreed, upgrades = c.masterResults(o, res, e.ctxErr)
	for i := range e.Masters {
		if r := res.Master(i); r.Heard && r.Err == nil && r.Val < replyUpgrade {
			if e.named == nil {
				e.named = make([]int64, len(e.Masters))
			}
			e.named[i] = r.Val
		}
	}
	// A stale read entry on a few masters is no upgrade: it takes a quorum.
	e.upgrade = upgrades >= c.quorum
	e.held = e.heldBack()
	// A lock is lost only where the refusals prove it: masters that gave
	// no answer in time may still hold it.
	if e.sentinel == ErrNotHeld && !res.Expired && !e.refusedQuorum() {
		e.sentinel = ErrNoQuorum
	}
	return e
}

// masterResults reports each master as the decider saw it. A silent
// master that gave the round no answer gets ErrMasterSilent. Another
// master that had not answered gets ctxErr if set. Else it gets ErrMasterTimeout if
// the round timed out, else ErrNoReply. An agreement heard only after the
// decision did not count: it gets errAgreedLate. masterResults also counts
// the agreements and the upgrade replies.
func (c *Client) masterResults(o *op, res quorum.Outcome, ctxErr error) (ms []MasterResult, agreed, upgrades int) {
	ms = make([]MasterResult, len(c.nodes))
	refused := ErrNotHeld
	if o.refused != nil {
		refused = o.refused
	}
	for i := range c.nodes {
		r := res.Master(i)
		m := c.masterResult(i, r, refused, ctxErr, res.TimedOut)
		if m.Agreed {
			agreed++
		}
		if r.Heard && r.Err == nil && r.Val == replyUpgrade {
			m.Err = ErrUpgrade
			upgrades++
		}
		if i := int(replyHeld - r.Val); m.Err == refused && r.Val <= replyHeld && i < len(o.names) {
			m.Err = heldError{o.names[i]}
		}
		ms[i] = m
	}
	return ms, agreed, upgrades
}

// masterResult reports master i's part r in a round (see masterResults).
// refused is the error of a master that answered no.
func (c *Client) masterResult(i int, r quorum.Result, refused, ctxErr error, timedOut bool) MasterResult {
	m := MasterResult{Master: c.nodes[i].name}
	switch {
	case r.Silent: // not waited for, or not sent
		m.Err = ErrMasterSilent
	case r.Heard:
		m.Agreed, m.Err, m.Latency = r.Agreed, closedError(r.Err), r.Latency
		if r.Verdict != nil { // the identification's error, as it is
			m.Err = r.Verdict
		}
		if r.Late { // the decision did not count it
			m.Err = errAgreedLate
		}
		if m.Err == nil && !m.Agreed { // it answered no
			m.Err = refused
		}
		if errors.Is(r.Err, pipeline.ErrWithdrawn) { // never sent: no answer, no latency
			m.Err, m.Latency = ErrWithdrawn, 0
		}
	case ctxErr != nil:
		m.Err = ctxErr
	case timedOut:
		m.Err = ErrMasterTimeout
	default:
		m.Err = ErrNoReply
	}
	return m
}
