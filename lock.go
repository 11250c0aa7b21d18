package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// Lock order of package redlock. A goroutine that holds a mutex of this
// list takes only mutexes further down it:
//
//	Lock.mu          a Lock's operations; held across their rounds
//	renewer.mu       the Client's auto-renewals: their queue and batches
//	Lock.sigMu       a Lock's life, signal, events and late book
//	gate.locksMu     the live locks, and the step to closing
//
// A renewal batch holds the Lock.mu of each of its locks across its
// round. It takes them with TryLock, so it never waits for one; a busy
// lock is retried later. renewer.mu is let go before a lock is lost, and
// before any I/O.
//
// Lock.mu is held across a round, so every mutex that a round or a
// hand-off takes comes after it. Lock.sigMu calls Client.track and
// Client.untrack, which take gate.locksMu. The other mutexes are leaves:
// nothing is taken while one is held. They are gate.mu, watchSet.mu,
// watch.mu, contestedSet.mu, idCache.mu and preparation.mu. So are the
// engine's round.mu, manyRound.mu, cleaner.mu, timeouts.mu and
// health.mu, in internal/quorum.
// watchSet.mu and watch.mu are never held together.
//
// Two calls out are never made under Lock.sigMu: I/O, and the Observer.
// report lets sigMu go around each event. Lock.mu is held while a round
// calls the Observer, so an Observer must not call back into the Lock.

// Lock is a lock held on a quorum of masters: an exclusive acquisition,
// or an owner's holds on a reentrant, read or write lock. It is safe for
// concurrent use; its operations run one at a time. A zero or nil Lock
// is not held, and its methods return errors wrapping ErrInvalidArgument.
type Lock struct {
	lockID // set before the Lock is returned, then never changed

	mu    sync.Mutex // serializes operations; guards the fields below
	ttl   time.Duration
	holds int
	renew *renewal // the Lock's auto-renewal, nil if none: see AutoRenew
	// stopping: the last Release is stopping renewal, with mu let go.
	// AutoRenew then starts none.
	stopping bool
	// quick: the first acquire was decided within a quarter of
	// MasterTimeout and an eighth of the TTL. Set before the Lock is
	// returned.
	quick bool

	// repaired: a repair was sent. Atomic: repairOn stores it before it
	// reads the life's stage. The last release stores the stage before
	// its round. So the release sees repaired, or the repair sees the
	// release.
	repaired atomic.Bool
	// unsent: the masters where the first acquire was surely not sent
	// (bit i for master i). Releases skip them. Atomic: the acquire's
	// pipelines set bits while the round runs.
	unsent atomic.Uint64
	// longest is the longest TTL a call of this Lock asked a master to
	// set, failed Extends included. A key may live that long, so cleanups
	// are retried and release markers kept for that long. Written under
	// mu; atomic, as cleanups read it without mu.
	longest atomic.Int64

	// sigMu guards the fields below. life's atomics are also read
	// without it.
	sigMu sync.Mutex  // guards life's changes, sig, queue and late; never held across I/O
	life  life        // held, lost or released; read without sigMu too
	sig   *lostSignal // made on first use (see signal)
	queue eventQueue  // the Observer's events, in order
	late  lateBook    // the first acquire's late agreements, the last release's misses
}

// lockID is what identifies a Lock. It is set before the Lock is
// returned, then never changed. The token is set once the acquire is
// decided.
type lockID struct {
	client *Client
	mode   *mode
	key    string
	value  string // the owner: random for Acquire
	nonce  string // random per Lock: see scripts.lua
	keys   pipeline.Keys
	token  uint64
	// origin is the context of the first acquire, or of Resume, without
	// its cancellation, only with an Observer. Its values (a span, say)
	// go with the lock's renewals and its loss, so that they show in the
	// trace of the work the lock guards.
	origin context.Context
	// boxed holds the arguments that args sends again and again. They
	// are boxed once, to save an allocation per call.
	boxed struct {
		value, nonce, writeWait, ttlMs any
		ttl                            time.Duration // the first TTL, of ttlMs
	}
	// writeWait > 0: a write lock whose attempts keep new readers out
	// for that long while readers hold it.
	writeWait time.Duration
	// capacity > 0: a semaphore's permit, admitted where fewer permits
	// than that are live. It goes where writeWait would: ARGV[5].
	capacity int
	// queued: a fair lock's "ticket:waiter TTL (ms)", its ARGV[5] too.
	queued string
	// names are a multi-resource lock's names, sorted; nil for others.
	names []string
}

