package redlock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
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

	sigMu sync.Mutex  // guards life's changes, sig, queue and late; never held across I/O
	life  life        // held, lost or released; read without sigMu too
	sig   *lostSignal // made on first use (see signal)
	queue eventQueue  // the Observer's events, in order
	late  lateBook    // the first acquire's late agreements, the last release's misses
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

// sendsTTL records that a call is about to ask the masters for ttl (see
// longest). l.mu must be held.
func (l *Lock) sendsTTL(ttl time.Duration) {
	if int64(ttl) > l.longest.Load() {
		l.longest.Store(int64(ttl))
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
