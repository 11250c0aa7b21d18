package mutex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

// What package redlock lends the fair lock.
var (
	hooks  = link.Get[*redlock.Client, *redlock.Lock]()
	queues = link.GetQueues[*redlock.Client, *redlock.Lock]()
)

// FairOptions configure a Fair lock. The zero value of each field selects
// its default. NewFair names the first invalid one.
type FairOptions struct {
	// TTL is how long the lock lives on the masters without renewal, as
	// Options.TTL. Default: 10s.
	TTL time.Duration

	// WaiterTTL is how long a waiter stays queued without renewal. A
	// waiter renews every third of it while it waits. One that dies leaves
	// the queue within it. It must be longer than the client's
	// MasterTimeout and its drift allowance, and with fencing at least
	// 4*MasterTimeout. Default: 2s.
	WaiterTTL time.Duration

	// AutoRenew renews each lock until it is released (see
	// redlock.Lock.AutoRenew). Default: off.
	AutoRenew bool
}

// DefaultWaiterTTL is the default of FairOptions.WaiterTTL.
const DefaultWaiterTTL = 2 * time.Second

// ErrTicketLost means a waiter's ticket left the queue while it waited:
// no quorum renewed it within its WaiterTTL. It wraps
// redlock.ErrNotObtained too.
var ErrTicketLost = errors.New("mutex: ticket lost: no quorum renewed it within its waiter TTL")

// Fair is a lock granted in the order its waiters queued, over the quorum.
// Each waiter takes a ticket; the lock goes to the live ticket that is
// first, and its release wakes the next one alone. It is the exclusive
// lock of its name: it excludes a Mutex of the same name and shares its
// fencing tokens, but a Mutex does not queue. docs/fair.md tells why the
// order holds while a minority of masters fails. Fair holds no state of
// its own and is safe for concurrent use; make one with NewFair.
type Fair struct {
	client *redlock.Client
	name   string
	opts   FairOptions
}

// NewFair returns a Fair lock for name. It does no I/O. It returns an
// error wrapping redlock.ErrInvalidArgument for a nil client, an empty
// name, or an option that cannot work with the client's. opts may be nil
// for the defaults.
func NewFair(client *redlock.Client, name string, opts *FairOptions) (*Fair, error) {
	var o FairOptions
	if opts != nil {
		o = *opts
	}
	r, err := retry.Options{TTL: o.TTL}.Check(client, name, "mutex.FairOptions")
	if err != nil {
		return nil, err
	}
	o.TTL = r.TTL
	if o.WaiterTTL == 0 {
		o.WaiterTTL = DefaultWaiterTTL
	}
	if o.WaiterTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: mutex.FairOptions.WaiterTTL %v: must be at least 1ms", redlock.ErrInvalidArgument, o.WaiterTTL)
	}
	if err := hooks.CheckTTL(client, "mutex.FairOptions.WaiterTTL", o.WaiterTTL); err != nil {
		return nil, err
	}
	return &Fair{client: client, name: name, opts: o}, nil
}

// Name returns the lock's name.
func (f *Fair) Name() string { return f.name }

// check refuses a Fair not made by NewFair, and a nil or ended context,
// before any I/O. op names the call.
func (f *Fair) check(ctx context.Context, op string) error {
	switch {
	case f == nil || f.client == nil:
		return fmt.Errorf("%w: zero Fair: use mutex.NewFair", redlock.ErrInvalidArgument)
	case ctx == nil:
		return retry.NilContext("Fair."+op, f.name)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: Fair.%s %s: context ended before the call: %w", redlock.ErrInvalidArgument, op, clip.Quote(f.name), ctx.Err())
	}
	return nil
}

// Lock queues, then blocks until it holds the lock or ctx ends: Enqueue
// then Wait. A ticket lost while waiting is replaced by a new one, at the
// back of the queue. If ctx ends first, the ticket leaves the queue and
// the error matches ctx.Err(). With FairOptions.AutoRenew the lock is
// renewed until released.
func (f *Fair) Lock(ctx context.Context) (*redlock.Lock, error) {
	if err := f.check(ctx, "Lock"); err != nil {
		return nil, err
	}
	// No quorum took the ticket: retry as a Mutex does by default.
	delay := retry.Options{MinRetryDelay: DefaultMinRetryDelay, MaxRetryDelay: DefaultMaxRetryDelay}.Backoff()
	for {
		t, err := f.enqueue(ctx)
		if err != nil {
			if !errors.Is(err, redlock.ErrNotObtained) || ctx.Err() != nil {
				return nil, fairCtxErr(ctx, err)
			}
			timer := time.NewTimer(delay.Draw())
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return nil, fairCtxErr(ctx, err)
			}
			delay.Double()
			continue
		}
		l, err := t.Wait(ctx)
		if err == nil {
			return l, nil
		}
		t.Cancel()
		if !errors.Is(err, ErrTicketLost) || ctx.Err() != nil {
			return nil, fairCtxErr(ctx, err)
		}
	}
}

