package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/quorum"
)

// Release gives up one hold; the last deletes the lock and wakes waiters.
// It uses ctx only for its values, so that a cancelled ctx cannot lose a
// release. It returns nil if a quorum still held the lock, else a
// *QuorumError wrapping ErrNotHeld (the work may have overlapped another
// holder's) or ErrNoQuorum (too few answered). It blocks for one round,
// after a renewal under way; slow masters are released in the background.
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, nil) }

// release is Release. The last one hands the lock on: it wakes this
// client's next waiter for it, and runs queued, if set. It may do so as
// soon as its calls are queued on every master. The waiter's acquire then
// follows them there, instead of a round later. Three conditions must
// hold for that early hand-off:
//   - The masters keep the calls of one key in order (Pipeline.Ordered).
//   - They answered this Lock's acquire within a quarter of MasterTimeout
//     and an eighth of its TTL. An acquire queued behind the release waits
//     for its reply first. It must still be decided within MasterTimeout,
//     and within a quarter of the TTL where it takes a fencing token.
//   - This client's last release of the lock found no other client
//     waiting. That client's waiters must not lose every race to ours.
//
// Elsewhere it hands the lock on once its round is decided. queued must
// not block nor use l.
func (l *Lock) release(ctx context.Context, queued func()) error {
	if err := l.check(); err != nil {
		return err
	}
	if err := checkContext(ctx, "release"); err != nil {
		return err
	}
	if l.client.gate.closing() { // the lock was left to expire: see Client.Close
		return errClosedOp("release", l.key)
	}
	err := l.releaseHold(ctx, queued)
	l.report() // outside l.mu: a blocked Observer holds up no other call
	return err
}

// releaseHold is release under l.mu, which a panic (an Observer's) lets go.
// The caller reports the events it queues.
func (l *Lock) releaseHold(ctx context.Context, queued func()) error {
	l.mu.Lock()
	defer l.mu.Unlock() // let go and taken again while renewal stops
	if r := l.renew; r != nil && l.holds <= 1 {
		l.renew, l.stopping = nil, true
		l.mu.Unlock()
		r.stop() // outside mu: a renewal in flight needs it
		l.mu.Lock()
		l.stopping = false
		if l.holds > 1 { // a Reenter came in meanwhile: keep renewing
			l.startRenewal()
		}
	}
	if l.holds == 0 {
		// Sending it again could delete the same owner's next lock.
		return fmt.Errorf("%w: release %s: already released", ErrNotHeld, quote(l.key))
	}
	// A lock lost or run out before is not held, whoever answers in time.
	var lostBy string
	switch {
	case !time.Now().Before(l.Until()): // whether or not a timer saw it
		lostBy = "its validity had run out"
	case errors.Is(l.lostCause(), ErrNotHeld):
		lostBy = "it was lost before"
	}
	l.holds--
	if l.holds == 0 {
		l.endHolds(true) // before the round: see lateAgreement
	}
	// Not the caller's context: an ended one would send nothing, and the
	// lock would block everyone until its TTL. The round is bounded by
	// MasterTimeout.
	err := l.releaseRound(context.WithoutCancel(ctx), l.holds, queued)
	if qe, ok := err.(*QuorumError); ok && lostBy != "" {
		err = qe.lost(lostBy)
	}
	if l.holds == 0 {
		l.sigMu.Lock()
		l.queueLocked(ctx, EventReleased, err)
		l.sigMu.Unlock()
	} else if err != nil {
		l.loseIfRefused(err)
	}
	return err
}

// releaseRound sets the owner's holds to holds on every master. At 0 it
// deletes the lock there, and hands the lock on with queued. The delete
// is retried in the background on masters that gave no answer.
func (l *Lock) releaseRound(ctx context.Context, holds int, queued func()) error {
	return l.releaseWith(ctx, l.mode.release, holds, queued)
}

// undoRound is the last release of a Lock whose acquire failed after its
// round (the fence round), with the mode's undo where it has one.
func (l *Lock) undoRound(ctx context.Context) error {
	if l.mode.undo == nil {
		return l.releaseRound(ctx, 0, nil)
	}
	return l.releaseWith(ctx, l.mode.undo, 0, nil)
}

