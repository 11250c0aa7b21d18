package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// Lock is a lock held on a quorum of masters: one exclusive acquisition,
// or an owner's holds on a reentrant, read or write lock. It is safe for
// concurrent use; its operations run one at a time. Locks come from a
// Client's Acquire methods: a zero or nil Lock is not held, its Done is
// closed, and its operations and Err return an error wrapping
// ErrInvalidArgument.
type Lock struct {
	lockID // set before the Lock is returned, then never changed

	mu    sync.Mutex // serializes operations; guards the fields below
	ttl   time.Duration
	holds int
	renew *renewal
	// stopping: the last Release is stopping renewal, with mu let go;
	// AutoRenew then starts none (see release).
	stopping bool
	// quick: the first acquire was decided within a quarter of
	// MasterTimeout and an eighth of the TTL (see release). Set before
	// the Lock is returned.
	quick bool

	// repaired: a repair was sent (see repairOn). Stored before the
	// repair reads the life's stage, which the last release stores
	// before its round: the release sees repaired, or the repair sees
	// the release.
	repaired atomic.Bool
	// unsent: the masters where the first acquire was surely not sent
	// (bit i for master i); releases skip them (see releaseSkip).
	unsent atomic.Uint64
	// longest is the longest TTL a call of this Lock asked a master to
	// set, failed Extends included: a key may live that long, so cleanups
	// are retried, and release markers kept, for that long. Written under
	// mu.
	longest atomic.Int64
	// late pairs the first acquire's late agreements with the last
	// release's misses; it has its own mutex.
	late lateBook

	sigMu sync.Mutex // guards life's changes, sig and queue
	life  life       // held, lost or released; read without sigMu too
	sig   *lostSignal
	queue eventQueue // the Observer's events, in order
}

// lockID is what identifies a Lock: set before the Lock is returned (the
// token once the acquire is decided), then never changed.
type lockID struct {
	client *Client
	mode   *mode
	key    string
	value  string // the owner: random for Acquire
	nonce  string // random per Lock: see scripts.lua
	keys   pipeline.Keys
	token  uint64
	// boxed holds, boxed once, the arguments that args sends again and
	// again.
	boxed struct {
		value, nonce, writeWait, ttlMs any
		ttl                            time.Duration // the first TTL, of ttlMs
	}
	// writeWait > 0: a write lock whose attempts keep new readers out for
	// that long while readers hold it (see rwmutex.Options.WriteWait and
	// markerTTL).
	writeWait time.Duration
}

// Stages of a Lock's life.
const (
	stageHeld     uint32 = iota // until its deadline, unless its Client closed
	stageLost                   // Err is the cause; Done is closed once made
	stageReleased               // the last hold is gone, lost before or not
)

// life is a Lock's lifecycle: held until its deadline, then lost with a
// cause, or released. It changes only under Lock.sigMu, in one step with
// the signal and the events it queues. Held, and the rounds' late hooks,
// read until and stage without the lock.
type life struct {
	until atomic.Int64  // the deadline, in ns since client.epoch; 0 before and after
	stage atomic.Uint32 // stageHeld, stageLost or stageReleased; never back to held
	cause error         // why Done closed: set with lost or released
	// wasLost: the lock was lost before its last hold was released
	// (Event.WasLost).
	wasLost bool
}

// ended reports whether the lock was lost or released.
func (s *life) ended() bool { return s.stage.Load() != stageHeld }

// lateBook pairs, per master, the first acquire's late agreements with the
// last release's misses (see Lock.meet). Bit i is master i.
type lateBook struct {
	mu      sync.Mutex // guards the fields below
	agreed  uint64     // agreed to the first acquire after its decision
	missed  uint64     // the last release found nothing there
	unknown uint64     // of agreed, those whose outcome is unknown (see unanswered)
}

var (
	errNilLock  = invalidf("nil Lock: use Client.Acquire")
	errZeroLock = invalidf("zero Lock: use Client.Acquire")
)

// check returns an error if l was not made by a Client.
func (l *Lock) check() error {
	switch {
	case l == nil:
		return errNilLock
	case l.client == nil:
		return errZeroLock
	}
	return nil
}