// Enqueue takes a ticket: the waiter's place at the back of the queue,
// which a quorum of masters keeps. The ticket is renewed in the
// background until Wait gets the lock, Cancel, or it is lost. Cancel a
// ticket that is not waited for. It blocks for one or two quorum rounds;
// ctx bounds them, not the ticket. A failed Enqueue leaves nothing queued
// and wraps redlock.ErrNotObtained.
func (f *Fair) Enqueue(ctx context.Context) (*Ticket, error) {
	if err := f.check(ctx, "Enqueue"); err != nil {
		return nil, err
	}
	return f.enqueue(ctx)
}

func (f *Fair) enqueue(ctx context.Context) (*Ticket, error) {
	id := redlock.NewOwner()
	start := time.Now() // the entries live at least WaiterTTL from here
	n, err := queues.Enqueue(ctx, f.client, f.name, id, f.opts.WaiterTTL)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	t := &Ticket{f: f, id: id, number: n, ahead: -1, until: queues.Deadline(f.client, start, f.opts.WaiterTTL),
		tick: make(chan struct{}, 1), lost: make(chan struct{}), stop: stop, done: make(chan struct{})}
	go t.renewing(rctx)
	return t, nil
}

// Ticket is a waiter's place in a Fair lock's queue. It is safe for
// concurrent use; one Wait runs at a time. Its order is its Number, then
// a random id for tickets of equal numbers.
type Ticket struct {
	f      *Fair
	id     string // the waiter's id: the owner of the Lock it takes
	number uint64

	// round lets one round of this ticket run at a time: a renewal never
	// lands after the grant that dropped the entry.
	round sync.Mutex

	mu    sync.Mutex // guards the fields below
	ahead int        // live tickets ahead, as the last round saw (a try: 1 for some); -1: unknown
	until time.Time  // the entries live at least until then on a quorum
	ended error      // why the ticket left the queue; nil while queued

	tick    chan struct{} // after each renewal
	lost    chan struct{} // closed when the ticket is lost
	stop    context.CancelFunc
	done    chan struct{} // closed when renewal stopped
	waiting atomic.Bool
	left    sync.Once // the leave round, once
}

// Number returns the ticket's number: the order it queued in. Tickets of
// waiters that queued concurrently may share one.
func (t *Ticket) Number() uint64 { return t.number }

// check refuses a nil or zero Ticket and a nil or ended context.
func (t *Ticket) check(ctx context.Context, op string) error {
	switch {
	case t == nil || t.f == nil:
		return fmt.Errorf("%w: zero Ticket: use Fair.Enqueue", redlock.ErrInvalidArgument)
	case ctx == nil:
		return retry.NilContext("Ticket."+op, t.f.name)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: Ticket.%s %s: context ended before the call: %w", redlock.ErrInvalidArgument, op, clip.Quote(t.f.name), ctx.Err())
	}
	return t.endedErr()
}

func (t *Ticket) endedErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended
}

// Position returns how many live tickets are ahead of this one, at most,
// on each master of a quorum: 0 when it is next. The holder of the lock is
// not counted, unless a master that refused its grant is in the quorum
// (see docs/fair.md). It renews the ticket, in one quorum round.
func (t *Ticket) Position(ctx context.Context) (int, error) {
	if err := t.check(ctx, "Position"); err != nil {
		return 0, err
	}
	t.round.Lock()
	defer t.round.Unlock()
	if err := t.endedErr(); err != nil {
		return 0, err
	}
	ahead, err := t.renewLocked(ctx)
	if !errors.Is(err, ErrTicketLost) {
		t.told()
	}
	return ahead, err
}

