package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redlock/redlock/internal/quorum"
)

// Extend sets the lock's TTL to ttl from now on every master that still
// holds it for this owner, unless the key's TTL there is longer. It never
// shortens the lock on a master. Its calls may land after the round
// failed, or even after a later Extend, and must not cut the lock short.
// A master where the key has gone is not extended. Once a quorum agreed,
// the lock is set again there, unless Options.NoRepair (see "Quorum
// repair" in README.md). Extend succeeds only if a quorum agreed with
// validity left. It then sets Until to ttl from the round's start, less
// the drift allowance. That is earlier than before if ttl is shorter.
//
// If the lock's validity has already run out, Extend writes nothing and
// returns ErrNotHeld. Once Client.Close has begun, it returns ErrClosed.
// Otherwise it fails with a *QuorumError, and Until is unchanged. The
// error wraps ErrNotHeld where so many masters answered that they do not
// hold it that the others cannot make a quorum. The lock is then lost at
// once, and Done closes with that error. It also wraps ErrNotHeld where a
// quorum agreed too late, with no validity left from the round's start
// (Expired). The lock is then not extended, but not lost either, and
// stays held until Until. Else too few masters answered in time. The
// error then wraps ErrNoQuorum, and the lock is still held until Until.
//
// Extend blocks until the quorum is decided, at most MasterTimeout after
// any Reenter, Release or renewal of the same Lock under way. A renewal
// takes up to 4*MasterTimeout (see AutoRenew).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	err := l.extend(ctx, ttl, "extend")
	if l.check() == nil {
		l.report() // the loss the round may have found
	}
	return err
}

// extend is Extend; name names the call in errors.
// The caller reports the EventLost it may queue.
func (l *Lock) extend(ctx context.Context, ttl time.Duration, name string) error {
	if err := l.check(); err != nil {
		return err
	}
	if err := checkContext(ctx, name); err != nil {
		return err
	}
	c := l.client
	ttl, err := c.checkTTL("TTL", ttl)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkHeld(name); err != nil {
		return err
	}
	end := c.deadline(time.Now(), ttl) // of the lock on a master this round reaches
	l.sendsTTL(ttl)
	res, err := c.do(ctx, &op{name: name, key: l.key, sentinel: ErrNotHeld, Spec: quorum.Spec{
		Script: l.mode.extend,
		Keys:   l.keys,
		Args:   l.args(argv{ttl: ttl, holds: int64(l.holds)}),
		TTL:    ttl,
		Policy: l.extendPolicy(end),
	}})
	if err != nil {
		l.loseIfRefused(err)
		return err // its calls, which may still land, never shorten the lock
	}
	if err := l.setUntil(c.deadline(res.Start, ttl)); err != nil {
		if !errors.Is(err, ErrNotHeld) { // ErrClosed
			return fmt.Errorf("%w: %s %s: %w", ErrNotHeld, name, quote(l.key), err)
		}
		return fmt.Errorf("%s: %w", name, err) // err names the key and why
	}
	l.ttl = ttl
	if l.renew != nil {
		l.renew.replanned(ttl, l.Until())
	}
	return nil
}

