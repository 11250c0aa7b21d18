package redlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// Acquire tries once to take the exclusive lock on key for ttl. It
// returns a *Lock if a quorum of masters granted it in time; else it
// undoes what it took, with fresh contexts, and returns an error wrapping
// ErrNotObtained, such as a *QuorumError. It blocks for one round, within
// MasterTimeout of its start (two with fencing if counters differ);
// cancelling ctx ends it early, the error then matching ctx.Err(). ttl
// must exceed MasterTimeout plus drift; with fencing, reach
// 4*MasterTimeout, as a fenced acquire must be decided in a quarter of it.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	value, err := c.value()
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, exclusiveMode, key, value, c.nonce(value), ttl, extras{})
}

// AcquireAs is Acquire with a reentrant lock held by owner, a unique and
// unguessable value (see NewOwner). Lock.Reenter adds holds and the last
// Lock.Release frees it; another AcquireAs by owner is refused.
func (c *Client) AcquireAs(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, exclusiveMode, key, owner, ttl, 0)
}

// AcquireWrite takes the write side of the read-write lock named key for
// owner, where no other owner writes or reads. It refuses a reader of
// key with ErrUpgrade. Blocking and errors are Acquire's.
func (c *Client) AcquireWrite(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, writeMode, key, owner, ttl, 0)
}

// AcquireRead takes the read side of the read-write lock named key for
// owner, unless another owner writes or a writer waits. Readers share it;
// a writer may also read. No token; blocking and errors are Acquire's.
func (c *Client) AcquireRead(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, readMode, key, owner, ttl, 0)
}

// acquireOwned acquires for owner under a fresh nonce. A write lock with
// writeWait > 0 leaves the write-wait marker for that long where readers
// hold it.
func (c *Client) acquireOwned(ctx context.Context, m *mode, key, owner string, ttl, writeWait time.Duration) (*Lock, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	nonce, err := c.value()
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, m, key, owner, c.nonce(nonce), ttl, extras{writeWait: writeWait})
}

// nonce returns a Lock's nonce from value, a new value: with
// Options.Holder, the value, a space and the holder. The masters store
// it with the lock, and name its release markers after it.
func (c *Client) nonce(value string) string {
	if c.holder == "" {
		return value
	}
	return value + " " + c.holder
}

// value returns a new value from NewValue: the Acquire's owner, and every
// Lock's nonce. A nonce names the Lock's undo marker, K:gone:nonce. That
// must never be another lock's key. The last '}' of a key tells its name
// from its suffix, so a value must hold no '}'. It must not
// be empty either: an empty nonce would be every Lock's.
func (c *Client) value() (string, error) {
	v, err := c.newValue()
	switch {
	case err != nil:
		return "", fmt.Errorf("redlock: new value: %w", err)
	case v == "":
		return "", invalidf("NewValue returned an empty value")
	case strings.Contains(v, "}"):
		return "", invalidf("NewValue returned %s: a value must not hold '}'", quote(v))
	}
	return v, nil
}

// extras are what some modes' acquires send besides the usual arguments.
type extras struct {
	writeWait time.Duration // a write lock's: see acquireOwned
	capacity  int           // a permit's: see permits.AcquirePermit
	queued    string        // a fair lock's: see queues.Acquire
}

func (c *Client) acquire(ctx context.Context, m *mode, key, owner, nonce string, ttl time.Duration, x extras) (*Lock, error) {
	if err := checkContext(ctx, "acquire"); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, invalidf("empty key")
	}
	if owner == "" {
		return nil, invalidf("empty owner")
	}
	ttl, err := c.checkTTL("TTL", ttl)
	if err != nil {
		return nil, err
	}
	if m.fenced {
		if err := c.checkFencedTTL("TTL", ttl); err != nil {
			return nil, err
		}
	}
	l := &Lock{lockID: lockID{client: c, mode: m, key: key, value: owner, nonce: nonce, keys: pipeline.NewKeys(m.keys(c.prefix, key)...), writeWait: x.writeWait, capacity: x.capacity, queued: x.queued}, ttl: ttl}
	return c.takeNew(ctx, l)
}

