package redlock

import (
	"context"
	"errors"
	"reflect"
	"time"
)

// Observer receives a Client's rounds and its locks' events, synchronously
// and maybe concurrently, on any goroutine. It must be fast, must not
// block nor panic, nor call back into the Client or its Locks. ctx is the
// operation's, maybe ended. A Lock's events come in order; order a key's
// holders by Token.
type Observer interface {
	ObserveRound(ctx context.Context, r Round)
	ObserveEvent(ctx context.Context, e Event)
}

// Round is one decided quorum round, sent to every master.
type Round struct {
	Op       string         // "acquire", "fence", "extend", "renew", "release", "resume"
	Key      string         // the lock's name, without KeyPrefix
	Start    time.Time      // when the round started
	Elapsed  time.Duration  // from Start to the decision
	Validity time.Duration  // left of the TTL by a successful acquire, extend or renew; else 0
	Masters  []MasterResult // the masters as the decider saw them
	Token    uint64         // the largest token a successful acquire's masters gave; else 0
	Err      error          // the round's *QuorumError, nil if the quorum agreed
}

// EventKind is what happened to a lock.
type EventKind int

// The events of a lock's life.
const (
	EventAcquired      EventKind = iota + 1 // an acquire or Resume succeeded; Token and Until are set
	EventWaited                             // a blocking Lock (mutex, rwmutex) waited Wait; Err: why it stopped without the lock
	EventRenewed                            // auto-renewal extended the lock; Until is the new deadline
	EventRenewalFailed                      // a renewal round failed, retried while validity is left; Err is its error
	EventLost                               // the lock was lost before its release; Err says why
	EventReleased                           // the last Release ran; Err is its error, if any
	EventNoQuorum                           // too few masters answered a blocking Lock's attempt; once per episode
)

