package redlock

import (
	"context"
	"time"
)

// Observer receives every quorum round a Client runs and the lifecycle
// events of its locks (Options.Observer). Its methods are called
// synchronously, on the goroutine that decided the round or saw the event,
// so they must be fast and must not call back into the Client nor its
// Locks: a Lock's EventLost, EventRenewed and EventRenewalFailed are
// reported under a mutex that the Lock's Done, Err and Extend, and
// Client.Close, also take. They may be called concurrently. ctx is the
// caller's context of the operation, for tracing; it may have ended.
// Without an Observer (the default) nothing is measured.
//
// One Lock's events come in order. Those of different Locks, even of one
// key in one process, need not: a last release hands the lock on to the
// process's next waiter before its round is decided, so the next holder's
// EventAcquired may come before the previous holder's EventReleased. Order
// one key's holders by Token, not by arrival.
type Observer interface {
	ObserveRound(ctx context.Context, r Round)
	ObserveEvent(ctx context.Context, e Event)
}

// Round is one decided quorum round: an acquire, fence, extend, renew or
// release sent to every master.
type Round struct {
	Op    string // "acquire", "fence", "extend", "renew", "release"
	Key   string // the lock's name, without KeyPrefix
	Start time.Time
	// Elapsed is the time from Start to the decision.
	Elapsed time.Duration
	// Validity is what a successful acquire, extend or renew left of the
	// TTL; 0 otherwise.
	Validity time.Duration
	// Masters are the masters as the decider saw them: a master that had
	// not answered yet has ErrNoReply (or ErrMasterTimeout after the
	// deadline) and Latency 0.
	Masters []MasterResult
	// Token is the largest fencing token the agreeing masters of a
	// successful acquire handed out, the Lock's token unless a raise round
	// ("fence") follows; 0 otherwise. (EventAcquired has the final one.)
	Token uint64
	// Err is the round's *QuorumError, nil if the quorum agreed.
	Err error
}

// EventKind is what happened to a lock.
type EventKind int

// The events of a lock's life.
const (
	// EventAcquired: an acquire (or a write or read acquire) succeeded;
	// Token and Until are set.
	EventAcquired EventKind = iota + 1
	// EventWaited: a blocking Lock of package mutex or rwmutex found the
	// lock held, or its process's turn for the lock taken, and waited;
	// Wait is how long, Err why it stopped without the lock (nil if it got
	// it).
	EventWaited
	// EventRenewed: auto-renewal extended the lock; Until is the new
	// deadline.
	EventRenewed
	// EventRenewalFailed: an auto-renewal round failed and will be retried
	// while validity is left; Err is the round's error.
	EventRenewalFailed
	// EventLost: the lock was lost before its release (renewal gave up,
	// validity ran out, or the client closed); Err says why.
	EventLost
	// EventReleased: the last Release ran; Err is its error, if any.
	EventReleased
)

var eventNames = [...]string{"", "acquired", "waited", "renewed", "renewal_failed", "lost", "released"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is one event of a lock's life.
type Event struct {
	Kind  EventKind
	Key   string // the lock's name, without KeyPrefix
	Read  bool   // a read lock
	Token uint64 // the lock's fencing token, 0 if none
	Until time.Time
	Wait  time.Duration // EventWaited
	// WasLost: for EventReleased, the lock had been lost before (and
	// EventLost reported); a count of held locks goes down only once.
	WasLost bool
	Err     error
}

// observe reports an event of l, if the client has an Observer.
func (l *Lock) observe(ctx context.Context, kind EventKind, err error) {
	o := l.client.observer
	if o == nil {
		return
	}
	e := Event{Kind: kind, Key: l.key, Read: l.mode == readMode, Token: l.token, Err: err}
	switch kind {
	case EventReleased:
		e.WasLost = l.lostBeforeRelease
	case EventLost:
	default:
		e.Until = l.Until()
	}
	o.ObserveEvent(ctx, e)
}