// takeNew runs a new Lock's first acquire round, with l locked. An
// Observer's panic releases what was taken: nobody else would.
func (c *Client) takeNew(ctx context.Context, l *Lock) (*Lock, error) {
	if c.observer != nil {
		l.origin = context.WithoutCancel(ctx)
	}
	l.box()
	l.mu.Lock()
	defer l.mu.Unlock()
	returned := false
	defer func() {
		if !returned {
			l.releaseAfterPanic(ctx)
		}
	}()
	err := l.take(ctx, 1)
	returned = true
	if err != nil {
		return nil, err
	}
	return l, nil
}

// take runs the acquire round for the given number of holds: 1 for a new
// lock, one more than now to re-enter. l.mu must be held.
func (l *Lock) take(ctx context.Context, holds int) error {
	c, m := l.client, l.mode
	if holds == 1 {
		// A new lock's round, and its validity, start once the masters
		// are set up: setup must not spend its MasterTimeout. Setup runs
		// before the proposed token is read, so as not to make it stale.
		c.prepare(ctx)
	}
	undo, mark := l.args(argv{ttl: l.ttl, holds: int64(holds - 1)}), []any(nil)
	if mark = undo; holds == 1 { // a re-entry undone keeps the lock
		mark = withMark(undo, markMissing)
	}
	a := argv{ttl: l.ttl, holds: int64(holds)}
	if holds == 1 && m.fenced && c.fencing {
		a.fence = time.Now().UnixMicro() // the proposed token (see scripts.lua)
	}
	args := l.args(a)
	l.sendsTTL(l.ttl)
	p := &acquirePolicy{l: l, holds: holds, undo: quorum.Undo{Script: m.release, Args: undo, Mark: mark, KeyTTL: l.longestTTL()}}
	if m.undo != nil {
		p.undo.Script = m.undo
	}
	o := &op{name: "acquire", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: m.acquire,
		Keys:   l.keys,
		Args:   args,
		Send:   quorum.Send{Withdraw: true},
		Undo:   &p.undo,
		TTL:    l.ttl,
		Policy: p,
	}}
	if holds == 1 {
		o.refused = ErrHeldElsewhere // a new lock's refusal; a re-entry's is ErrNotHeld
		o.names = l.names
		o.Send.Unsent = &l.unsent
		if m.fenced && c.fencing {
			// A token must be larger than every earlier lock's. A late
			// decision could break that ("Fencing tokens" in docs/guarantees.md).
			o.Within = l.ttl / 4
		}
	}
	res, err := c.do(ctx, o)
	if err != nil {
		if holds > 1 {
			l.loseIfRefused(err)
		}
		return err
	}
	until := c.deadline(res.Start, l.ttl)
	if holds == 1 {
		l.quick = time.Since(res.Start) <= min(c.masterTimeout/4, l.ttl/8)
	}
	if holds == 1 && m.fenced && c.fencing {
		if err := l.raiseFence(ctx, res, until); err != nil {
			l.endHolds(false)
			_ = l.undoRound(context.WithoutCancel(ctx))
			return err
		}
		l.token = uint64(res.Max)
	}
	if err := l.setUntil(until); err != nil {
		return fmt.Errorf("%w: acquire %s: lost meanwhile: %w", ErrNotObtained, quote(l.key), err)
	}
	l.holds = holds
	if holds == 1 && c.observer != nil {
		l.observe(ctx, EventAcquired, nil)
		// Tracked, so that its loss is reported whatever ends it:
		// validity run out, renewal failed, or Client.Close.
		l.signal()
	}
	return nil
}

// raiseFence makes the token final. The token is the largest counter
// among the granting quorum. When those counters differ, a second round
// raises them to the token where this owner still holds the lock. That
// round needs a quorum. Then every quorum that grants the lock later
// shares a master whose counter is at least the token. It increments that
// counter, so later tokens are larger. When the counters agree, the
// granting quorum already is such a quorum. The second round is then
// skipped.
func (l *Lock) raiseFence(ctx context.Context, res quorum.Outcome, until time.Time) error {
	if !res.Mixed {
		return nil
	}
	if _, err := l.client.do(ctx, &op{name: "fence", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: l.mode.fence,
		Keys:   l.keys,
		Args:   l.args(argv{ttl: l.ttl, holds: res.Max}),
	}}); err != nil {
		return err
	}
	if !time.Now().Before(until) {
		return fmt.Errorf("%w: acquire %s: validity ran out while raising the fencing token", ErrNotObtained, quote(l.key))
	}
	return nil
}