var eventNames = [...]string{"", "acquired", "waited", "renewed", "renewal_failed", "lost", "released", "no_quorum"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is one event of a lock's life.
type Event struct {
	Kind    EventKind
	Key     string        // the lock's name, without KeyPrefix
	Read    bool          // a read lock
	Token   uint64        // the lock's fencing token, 0 if none
	Until   time.Time     // the lock's deadline while it is held; else zero
	Wait    time.Duration // how long an EventWaited waited
	WasLost bool          // EventReleased: EventLost came before; count it once
	Err     error         // why, for the kinds that say so
}

// observe reports an event of l at once, if the client has an Observer.
// It is only for events that no other of l's can precede (EventAcquired).
func (l *Lock) observe(ctx context.Context, kind EventKind, err error) {
	if o := l.client.observer; o != nil {
		o.ObserveEvent(ctx, l.event(kind, err))
	}
}

func (l *Lock) event(kind EventKind, err error) Event {
	e := Event{Kind: kind, Key: l.key, Read: l.mode == readMode, Token: l.token, Err: err}
	switch kind {
	case EventReleased:
		e.WasLost = l.life.wasLost
	case EventLost:
	default:
		e.Until = l.Until()
	}
	return e
}

// queuedEvent is an event of a Lock waiting to be reported.
type queuedEvent struct {
	ctx context.Context
	e   Event
}

// eventQueue holds a Lock's events until report hands them to the
// Observer. Guarded by Lock.sigMu.
type eventQueue struct {
	events    []queuedEvent
	reporting bool // a goroutine is reporting them (see report)
}

// queueLocked queues an event of l, if the client has an Observer. The
// caller reports it once it has let go of sigMu. Queued under sigMu, l's
// events keep the order of the changes they tell of.
func (l *Lock) queueLocked(ctx context.Context, kind EventKind, err error) {
	if l.client.observer != nil {
		l.queue.events = append(l.queue.events, queuedEvent{ctx, l.event(kind, err)})
	}
}

// report hands l's queued events to the Observer, in order, on this
// goroutine. If another goroutine is already doing so, report leaves them
// to it and returns at once. It calls the Observer without sigMu, so that
// a blocked Observer does not block Done, Err or Client.Close. A panic of
// the Observer is recovered and dropped: the event may not be this
// goroutine's.
func (l *Lock) report() {
	o := l.client.observer
	if o == nil {
		return
	}
	q := &l.queue
	l.sigMu.Lock()
	if q.reporting {
		l.sigMu.Unlock()
		return
	}
	q.reporting = true
	locked := true
	// Should the Observer end the goroutine (runtime.Goexit), the next
	// report takes over.
	defer func() {
		if !locked {
			l.sigMu.Lock()
		}
		q.reporting = false
		l.sigMu.Unlock()
	}()
	for len(q.events) > 0 {
		e := q.events[0]
		q.events[0] = queuedEvent{}
		q.events = q.events[1:]
		l.sigMu.Unlock()
		locked = false
		observeEvent(o, e)
		l.sigMu.Lock()
		locked = true
	}
	q.events = nil
}

// observeEvent calls o with q, and drops its panic, if any.
func observeEvent(o Observer, q queuedEvent) {
	defer func() { _ = recover() }()
	o.ObserveEvent(q.ctx, q.e)
}

type backgroundKey struct{}

// inBackground marks ctx as that of the library's own goroutine, the
// auto-renewal. observeRound drops the Observer's panics there. report
// drops those of its events.
func inBackground(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

func isBackground(ctx context.Context) bool { return ctx.Value(backgroundKey{}) != nil }

// Outcomes of an operation, as Outcome names them.
const (
	outcomeOK        = "ok"
	outcomeContended = "contended"
	outcomeCanceled  = "canceled"
	outcomeClosed    = "closed"
	outcomeNotHeld   = "not_held"
	outcomeNoQuorum  = "no_quorum"
	outcomeExpired   = "expired"
	outcomeError     = "error"
)

// Outcome names how an operation ended, for metrics: ok, contended,
// canceled, closed, or the failures not_held, no_quorum, expired, error.
func Outcome(err error) string {
	var qe *QuorumError
	switch {
	case err == nil:
		return outcomeOK
	case errors.As(err, &qe):
		return qe.outcome()
	case errors.Is(err, ErrClosed):
		return outcomeClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	case errors.Is(err, ErrNotHeld):
		return outcomeNotHeld
	}
	return outcomeError
}

// outcome is Outcome of e. An acquire is contended where the refusals
// alone leave too few masters for a quorum: it fails whatever the others
// answer. Where failing, silent or held-back masters could have made
// one, they cost it: no quorum. A refusal that says the Lock does not
// hold the lock (a re-entry, resume or fence) is no contention: not held.
func (e *QuorumError) outcome() string {
	switch {
	case e.upgrade:
		return outcomeError
	case e.Expired:
		return outcomeExpired
	case e.sentinel == ErrNotHeld:
		return outcomeNotHeld
	}
	if e.sentinel == ErrNotObtained {
		refused, elsewhere := 0, false
		for _, m := range e.Masters {
			if !m.Agreed && isRefusal(m.Err) {
				refused++
				elsewhere = elsewhere || m.Err != ErrNotHeld
			}
		}
		switch {
		case refused == 0 || len(e.Masters)-refused >= e.Quorum:
		case elsewhere:
			return outcomeContended
		default:
			return outcomeNotHeld
		}
	}
	if e.ctxErr != nil {
		return outcomeCanceled
	}
	return outcomeNoQuorum
}

// Observers returns one Observer that hands each round and event to
// every one of obs, in order. Nil ones are skipped; with none left it
// returns nil.
func Observers(obs ...Observer) Observer {
	var list observers
	for _, o := range obs {
		if v := reflect.ValueOf(o); o != nil && (v.Kind() != reflect.Pointer || !v.IsNil()) {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

// observers is what Observers returns for two or more.
type observers []Observer

func (os observers) ObserveRound(ctx context.Context, r Round) {
	for _, o := range os {
		o.ObserveRound(ctx, r)
	}
}

func (os observers) ObserveEvent(ctx context.Context, e Event) {
	for _, o := range os {
		o.ObserveEvent(ctx, e)
	}
}
