package redlock

import (
	"context"
	"errors"
	"reflect"
	"time"
)

// Observer receives every quorum round a Client runs and the lifecycle
// events of its locks (Options.Observer). Its methods are called
// synchronously, on the goroutine that decided the round or saw the
// event. That is the caller's, or the library's own (auto-renewal, the
// expiry timer). They may be called concurrently. They must be fast and
// must not call back into the Client nor its Locks. ctx is the caller's
// context of the operation, for tracing; it may have ended.
//
// They must not panic. ObserveRound, EventAcquired, EventWaited and
// EventNoQuorum are reported on the goroutine of the call they describe.
// A panic there
// reaches the caller; an Acquire that panics releases the lock it got.
// The other events are queued when the Lock's state changes. They may be
// reported on another goroutine, the library's own included. A panic in
// one of them is recovered and dropped, so that the state stays
// consistent and the process lives. So is a panic in a round of the
// renewal.
//
// They should not block. A Lock's events are reported outside its
// mutexes, so a blocked Observer does not hold up Done, Err, Context or
// Held. It holds up the goroutine it blocks. That is an operation of the
// Lock on the caller's goroutine, or the Lock's renewal, which Release
// and Client.Close wait for. A renewal's batch holds other locks'
// renewals too. It also holds up the Lock's later events.
// The goroutine it blocks reports them after it, in order.
//
// One Lock's events come in order. Those of different Locks, even of one
// key in one process, need not. A last release hands the lock on to the
// process's next waiter before its round is decided. So the next holder's
// EventAcquired may come before the previous holder's EventReleased. Order
// one key's holders by Token, not by arrival. Without an Observer (the
// default) nothing is measured.
type Observer interface {
	ObserveRound(ctx context.Context, r Round)
	ObserveEvent(ctx context.Context, e Event)
}

// Round is one decided quorum round: an acquire, fence, extend, renew,
// release or resume sent to every master.
type Round struct {
	Op    string // "acquire", "fence", "extend", "renew", "release", "resume"
	Key   string // the lock's name, without KeyPrefix
	Start time.Time
	// Elapsed is the time from Start to the decision.
	Elapsed time.Duration
	// Validity is what a successful acquire, extend or renew left of the
	// TTL; 0 otherwise.
	Validity time.Duration
	// Masters are the masters as the decider saw them. A master that had
	// not answered yet has ErrNoReply (or ErrMasterTimeout after the
	// deadline) and Latency 0.
	Masters []MasterResult
	// Token is the largest fencing token the agreeing masters of a
	// successful acquire handed out; 0 otherwise. It is the Lock's token
	// unless a raise round ("fence") follows. EventAcquired has the final
	// one.
	Token uint64
	// Err is the round's *QuorumError, nil if the quorum agreed.
	Err error
}

// EventKind is what happened to a lock.
type EventKind int

// The events of a lock's life.
const (
	// EventAcquired: an acquire (or a write or read acquire, or a
	// Client.Resume) succeeded; Token and Until are set.
	EventAcquired EventKind = iota + 1
	// EventWaited: a blocking Lock of package mutex or rwmutex waited. It
	// found the lock held, or its process's turn for the lock taken. Wait
	// is how long. Err is why it stopped without the lock (nil if it got
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
	// EventNoQuorum: a blocking Lock of package mutex or rwmutex could
	// not reach a quorum. Too few masters answered its attempt: they are
	// down, slow or failing. Err is the attempt's error. It is reported
	// once per episode: again only after an attempt that heard a quorum
	// answer, granted or refused.
	EventNoQuorum
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

// Outcome names how an operation ended, from the error it returned, for
// metrics and logs. A Round's outcome is Outcome(r.Err); an EventWaited's
// is Outcome(e.Err). The names:
//
//	ok         the quorum agreed (err is nil)
//	contended  so many masters refused that no quorum was left: another owner holds the lock
//	canceled   the caller's context ended first
//	closed     the Client was closed
//	not_held   the lock was lost, or is not held by this Lock or owner (ErrNotHeld)
//	no_quorum  too few masters answered to decide: down, slow or failing
//	expired    a quorum agreed, but too late: no validity was left
//	error      anything else, such as an invalid argument or an upgrade
//
// The last four are failures. Contention and the caller's own
// cancellation are how locks work: a healthy service under contention
// shows only ok and contended.
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
// every one of obs, in order: an slogobserver and an otelredlock
// Observer together, say. Nil ones are skipped, nil pointers too (what a
// constructor returns with its error). With none left it returns nil,
// and nothing is measured. A panic of one skips the others for that call
// (see Observer).
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