// Reenter adds one hold for the owner and renews the TTL over the quorum,
// blocking for one round after the Lock's other operations under way. A
// lock not held gets ErrNotHeld (ErrClosed after Close), sending nothing;
// a failed Reenter wraps ErrNotObtained and keeps the holds.
func (l *Lock) Reenter(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	if err := checkContext(ctx, "reenter"); err != nil {
		return err
	}
	err := l.reenter(ctx)
	l.report() // the loss the round may have found
	return err
}

// reenter is Reenter under l.mu, which a panic (an Observer's) lets go.
func (l *Lock) reenter(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkHeld("reenter"); err != nil {
		return err
	}
	if l.mode.permit {
		return invalidf("reenter %s: a semaphore's permit holds once", quote(l.key))
	}
	if l.mode.multi {
		return invalidf("reenter %s: a multi-resource lock holds once", quote(l.key))
	}
	return l.take(ctx, l.holds+1)
}

// lateAgreement handles master i's agreement to the acquire round for
// holds after the round was decided. The lock's last release may already
// have reached that master and found nothing. This agreement would then
// outlive the lock, so it is deleted again. For the first acquire, the
// late agreement and the release's answer there meet in meet, whichever
// comes second. So the delete is sent only where the release missed. For
// a re-entry, it is sent whenever the lock is released. The delete runs
// in the background: lateAgreement does not block.
func (l *Lock) lateAgreement(ctx context.Context, i, holds int, unknown bool) {
	if holds > 1 {
		if l.life.stage.Load() == stageReleased {
			l.client.engine.Spawn(ctx, func() { l.dropOn(ctx, i, unknown) })
		}
		return
	}
	l.meet(ctx, i, &l.late.agreed, &l.late.missed, unknown)
}

// meet records one of two events on master i: a late agreement, whose
// outcome may be unknown, or a release that missed. If the other came
// first, it drops the lock there in the background. It does not block.
func (l *Lock) meet(ctx context.Context, i int, mine, other *uint64, unknown bool) {
	bit := uint64(1) << i
	b := &l.late
	l.sigMu.Lock()
	met := *other&bit != 0
	*mine |= bit
	if unknown {
		b.unknown |= bit
	}
	unknown = b.unknown&bit != 0
	l.sigMu.Unlock()
	if met {
		l.client.engine.Spawn(ctx, func() { l.dropOn(ctx, i, unknown) })
	}
}

// dropOn deletes the lock on master i, where this Lock holds it. It
// retries until the master answers, and blocks meanwhile. Where the
// acquire's outcome there is unknown, it leaves a marker if it finds
// nothing.
func (l *Lock) dropOn(ctx context.Context, i int, unknown bool) {
	a := argv{ttl: l.longestTTL()}
	if unknown {
		a.last = markMissing
	}
	args := l.args(a)
	l.client.engine.CleanUp(ctx, i, quorum.Cleanup{Script: l.mode.release, Keys: l.keys, Args: args}, l.longestTTL())
}

// acquirePolicy is an acquire's part in its round. A master may agree
// after the decision, or time out and apply later. That agreement may
// outlive the lock's release, so it is deleted again.
type acquirePolicy struct {
	quorum.NoHooks
	l     *Lock
	holds int         // the holds the round sets
	undo  quorum.Undo // the round's; here, not allocated on its own
}

func (p *acquirePolicy) Settles(a quorum.Answer) bool { return a.MayHaveApplied() }

// Counts refuses a new lock's agreement from a master in quarantine. Its
// new server may have lost the lock that would have refused it. A
// re-entry needs the lock held there, so a master that lost it refuses.
func (p *acquirePolicy) Counts(_ int, _ quorum.Answer, m quorum.MasterState) error {
	if p.holds == 1 {
		return m.Quarantine()
	}
	return nil
}

func (p *acquirePolicy) Settled(ctx context.Context, i int, a quorum.Answer, counted bool) func() {
	// The decider counted an unknown outcome as a refusal: it may
	// still land.
	if !counted || a.Unknown() {
		p.l.lateAgreement(ctx, i, p.holds, a.Unknown())
	}
	return nil
}