// renewLocked renews the ticket; t.round must be held.
func (t *Ticket) renewLocked(ctx context.Context) (int, error) {
	f := t.f
	ahead, start, err := queues.Renew(ctx, f.client, f.name, t.id, t.number, f.opts.WaiterTTL)
	t.mu.Lock()
	// Decided after the lease ran out, even a renewal comes too late: the
	// entries may have lapsed meanwhile, and a later ticket passed.
	gone := !time.Now().Before(t.until)
	if err == nil && !gone {
		t.ahead = ahead
		if u := queues.Deadline(f.client, start, f.opts.WaiterTTL); u.After(t.until) {
			t.until = u
		}
	}
	t.mu.Unlock()
	if gone {
		if err == nil {
			err = errors.New("renewed after its waiter TTL ran out")
		}
		return 0, t.lose(err)
	}
	return ahead, err
}

// told tells a Wait under way that a renewal other than its own try's
// ran: t.ahead may say that no ticket is ahead now.
func (t *Ticket) told() {
	select {
	case t.tick <- struct{}{}:
	default:
	}
}

// lose ends the ticket as lost, for cause, and returns its error.
func (t *Ticket) lose(cause error) error {
	if t.end(fmt.Errorf("%w: %w: %s ticket %d: %w", redlock.ErrNotObtained, ErrTicketLost, clip.Quote(t.f.name), t.number, cause)) {
		close(t.lost)
	}
	return t.endedErr()
}

// lapsed reports whether the ticket's lease ran out: its entries may be
// gone from a quorum, and a later ticket may have passed it.
func (t *Ticket) lapsed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !time.Now().Before(t.until)
}

// end records why the ticket left the queue, once; it reports whether
// this call did.
func (t *Ticket) end(why error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended != nil {
		return false
	}
	t.ended = why
	return true
}

// renewing renews the ticket every third of its TTL, sooner after a
// failure, until it ends. On a loss it leaves the queue where it can.
func (t *Ticket) renewing(ctx context.Context) {
	defer close(t.done)
	period := t.f.opts.WaiterTTL / 3
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		t.round.Lock()
		if err := t.endedErr(); err != nil {
			t.round.Unlock()
			if errors.Is(err, ErrTicketLost) { // lost by Wait or Position
				t.leave()
			}
			return
		}
		_, err := t.renewLocked(ctx)
		t.round.Unlock()
		if errors.Is(err, ErrTicketLost) {
			t.leave()
			return
		}
		t.told()
		next := period
		if err != nil {
			next = period / 3
		}
		timer.Reset(next)
	}
}

// leave drops the ticket from the queue, once, with a fresh bounded
// context. A lost ticket leaves too: a renewal decided too late, or an
// undo, may have queued it anew, ahead of the tickets behind it.
func (t *Ticket) leave() {
	t.left.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.f.opts.WaiterTTL)
		defer cancel()
		_ = queues.Leave(ctx, t.f.client, t.f.name, t.id, t.f.opts.WaiterTTL)
	})
}

// Cancel leaves the queue at once: it stops renewal and drops the ticket
// on every master it reaches, in one round bounded by the client's
// MasterTimeout, whatever context the waiter had. A master it misses
// drops it within WaiterTTL. A Wait under way returns. A lost ticket
// leaves too. Cancel after the lock was granted, or again, does nothing.
func (t *Ticket) Cancel() {
	if t == nil || t.f == nil {
		return
	}
	t.round.Lock()
	ended := t.end(fmt.Errorf("%w: Fair %s: ticket %d was cancelled", redlock.ErrNotObtained, clip.Quote(t.f.name), t.number))
	lost := !ended && errors.Is(t.endedErr(), ErrTicketLost)
	t.round.Unlock()
	t.stop()
	<-t.done
	if ended {
		close(t.lost) // wakes a Wait
	}
	if ended || lost {
		t.leave()
	}
}

// abandon stops renewal without leaving: a waiter that died, for tests.
func (t *Ticket) abandon() {
	t.end(errors.New("abandoned"))
	t.stop()
	<-t.done
}