// Key returns the lock's name, without the client's prefix.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Value returns the value that identifies the holder on the masters: a
// random value for Acquire, the owner for the other kinds of lock.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Token returns the fencing token of this acquisition: larger than every
// token handed out before for the same lock name while the masters keep
// the name's counter, which lives as long as the lock's key (the TTL of
// its last acquire or extend). Once a counter is lost (a master restarted
// without persistence, or the name went unused that long), later tokens
// are larger only if the masters' clocks agree and the name's TTLs are
// within a factor of two (README, assumption 4). Hand it to the resource
// the lock protects, which must reject a token lower than one it has
// already seen. Re-entering keeps the token. It is 0 for read locks and
// with Options.NoFencing.
func (l *Lock) Token() uint64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Holds returns how many times the owner holds the lock: 1 after acquire,
// one more per Reenter, one less per Release.
func (l *Lock) Holds() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// Until returns the time until which the lock is safely held: a deadline on
// the monotonic clock. After the last Release, or once it has passed, the
// lock is not held. It is the zero time for a zero or nil Lock.
func (l *Lock) Until() time.Time {
	if l.check() != nil {
		return time.Time{}
	}
	return l.client.epoch.Add(time.Duration(l.life.until.Load()))
}

// Held reports whether the lock is still held: its validity has not run
// out, and it was neither released nor lost (Done is open) nor its Client
// closed.
func (l *Lock) Held() bool {
	return l.check() == nil && !l.life.ended() && !l.client.gate.closing() && time.Now().Before(l.Until())
}

// setUntil moves the deadline to t, unless the lock was already lost, or
// its validity ran out before (even if nobody watched): then it returns
// why, and Done and Held stay consistent. The caller reports the
// EventLost it may queue.
func (l *Lock) setUntil(t time.Time) error {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if l.life.until.Load() != 0 && l.expireLocked() { // 0: the first acquire
		return l.life.cause
	}
	if l.life.cause != nil {
		return l.life.cause
	}
	l.life.until.Store(int64(t.Sub(l.client.epoch)))
	if l.sig != nil {
		l.sig.timer.Reset(time.Until(t))
	}
	return nil
}

// box sets l.boxed; l must not be in use yet.
func (l *Lock) box() {
	b := &l.boxed
	b.value, b.nonce, b.ttl, b.ttlMs = l.value, l.nonce, l.ttl, l.ttl.Milliseconds()
	b.writeWait = l.markerTTL().Milliseconds()
}

// markerTTL is how long a waiting writer's attempt keeps new readers out
// on a master: writeWait from the end of its round, and until its next
// attempt reaches the master if that comes within writeWait. After the
// master set the marker, the round may take MasterTimeout to be decided
// and another to undo what it took, and the next attempt's call as long
// to reach the master.
func (l *Lock) markerTTL() time.Duration {
	if l.writeWait <= 0 {
		return 0
	}
	if d := l.writeWait + 3*l.client.masterTimeout; d > l.writeWait {
		return d
	}
	return l.writeWait // whole centuries: the sum overflows
}

