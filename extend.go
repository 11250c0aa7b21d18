package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redlock/redlock/internal/quorum"
)

// Extend sets the lock's TTL to ttl from now on each master, never
// shortening it, and sets it again where it was lost. If a quorum agreed
// in time, Until is ttl from the round's start, less drift. Else it
// returns a *QuorumError: ErrNotHeld if the lock is surely lost (Done
// closes) or agreed too late, ErrNoQuorum if too few answered. It blocks
// for one round, after the Lock's other operations under way.
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

// AutoRenew keeps the lock held until its last Release, extending it by
// its TTL every third of it in the background; if renewal cannot reach a
// quorum in time, Done closes. It does not block; a second call is a no-op.
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