// loseIfRefused loses the lock if err proves it lost. err is the error of
// a round of this held Lock: a re-entry, extend, renewal, or a release
// that leaves holds. It proves the loss where so many masters answered
// ErrNotHeld, or do not count, that the others cannot make a quorum. A
// master does not count if it is a replica or a server that counted
// already. The lock's keys were deleted there, those masters restarted
// empty, or another owner took it. Whatever validity is left, another
// owner may hold it now. A master that did not answer may still hold it.
// So timeouts and errors alone lose nothing before the validity runs out.
func (l *Lock) loseIfRefused(err error) {
	var qe *QuorumError
	if !errors.As(err, &qe) || !qe.refusedQuorum() {
		return
	}
	if !errors.Is(err, ErrNotHeld) { // a re-entry's
		err = fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	l.lose(err)
}

// repairOn sets the lock again on master i, which answered an extend
// without it. The master restarted empty, or the key expired there. It
// runs once a quorum of the others decided the extend. It sets the
// validity left, until the earlier of the old deadline and until, the
// extend's. It sets the holds and token the Lock has. Without repair, a
// long-held lock would erode one restart at a time. Repairing does not
// count toward the extend. A lock that has expired, was lost or released
// is not repaired. What it sets, the Lock's release deletes. It blocks
// for one call.
func (l *Lock) repairOn(ctx context.Context, i int, until time.Time, holds int64, token uint64) {
	if args := l.repairArgs(until, holds, token); args != nil {
		_, _ = l.client.nodes[i].eval(ctx, l.mode.repair, l.keys, args, false)
	}
}

// repairArgs returns the arguments of a repair (see repairOn), or nil
// where none is due. It marks the Lock repaired.
func (l *Lock) repairArgs(until time.Time, holds int64, token uint64) []any {
	end := until
	if u := l.Until(); u.Before(end) {
		end = u
	}
	ttl := time.Until(end).Truncate(time.Millisecond)
	l.repaired.Store(true) // before reading the stage: see repaired
	if ttl <= 0 || l.life.ended() {
		return nil
	}
	return l.args(argv{ttl: ttl, holds: holds, last: strconv.FormatUint(token, 10)})
}

// AutoRenew keeps the lock held until its last Release. It extends the
// lock by its current TTL (the last Extend's, if any) over the quorum once
// about a third of it has passed, a little earlier at random, so that
// locks taken together spread out. The Client renews all its locks from
// one goroutine, not one per lock. Locks due together go in batches: one
// call per master for many locks, each lock decided by its own quorum.
// Renewals are never shed behind other calls. On a master whose server
// has replicas, or may gain some (Sentinel), each call is followed by
// WAIT and ROLE, as Extend's is: a renewal counts there only once every
// replica has it, so a failover does not lose it. A batch may wait a third of
// the validity its most pressed lock has left, up to 4*MasterTimeout, so
// that many locks on a busy master do not fail for want of MasterTimeout.
// A failed renewal is retried sooner, also at random. A failure on a
// minority of masters does not matter: the quorum still extends. If
// renewal cannot reach a quorum before the validity would run out, the
// lock is lost. Done then closes, with the last renewal error in Err. The
// loss comes at once where the masters that answered that they do not
// hold it leave too few for a quorum. The last Release, and Client.Close,
// stop renewal before they return; no renewal runs after. Calling
// AutoRenew again, on a closed Client, or while the last Release is under
// way, is a no-op. A Reenter that comes first keeps renewal running.
func (l *Lock) AutoRenew() {
	if l.check() != nil {
		return
	}
	l.mu.Lock()
	if l.renew == nil && l.holds > 0 && !l.stopping {
		l.startRenewal()
	}
	l.mu.Unlock()
	l.report() // the loss startRenewal may have found
}

// startRenewal hands the lock to its client's renewer, unless the
// client is closing. l.mu must be held. The caller reports what it
// queues.
func (l *Lock) startRenewal() {
	if r := l.client.renew.add(l); r != nil {
		l.renew = r
	}
}

// observeHeld reports a renewal's event unless the lock was lost
// meanwhile. Client.Close may have lost it, or its validity ran out
// during the renewal. It reports whether the lock is still held. The
// event is queued under sigMu, as EventLost is, so no event of the
// renewal follows the loss. It runs on the renewal's goroutine, where an
// Observer's panic is dropped.
func (l *Lock) observeHeld(ctx context.Context, kind EventKind, err error) bool {
	l.sigMu.Lock()
	held := !l.expireLocked()
	if held {
		l.queueLocked(ctx, kind, err)
	}
	l.sigMu.Unlock()
	l.report()
	return held
}

// currentTTL returns the TTL of the lock's last acquire or extend.
func (l *Lock) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// extendPolicy is an extend's part in its round. Once a quorum agreed,
// it repairs the masters that answered without the lock. Its fields are
// set at creation, then never changed.
type extendPolicy struct {
	quorum.NoHooks
	l     *Lock
	until time.Time // the deadline the round would set
	holds int64     // what a repair sets
	token uint64
}

func (p *extendPolicy) Settles(a quorum.Answer) bool { return a.Refused() }

func (p *extendPolicy) Settled(ctx context.Context, i int, _ quorum.Answer, _ bool) func() {
	return func() { p.l.repairOn(ctx, i, p.until, p.holds, p.token) }
}

// extendPolicy returns the policy of an extend whose validity ends by
// until. Read locks, and Options.NoRepair, repair nothing. l.mu must be
// held.
func (l *Lock) extendPolicy(until time.Time) quorum.Policy {
	if l.mode.repair == nil || l.client.noRepair {
		return quorum.NoHooks{}
	}
	return &extendPolicy{l: l, until: until, holds: int64(l.holds), token: max(l.token, 1)}
}