// Wait blocks until the ticket's turn comes and it holds the lock, or ctx
// ends, or the ticket is lost or cancelled. It tries when no live ticket
// was ahead at the last renewal, when a master publishes that this ticket
// is next, and at a release of the name (a Mutex's too) unless its last
// renewal or try found a ticket ahead. On success the ticket leaves the
// queue. If ctx ends first, the ticket stays queued: Wait again or
// Cancel; the error matches ctx.Err(). A lost ticket's error wraps
// ErrTicketLost.
func (t *Ticket) Wait(ctx context.Context) (*redlock.Lock, error) {
	if err := t.check(ctx, "Wait"); err != nil {
		return nil, err
	}
	if !t.waiting.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: Ticket.Wait %s: another Wait of ticket %d is under way", redlock.ErrInvalidArgument, clip.Quote(t.f.name), t.number)
	}
	defer t.waiting.Store(false)
	f := t.f
	waker := queues.NewWaker(f.client, f.name, t.id)
	defer waker.Close()
	// A publication is missed until every master confirmed the
	// subscriptions. Where they were not live before the first try, the
	// waiter tries once more when they are.
	live := waker.Live()
	select {
	case <-live:
		live = nil
	default:
	}
	var last error
	for try := true; ; {
		if try {
			l, err := t.attempt(ctx)
			if err == nil {
				if f.opts.AutoRenew {
					l.AutoRenew()
				}
				return l, nil
			}
			if !errors.Is(err, redlock.ErrNotObtained) || ctx.Err() != nil {
				return nil, fairCtxErr(ctx, err)
			}
			last = err
		}
		select {
		case <-waker.Next():
			try = true
		case <-waker.Freed():
			// A release of any hold of the name: only a waiter that may
			// be first tries, not the whole queue. One that a master
			// published as next since tried then, and learned whether a
			// Mutex kept it out or a ticket ahead did.
			t.mu.Lock()
			try = t.ahead <= 0
			t.mu.Unlock()
		case <-live:
			live, try = nil, true
		case <-t.tick:
			t.mu.Lock()
			try = t.ahead == 0
			t.mu.Unlock()
		case <-t.lost:
			return nil, t.endedErr()
		case <-ctx.Done():
			if t.lapsed() { // so that a ticket Wait left queued was kept throughout
				return nil, fairCtxErr(ctx, t.lose(errors.New("its waiter TTL ran out while it waited")))
			}
			return nil, fairCtxErr(ctx, last)
		}
	}
}

// attempt makes one acquire for the ticket. A grant ends the ticket; a
// failed round that some masters agreed to renews it at once, as a
// failed fence round's release dropped it there. A refusal tells whether
// a ticket is ahead: before its first renewal a waiter knows no more.
func (t *Ticket) attempt(ctx context.Context) (*redlock.Lock, error) {
	f := t.f
	t.round.Lock()
	if err := t.endedErr(); err != nil {
		t.round.Unlock()
		return nil, err
	}
	if t.lapsed() { // its place is not kept: it must not take the lock as if it were
		err := t.lose(errors.New("its waiter TTL ran out before the attempt"))
		t.round.Unlock()
		return nil, err
	}
	l, ahead, err := queues.Acquire(ctx, f.client, f.name, t.id, t.number, f.opts.WaiterTTL, f.opts.TTL)
	if err == nil {
		t.end(fmt.Errorf("%w: Fair %s: ticket %d got the lock", redlock.ErrInvalidArgument, clip.Quote(f.name), t.number))
		t.round.Unlock()
		t.stop()
		<-t.done
		return l, nil
	}
	if ahead >= 0 {
		t.mu.Lock()
		t.ahead = ahead
		t.mu.Unlock()
	}
	// Its renewal is no news to the Wait that made the try: a master
	// that refused it as the lock was held publishes at the release, and
	// one that did not answer is tried at the next renewal. Were it news,
	// the Wait would try again at once, as long as the lock is held.
	var q *redlock.QuorumError
	if errors.As(err, &q) && q.Agreed > 0 {
		if _, rerr := t.renewLocked(context.WithoutCancel(ctx)); errors.Is(rerr, ErrTicketLost) {
			err = rerr
		}
	}
	t.round.Unlock()
	return nil, err
}

// fairCtxErr makes err match ctx.Err() if ctx has ended.
func fairCtxErr(ctx context.Context, err error) error {
	end := ctx.Err()
	switch {
	case end == nil:
		return err
	case err == nil:
		return fmt.Errorf("%w: gave up waiting: %w", redlock.ErrNotObtained, end)
	case !errors.Is(err, end):
		return fmt.Errorf("%w; gave up waiting: %w", err, end)
	}
	return err
}