// take runs the acquire round for the given number of holds: 1 for a new
// lock, one more than now to re-enter. l.mu must be held.
func (l *Lock) take(ctx context.Context, holds int) error {
	c, m := l.client, l.mode
	if holds == 1 {
		// A new lock's round, and its validity, start once the masters
		// are set up: setup must not spend its MasterTimeout. Before the
		// proposed token is read, so that setup does not make it stale.
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
	o := &op{name: "acquire", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: m.acquire,
		Keys:   l.keys,
		Args:   args,
		Send:   quorum.Send{Withdraw: true},
		Undo:   &quorum.Undo{Script: m.release, Args: undo, Mark: mark, KeyTTL: l.longestTTL()},
		TTL:    l.ttl,
		Policy: &acquirePolicy{l: l, holds: holds},
	}}
	if holds == 1 {
		o.refused = ErrHeldElsewhere // a new lock's refusal; a re-entry's is ErrNotHeld
		o.Send.Unsent = &l.unsent
		if m.fenced && c.fencing {
			// A token must be larger than every earlier lock's: see
			// "Fencing tokens" in README.md.
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
			_ = l.releaseRound(context.WithoutCancel(ctx), 0, nil)
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

// raiseFence makes the token final. The token is the largest counter among
// the granting quorum; when those counters differ, a second round raises
// them to the token where this owner still holds the lock, and needs a
// quorum. Then every quorum that grants the lock later shares a master
// whose counter is at least the token, and increments it: later tokens are
// larger. When the counters agree, the granting quorum already is such a
// quorum, and the second round is skipped.
func (l *Lock) raiseFence(ctx context.Context, res quorum.Outcome, until time.Time) error {
	if !res.Mixed {
		return nil
	}
	if _, err := l.client.do(ctx, &op{name: "fence", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: fenceScript,
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

// sendsTTL records that a call is about to ask the masters for ttl (see
// longest). l.mu must be held.
func (l *Lock) sendsTTL(ttl time.Duration) {
	if int64(ttl) > l.longest.Load() {
		l.longest.Store(int64(ttl))
	}
}

// longestTTL returns the longest TTL a call of this Lock asked for.
func (l *Lock) longestTTL() time.Duration { return time.Duration(l.longest.Load()) }

// lateAgreement handles master i's agreement to the acquire round for
// holds after the round was decided. The lock's last release may already
// have reached that master and found nothing, so that this agreement would
// outlive the lock: then it is deleted again. For the first acquire, the
// master's late agreement and the release's answer there meet in
// releasedOn, whichever comes second, so that the delete is sent only
// where the release missed; for a re-entry, whenever the lock is released.
// The delete runs in the background: lateAgreement does not block.
func (l *Lock) lateAgreement(ctx context.Context, i, holds int, unknown bool) {
	if holds > 1 {
		if l.life.stage.Load() == stageReleased {
			l.client.engine.Spawn(ctx, func() { l.dropOn(ctx, i, unknown) })
		}
		return
	}
	l.meet(ctx, i, &l.late.agreed, &l.late.missed, unknown)
}

// releasedOn learns whether the last release deleted the lock on master i.
func (l *Lock) releasedOn(ctx context.Context, i int, deleted bool) {
	if !deleted {
		l.meet(ctx, i, &l.late.missed, &l.late.agreed, false)
	}
}

// meet records one of the two events on master i, a late agreement (whose
// outcome may be unknown) or a release that missed, and drops the lock
// there, in the background, if the other came first. It does not block.
func (l *Lock) meet(ctx context.Context, i int, mine, other *uint64, unknown bool) {
	bit := uint64(1) << i
	b := &l.late
	b.mu.Lock()
	met := *other&bit != 0
	*mine |= bit
	if unknown {
		b.unknown |= bit
	}
	unknown = b.unknown&bit != 0
	b.mu.Unlock()
	if met {
		l.client.engine.Spawn(ctx, func() { l.dropOn(ctx, i, unknown) })
	}
}

// dropOn deletes the lock on master i, where this Lock holds it, retrying
// until the master answers (see Client.cleanUp); where the acquire's
// outcome there is unknown, it leaves a marker if it finds nothing. It
// blocks meanwhile.
func (l *Lock) dropOn(ctx context.Context, i int, unknown bool) {
	a := argv{ttl: l.longestTTL()}
	if unknown {
		a.last = markMissing
	}
	args := l.args(a)
	l.client.engine.CleanUp(ctx, i, quorum.Cleanup{Script: l.mode.release, Keys: l.keys, Args: args}, l.longestTTL())
}

// releaseRound sets the owner's holds to holds on every master. At 0 it
// deletes the lock there, retried in the background on masters that gave
// no answer, and hands the lock on with queued (see release).
func (l *Lock) releaseRound(ctx context.Context, holds int, queued func()) error {
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
		Script: l.mode.release,
		Keys:   l.keys,
		Args:   l.args(a),
		Send:   quorum.Send{Must: true, Skip: (*releaseSkip)(l)},
	}}
	var last *releasePolicy
	if holds == 0 {
		last = &releasePolicy{
			l:      l,
			retry:  quorum.Cleanup{Script: o.Script, Keys: o.Keys, Args: o.Args},
			keyTTL: ttl,
			early:  l.client.ordered && l.quick && !l.client.isContested(o.Keys.Names[0]),
			then:   queued,
		}
		o.Policy = last
	}
	res, err := l.client.do(ctx, o)
	if last != nil {
		if !last.early {
			last.handOff()
		}
		if err == nil && l.mode != readMode { // a read release always replies 1
			l.client.contest(o.Keys.Names[0], res.Max == replyWaited)
		}
	}
	return err
}

// releaseSkip is a Lock as its releases' pipeline.Skipper: a master where
// the first acquire was surely not sent (its round was decided without
// it, or it was shed) holds nothing of this Lock, unless a repair set it
// there. repairOn stores repaired before it reads the life's stage, and
// the last release stores released before its calls ask Skip: either Skip
// sees repaired, or the repair sees released and sends nothing.
type releaseSkip Lock

func (s *releaseSkip) Skip(i int) bool {
	l := (*Lock)(s)
	return l.unsent.Load()&(1<<i) != 0 && !l.repaired.Load()
}

// Reenter adds one hold for the lock's owner and renews its TTL, over the
// quorum. It needs the lock to be held (else ErrNotHeld, or ErrClosed once
// its Client is closed, and nothing is sent); it fails like an acquire,
// wrapping ErrNotObtained, and then the holds are unchanged (and the lock
// lost where a quorum cannot hold it any more, as with Extend). It blocks for
// one quorum round, after any Extend, Release or renewal of the same Lock
// under way.
//
// Every master stores the owner's hold count, sent as an absolute value by
// each Reenter and Release. A master that missed one call is corrected by
// the next, and the last Release deletes the lock on every master whatever
// count it had: a lock is never left held after its owner's last release,
// nor dropped while the owner still holds it.
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
	return l.take(ctx, l.holds+1)
}

func (l *Lock) checkHeld(op string) error {
	switch {
	case l.holds == 0:
		return fmt.Errorf("%w: %s %s: released", ErrNotHeld, op, quote(l.key))
	case l.client.gate.closing():
		return errClosedOp(op, l.key)
	case !time.Now().Before(l.Until()):
		return fmt.Errorf("%w: %s %s: validity ran out at %v", ErrNotHeld, op, quote(l.key), l.Until().Round(0))
	case l.life.ended():
		return fmt.Errorf("%s: %w", op, l.lostCause())
	}
	return nil
}

// Extend sets the lock's TTL to ttl from now on every master that still
// holds it for this owner, unless the key's TTL there is longer: it never
// shortens the lock on a master, so that its calls, which may land after
// the round failed or even after a later Extend, cannot cut the lock short.
// A master where the key has gone is not extended; once a quorum agreed,
// the lock is set again there, unless Options.NoRepair (see "Quorum
// repair" in README.md). It succeeds only if a quorum agreed with validity
// left, and then sets Until to ttl from the round's start, less the drift
// allowance (earlier than before if ttl is shorter). If the lock's
// validity has already run out, Extend writes nothing and returns
// ErrNotHeld; once Client.Close has begun, ErrClosed. Otherwise it fails
// with a *QuorumError, and Until is unchanged. It wraps ErrNotHeld where
// so many masters answered that they do not hold it that the others
// cannot make a quorum: the lock is lost at once, and Done closes with
// that error (see Done). It also wraps ErrNotHeld where a quorum agreed
// too late, with no validity left from the round's start (Expired): the
// lock is not extended, but not lost either, and stays held until Until.
// Else too few masters answered in time: it wraps ErrNoQuorum, and the
// lock is still held until Until.
//
// Extend blocks until the quorum is decided, at most MasterTimeout after
// any Reenter, Release or renewal of the same Lock under way.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	err := l.extend(ctx, ttl, "extend")
	if l.check() == nil {
		l.report() // the loss the round may have found
	}
	return err
}

// extend is Extend; name names the call in errors ("extend", "renew").
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
	if name == "renew" {
		ttl = l.ttl // an Extend may have changed it since the renewal read it
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
	if l.renew != nil && name != "renew" {
		l.renew.replanned()
	}
	return nil
}

// loseIfRefused loses the lock where err, of a round of this held Lock
// (a re-entry, extend, renewal or release that leaves holds), is a
// *QuorumError in which so many masters answered that they do not hold it
// (ErrNotHeld) for this Lock, or do not count (a replica, a server that
// counted already), that the others cannot make a quorum: its keys were
// deleted there, those masters restarted empty, or another owner took it.
// Whatever validity is left, another owner may hold it now. A master that
// did not answer may still hold it, so timeouts and errors alone lose
// nothing before the validity runs out.
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
// without it (it restarted empty, or the key expired there), once a
// quorum of the others decided the extend. It sets the validity left,
// until the earlier of the old deadline and until, the extend's, with the
// holds and token the Lock has (see "repair" in scripts.lua). Without it
// a long-held lock would erode one restart at a time. Repairing does not
// count toward the extend; a lock that has expired, was lost or released
// is not repaired; what it sets, the Lock's release deletes. It blocks
// for one call.
func (l *Lock) repairOn(ctx context.Context, i int, until time.Time, holds int64, token uint64) {
	end := until
	if u := l.Until(); u.Before(end) {
		end = u
	}
	ttl := time.Until(end).Truncate(time.Millisecond)
	l.repaired.Store(true) // before reading the stage: see repaired
	if ttl <= 0 || l.life.ended() {
		return
	}
	args := l.args(argv{ttl: ttl, holds: holds, last: strconv.FormatUint(token, 10)})
	_, _ = l.client.nodes[i].eval(ctx, l.mode.repair, l.keys, args, false)
}

// releaseAfterPanic releases l, whose acquire panicked before l reached
// its caller, on every master where it may have landed, unless the acquire
// released it already; EventReleased balances an EventAcquired that went
// out. A panic of its own is dropped: the first one goes on. l.mu must be
// held.
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

// Release gives up one hold; the last one deletes the lock on every master
// where this Lock still holds it, and wakes waiters. It runs even if ctx has
// ended (only ctx's values are used): a release must not be lost. It returns nil if a
// quorum held it (it was still ours). It returns a *QuorumError wrapping
// ErrNotHeld where so many masters answered that they did not hold it that
// no quorum can have: it had expired or was lost, and the critical section
// may have overlapped another holder's. Where too few masters answered in
// time to tell, the error wraps ErrNoQuorum instead: the lock may have
// been held all along (unless it was lost or ran out before: then it wraps
// both). Either way the hold is gone afterwards. Once Client.Close has begun, Release sends nothing
// and returns ErrClosed. A Release that leaves holds and finds the lock lost
// on a quorum closes Done, as Extend does. Calling Release after the last
// hold is gone sends nothing and returns ErrNotHeld. The last Release stops auto-renewal before it sends
// anything, and closes Done with ErrReleased.
//
// Release blocks until the quorum is decided, at most MasterTimeout. The
// delete still reaches slower masters in the background, and is retried
// where a master gave no answer, until it answers or the lock would have
// expired there anyway (see Client.Close).
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, nil) }

// release is Release. The last one hands the lock on: it wakes this
// client's next waiter for it (see Client.releasing) and runs queued, if
// set, once its calls are queued on every master, so that the waiter's
// acquire follows them there instead of a round later. Only where the
// masters keep the calls of one key in order (Pipeline.Ordered), and where
// they answered this Lock's acquire within a quarter of MasterTimeout and
// an eighth of its TTL: an acquire queued behind the release waits for its
// reply first, and must still be decided within MasterTimeout, and within
// a quarter of the TTL where it takes a fencing token (op.grantWithin); and
// unless this client's last release of the lock found another client
// waiting (see Client.isContested), whose waiters must not lose every race
// to this client's. Elsewhere it hands the lock on once its round is
// decided. queued must not block nor use l.
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

func (l *Lock) String() string {
	if l == nil {
		return "redlock.Lock(nil)"
	}
	return "redlock.Lock(" + quote(l.key) + ")"
}