// Stages of a Lock's life.
const (
	stageHeld     uint32 = iota // until its deadline, unless its Client closed
	stageLost                   // Err is the cause; Done is closed once made
	stageReleased               // the last hold is gone, lost before or not
)

// life is a Lock's lifecycle: held until its deadline, then lost with a
// cause, or released. It changes only under Lock.sigMu. The signal and
// the events change in the same step. Held and the rounds' late hooks
// read until and stage without the mutex: those two are atomic.
type life struct {
	until atomic.Int64  // the deadline, in ns since client.epoch; 0 before and after
	stage atomic.Uint32 // stageHeld, stageLost or stageReleased; never back to held
	cause error         // why Done closed: set with lost or released
	// wasLost: the lock was lost before its last hold was released.
	// Event.WasLost reports it. Guarded by sigMu.
	wasLost bool
}

// ended reports whether the lock was lost or released.
func (s *life) ended() bool { return s.stage.Load() != stageHeld }

// lateBook pairs, per master, the first acquire's late agreements with the
// last release's misses. Bit i is master i. Guarded by Lock.sigMu.
type lateBook struct {
	agreed  uint64 // agreed to the first acquire after its decision
	missed  uint64 // the last release found nothing there
	unknown uint64 // of agreed, those whose outcome is unknown
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

// Value is the holder on the masters: Acquire's random value, or the owner.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Token returns the acquisition's fencing token, larger than every
// earlier one of the name (docs/guarantees.md: assumption 4); 0 for read
// locks or NoFencing. The resource must reject one below one it has seen.
func (l *Lock) Token() uint64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Holds returns the owner's holds: 1 at first, +1 per Reenter, -1 per Release.
func (l *Lock) Holds() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// Until returns the monotonic deadline until which the lock is safely
// held, if not released; zero for a zero or nil Lock.
func (l *Lock) Until() time.Time {
	if l.check() != nil {
		return time.Time{}
	}
	return l.client.epoch.Add(time.Duration(l.life.until.Load()))
}

// Held reports whether the lock is held: Done open, Until ahead, Client open.
func (l *Lock) Held() bool {
	return l.check() == nil && !l.life.ended() && !l.client.gate.closing() && time.Now().Before(l.Until())
}

// setUntil moves the deadline to t. It refuses if the lock was lost, or
// if its validity ran out before, even unwatched. It then returns why,
// so that Done and Held stay consistent. The caller reports the EventLost
// it may queue.
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
	if l.capacity > 0 {
		b.writeWait = int64(l.capacity)
	}
	if l.queued != "" {
		b.writeWait = l.queued
	}
}

// markerTTL is how long a waiting writer's attempt keeps new readers out
// on a master. It covers writeWait from the end of the attempt's round.
// It also lasts until the next attempt reaches the master, if that comes
// within writeWait. After the master sets the marker, the round may take
// MasterTimeout to be decided. The undo may take another MasterTimeout,
// and the next attempt's call as long again.
func (l *Lock) markerTTL() time.Duration {
	if l.writeWait <= 0 {
		return 0
	}
	if d := l.writeWait + 3*l.client.masterTimeout; d > l.writeWait {
		return d
	}
	return l.writeWait // whole centuries: the sum overflows
}

// sendsTTL records that a call is about to ask the masters for ttl.
// l.mu must be held.
func (l *Lock) sendsTTL(ttl time.Duration) {
	if int64(ttl) > l.longest.Load() {
		l.longest.Store(int64(ttl))
	}
	c := &l.client.longest
	for old := c.Load(); int64(ttl) > old && !c.CompareAndSwap(old, int64(ttl)); old = c.Load() {
	}
}

// longestTTL returns the longest TTL a call of this Lock asked for.
func (l *Lock) longestTTL() time.Duration { return time.Duration(l.longest.Load()) }

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

func (l *Lock) String() string {
	if l == nil {
		return "redlock.Lock(nil)"
	}
	return "redlock.Lock(" + quote(l.key) + ")"
}

// eventContext is the context of the lock's events that no call of the
// caller's tells: a loss, say. It has the first acquire's values.
func (l *Lock) eventContext() context.Context {
	if l.origin != nil {
		return l.origin
	}
	return context.Background()
}