// releaseWith is releaseRound with script in place of the mode's release.
func (l *Lock) releaseWith(ctx context.Context, script *redis.Script, holds int, queued func()) error {
	ttl := l.ttl
	if holds == 0 {
		ttl = l.longestTTL() // of the marker it may leave
	}
	a := argv{ttl: ttl, holds: int64(holds)}
	if holds == 0 {
		// Where the acquire's call timed out, it may land after this
		// release, which then leaves a marker that refuses it. After a
		// repair, the release may find and delete the repaired lock
		// before that acquire, or another repair, lands: then it leaves
		// the marker wherever it deletes too.
		a.last = markMissing
		if l.repaired.Load() {
			a.last = markAlways
		}
		if l.token > 0 && l.mode.fenced && l.client.fencing {
			a.fence = strconv.FormatUint(l.token, 10) // the counter it leaves
		}
	}
	o := &op{name: "release", key: l.key, sentinel: ErrNotHeld, Spec: quorum.Spec{
		Script: script,
		Keys:   l.keys,
		Args:   l.args(a),
		Send:   quorum.Send{Must: true, Skip: (*releaseSkip)(l)},
		// A release a failover loses leaves the lock until its TTL.
		Lossy: true,
	}}
	var last *releasePolicy
	if holds == 0 {
		last = &releasePolicy{
			l:      l,
			retry:  quorum.Cleanup{Script: o.Script, Keys: o.Keys, Args: o.Args},
			keyTTL: ttl,
			early:  l.client.ordered && l.quick && !l.mode.multi && !l.client.isContested(o.Keys.Names[0]),
			then:   queued,
		}
		o.Policy = last
	}
	res, err := l.client.do(ctx, o)
	if last != nil {
		if !last.early {
			last.handOff()
		}
		// A read release always replies 1; a multi-resource one answers for several names.
		if err == nil && l.mode != readMode && !l.mode.multi {
			l.client.contest(o.Keys.Names[0], res.Max == replyWaited)
		}
	}
	return err
}

// releaseSkip is a Lock as its releases' pipeline.Skipper. The first
// acquire was surely not sent to some masters: its round was decided
// without them, or the call was shed. Such a master holds nothing of this
// Lock, unless a repair set it there. repairOn stores repaired before it
// reads the life's stage. The last release stores released before its
// calls ask Skip. So either Skip sees repaired, or the repair sees
// released and sends nothing.
type releaseSkip Lock

func (s *releaseSkip) Skip(i int) bool {
	l := (*Lock)(s)
	return l.unsent.Load()&(1<<i) != 0 && !l.repaired.Load()
}

// releasedOn learns whether the last release deleted the lock on master i.
func (l *Lock) releasedOn(ctx context.Context, i int, deleted bool) {
	if !deleted {
		l.meet(ctx, i, &l.late.missed, &l.late.agreed, false)
	}
}

// releaseAfterPanic releases l, whose acquire panicked before l reached
// its caller. It releases l on every master where it may have landed,
// unless the acquire released it already. EventReleased balances an
// EventAcquired that went out. A panic of its own is dropped: the first
// one goes on. l.mu must be held.
func (l *Lock) releaseAfterPanic(ctx context.Context) {
	defer func() { _ = recover() }()
	acquired := l.holds > 0 // take got as far as reporting it
	if !l.endHolds(false) {
		return
	}
	l.holds = 0
	err := l.releaseRound(context.WithoutCancel(ctx), 0, nil)
	if acquired {
		l.sigMu.Lock()
		l.queueLocked(ctx, EventReleased, err)
		l.sigMu.Unlock()
	}
	l.report()
}

// releasePolicy is the last release's part in its round. A master that
// gives no answer gets the release again in the background. The answers
// meet the acquire's late agreements. The lock is handed on to this
// client's next waiter once the calls are queued, if early. Else it is
// handed on once the round is decided. The fields are set at creation,
// then never changed.
type releasePolicy struct {
	l      *Lock
	retry  quorum.Cleanup // the release itself, sent again
	keyTTL time.Duration  // the longest a key it deletes lives: retries stop then
	early  bool
	then   func() // runs at the hand-off; nil for none
}

func (p *releasePolicy) Queued() {
	if p.early {
		p.handOff()
	}
}

func (p *releasePolicy) Answered(ctx context.Context, i int, a quorum.Answer) {
	if a.Err != nil {
		p.l.client.engine.RetryLater(ctx, i, p.retry, p.keyTTL)
		return
	}
	p.l.releasedOn(ctx, i, a.Applied())
}

func (p *releasePolicy) Settles(quorum.Answer) bool { return false }

func (p *releasePolicy) Settled(context.Context, int, quorum.Answer, bool) func() { return nil }

// handOff wakes this client's next waiter for the lock, and runs then.
func (p *releasePolicy) handOff() {
	for _, ch := range p.l.mode.channels(p.l.keys.Names) {
		p.l.client.releasing(ch, p.l.nonce)
	}
	if p.then != nil {
		p.then()
	}
}
