package nemesis

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/mutex"
)

// Waiter is one ticket of a fair lock call (Kind Fair), and when it
// queued and stopped waiting, on the Recorder's clock.
type Waiter struct {
	Client int
	Key    int
	Ticket uint64
	// Enqueue's call: the ticket was settled on a quorum by EnqueuedAt.
	EnqueueAt, EnqueuedAt time.Duration
	// Wait's call: it began at WaitAt and returned at End, with the lock
	// (Granted), or without: the ticket was lost (Lost), or the lock call
	// timed out and the ticket was cancelled after End.
	WaitAt, End time.Duration
	Granted     bool
	// GrantFrom, for a granted waiter, is a time before which its grant's
	// round had not begun: it was surely queued until then, not after, as
	// the grant drops its entry before Wait returns.
	GrantFrom time.Duration
	// Lost: the ticket left the queue while it waited (mutex.ErrTicketLost).
	// Its place was not kept; the checker leaves it out of the order.
	Lost bool
}

// queuedOver reports whether w was surely queued, on a quorum, from a to
// b: it was settled before a, was not lost, and stopped waiting after b.
// Its own grant, if any, drops it before b only while no one else holds
// the lock: see queuedUntil for a time that no lock bounds.
func (w Waiter) queuedOver(a, b time.Duration) bool {
	return !w.Lost && w.EnqueuedAt < a && w.End > b
}

// queuedUntil is when w was last surely queued: the start of its grant's
// round, or the end of its Wait.
func (w Waiter) queuedUntil() time.Duration {
	if w.Granted {
		return w.GrantFrom
	}
	return w.End
}

// FairResult is the fair lock checker's findings.
type FairResult struct {
	Waiters, Granted, Lost int
	// EnqueueFails are Enqueue calls that got no ticket; the lock call
	// that made them tried again.
	EnqueueFails int
	// Passed are grants to a waiter while a waiter of the same key with a
	// smaller ticket was surely queued: an order violation.
	Passed []Pass
	// Arrivals are pairs where a waiter that queued after another had
	// finished queueing, while that one still waited, got a ticket that
	// is not larger.
	Arrivals []Pass
}

// Pass is a pair of waiters of one key out of order: Later got the lock,
// or a ticket, that Earlier was due first.
type Pass struct{ Earlier, Later Waiter }

func (p Pass) String() string {
	return fmt.Sprintf("key %d: ticket %d (client %d, queued %v-%v, waited until %v) before ticket %d (client %d, waited %v-%v)",
		p.Earlier.Key, p.Later.Ticket, p.Later.Client, p.Later.EnqueueAt, p.Later.EnqueuedAt, p.Later.End,
		p.Earlier.Ticket, p.Earlier.Client, p.Earlier.WaitAt, p.Earlier.End)
}

// Violations counts the order violations.
func (r *FairResult) Violations() int { return len(r.Passed) + len(r.Arrivals) }

func (r *FairResult) String() string {
	s := fmt.Sprintf("%d waiters, %d granted, %d tickets lost, %d enqueues failed, %d passed, %d arrivals out of order", r.Waiters, r.Granted, r.Lost, r.EnqueueFails, len(r.Passed), len(r.Arrivals))
	for _, p := range append(slices.Clone(r.Passed), r.Arrivals...) {
		s += "\n  " + p.String()
	}
	return s
}

// CheckFair checks the fair lock's order in a history of waiters:
//   - a waiter is granted the lock only when no waiter of its key with a
//     smaller ticket is surely queued throughout its Wait (a waiter with
//     an equal ticket is ordered by its id, which is not recorded);
//   - a waiter that queued after another finished queueing, while that
//     one was still queued (it stopped waiting later, and its grant, if
//     any, began later: see Waiter.GrantFrom), has a larger ticket.
//
// A lost ticket is left out: its place was not kept. Mutual exclusion is
// CheckKeys's, on the sections of the granted waiters.
func CheckFair(waiters []Waiter) *FairResult {
	r := &FairResult{Waiters: len(waiters)}
	for _, a := range waiters {
		if a.Granted {
			r.Granted++
		}
		if a.Lost {
			r.Lost++
		}
		for _, b := range waiters {
			if a.Key != b.Key || a.Client == b.Client && a.EnqueueAt == b.EnqueueAt {
				continue
			}
			if a.Granted && b.Ticket < a.Ticket && b.queuedOver(a.WaitAt, a.End) {
				r.Passed = append(r.Passed, Pass{Earlier: b, Later: a})
			}
			if !a.Lost && !b.Lost && b.EnqueuedAt < a.EnqueueAt && b.queuedUntil() > a.EnqueuedAt && a.Ticket <= b.Ticket {
				r.Arrivals = append(r.Arrivals, Pass{Earlier: b, Later: a})
			}
		}
	}
	return r
}

// fairLog collects the waiters of a run, and counts failed enqueues.
type fairLog struct {
	mu      sync.Mutex
	waiters []Waiter
	failed  int
}

func (f *fairLog) add(w Waiter) {
	f.mu.Lock()
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()
}

// refused counts an Enqueue that got no ticket.
func (f *fairLog) refused() {
	f.mu.Lock()
	f.failed++
	f.mu.Unlock()
}

// check is CheckFair's result on the run's waiters, with its failed
// enqueues.
func (f *fairLog) check() *FairResult {
	r := CheckFair(f.all())
	f.mu.Lock()
	r.EnqueueFails = f.failed
	f.mu.Unlock()
	return r
}

func (f *fairLog) all() []Waiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.waiters)
}

// fairLocker makes each lock call as mutex.Fair.Lock does, ticket by
// ticket, and records each ticket. Its waiter TTL is the run's TTL.
type fairLocker struct {
	f      *mutex.Fair
	client int
	key    int
	ttl    time.Duration // the lock's and the waiters'
	env    *Env
	held   *redlock.Lock
}

func newFairLocker(c *redlock.Client, id int, cfg Config, key int, env *Env) (locker, error) {
	f, err := mutex.NewFair(c, cfg.KeyName(key), &mutex.FairOptions{TTL: cfg.TTL, WaiterTTL: cfg.TTL, AutoRenew: cfg.AutoRenew})
	return &fairLocker{f: f, client: id, key: key, ttl: cfg.TTL, env: env}, err
}

// lock is one lock call, as a user's Fair.Lock: until ctx ends, a failed
// Enqueue is retried after a growing delay, and a lost ticket is replaced
// by a new one at the back. So "Lock calls" mean what they mean for the
// other lockers, not Enqueue calls. It takes the tickets one by one,
// rather than calling Fair.Lock, to record each.
func (x *fairLocker) lock(ctx context.Context) (*redlock.Lock, bool, error) {
	delay := mutex.DefaultMinRetryDelay // Fair.Lock's schedule
	for {
		l, err := x.ticket(ctx)
		switch {
		case err == nil:
			x.held = l
			return l, false, nil
		case ctx.Err() != nil:
			return nil, false, err
		case errors.Is(err, mutex.ErrTicketLost):
			continue // queue again, at the back
		case !errors.Is(err, errEnqueue) || !errors.Is(err, redlock.ErrNotObtained):
			return nil, false, err
		}
		x.env.fairs.refused()
		if !Sleep(ctx, delay/2+mrand.N(delay/2+1)) {
			return nil, false, fmt.Errorf("%w; gave up waiting: %w", err, ctx.Err())
		}
		delay = min(2*delay, mutex.DefaultMaxRetryDelay)
	}
}

// errEnqueue marks a failed Enqueue: no ticket was taken.
var errEnqueue = errors.New("enqueue failed")

// ticket takes one ticket and waits for its turn, and records it. A
// failed Enqueue's error wraps errEnqueue. A ticket that did not get the
// lock is cancelled.
func (x *fairLocker) ticket(ctx context.Context) (*redlock.Lock, error) {
	rec := x.env.Rec
	w := Waiter{Client: x.client, Key: x.key, EnqueueAt: rec.Now()}
	t, err := x.f.Enqueue(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errEnqueue, err)
	}
	w.Ticket, w.EnqueuedAt = t.Number(), rec.Now()
	w.WaitAt = rec.Now()
	l, err := t.Wait(ctx)
	w.End = rec.Now()
	w.Granted, w.Lost = err == nil, errors.Is(err, mutex.ErrTicketLost)
	if w.Granted {
		// Until is the grant's round's start plus the TTL, less the
		// drift: the round began after Until less the TTL.
		w.GrantFrom = min(rec.At(l.Until())-x.ttl, w.End)
	}
	x.env.fairs.add(w)
	if err != nil {
		t.Cancel()
		return nil, err
	}
	return l, nil
}

func (x *fairLocker) unlock(ctx context.Context) error {
	l := x.held
	x.held = nil
	if l == nil {
		return fmt.Errorf("%w: no fair lock held", redlock.ErrNotHeld)
	}
	return l.Release(ctx)
}

// fairScenarios are the fair lock's runs (Kind Fair): each section is
// one Enqueue and Wait, on one key, so that every client queues behind
// the others. base is Scenarios' load.
func fairScenarios(s Scale, base Config) []Scenario {
	fair := base
	fair.Kind, fair.Keys = Fair, 1
	if s == Full {
		fair.Sections, fair.Completed, fair.Duration = 5000, 10000, 5*time.Minute
	}
	const as = " Each client queues for one lock (mutex.Fair, waiter TTL 1s): the checker requires grants in ticket order, leaving out tickets that were lost, and tickets that follow arrival."
	all := []Scenario{
		{
			Name: "fair: none", Safe: true, Config: fair,
			Nemesis:     None{},
			Description: "No fault." + as,
		},
	}
	return append(all, minorityScenarios("fair", ", with a fair lock", fair, as)...)
}
