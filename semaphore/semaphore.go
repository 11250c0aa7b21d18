// Package semaphore provides leased counting semaphores on a
// redlock.Client: at most N holders of a name at once, over a quorum of
// independent masters.
//
// Each permit is a *redlock.Lock of its own. It has its own TTL,
// fencing token, Extend, AutoRenew, Done, Err and Release. A permit is
// counted only where a quorum of masters admitted it. A crashed holder's
// permit expires with its TTL.
//
// The capacity N is given to each acquire, as Curator's
// InterProcessSemaphoreV2 takes it. A permit also takes a slot below N.
// A master admits it only where no live permit holds that slot there,
// and fewer than N live permits are there. When holders disagree, the
// live permits number at most the largest capacity any of them was
// given. Lowering the capacity never evicts a holder: new permits wait
// until fewer than it are held. docs/semaphore.md tells why no N+1
// permits are ever held.
package semaphore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

// What package redlock lends this package.
var permits = link.GetSemaphores[*redlock.Client, *redlock.Lock]()

// Options configure a Semaphore. The zero value of each field selects
// its default. New names the first invalid one.
type Options struct {
	// TTL is how long a permit lives on the masters without renewal, in
	// whole milliseconds. It must be longer than the client's
	// MasterTimeout and its own drift allowance. Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timer between two
	// attempts of Acquire. It serves releases Acquire did not hear of, and
	// permits that expire. The delay doubles from MinRetryDelay up to
	// MaxRetryDelay, each drawn at random from its upper half. Both must
	// be at least 1ms. Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration

	// AutoRenew renews each permit until it is released (see
	// redlock.Lock.AutoRenew). Default: off.
	AutoRenew bool
}

// Defaults of Options.
const (
	DefaultTTL           = retry.DefaultTTL
	DefaultMinRetryDelay = retry.DefaultMinRetryDelay
	DefaultMaxRetryDelay = retry.DefaultMaxRetryDelay
)

// Semaphore hands out permits of one name. It holds no state of its
// own: every permit is a *redlock.Lock, released with its Release. It is
// safe for concurrent use; make one with New.
type Semaphore struct {
	client *redlock.Client
	name   string
	opts   retry.Options
}

// New returns a Semaphore for name. It does no I/O. It returns an error
// wrapping redlock.ErrInvalidArgument for a nil client, an empty name,
// or an option that cannot work with the client's (a TTL not above its
// MasterTimeout, say). opts may be nil for the defaults.
func New(client *redlock.Client, name string, opts *Options) (*Semaphore, error) {
	if opts == nil {
		opts = &Options{}
	}
	o, err := retry.Options(*opts).Check(client, name, "semaphore.Options")
	if err != nil {
		return nil, err
	}
	return &Semaphore{client: client, name: name, opts: o}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// check refuses a Semaphore not made by New, a nil or ended context and
// a capacity below 1, before any I/O. op names the call.
func (s *Semaphore) check(ctx context.Context, op string, capacity int) error {
	switch {
	case s == nil || s.client == nil:
		return fmt.Errorf("%w: zero Semaphore: use semaphore.New", redlock.ErrInvalidArgument)
	case ctx == nil:
		return retry.NilContext("Semaphore."+op, s.name)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: Semaphore.%s %s: context ended before the call: %w", redlock.ErrInvalidArgument, op, clip.Quote(s.name), ctx.Err())
	case capacity < 1:
		return fmt.Errorf("%w: Semaphore.%s %s: capacity %d: must be at least 1", redlock.ErrInvalidArgument, op, clip.Quote(s.name), capacity)
	}
	return nil
}

// TryAcquire makes one attempt at a permit, where fewer than capacity
// permits are held. It returns the permit, or an error wrapping
// redlock.ErrNotObtained if too few masters admitted it (a failed
// attempt is undone on every master). It blocks for one quorum round.
// With Options.AutoRenew the permit is renewed until released.
func (s *Semaphore) TryAcquire(ctx context.Context, capacity int) (*redlock.Lock, error) {
	if err := s.check(ctx, "TryAcquire", capacity); err != nil {
		return nil, err
	}
	l, err := s.attempt(ctx, capacity, -1)
	if err != nil {
		return nil, err
	}
	if s.opts.AutoRenew {
		l.AutoRenew()
	}
	return l, nil
}

// Acquire blocks until it holds a permit, where fewer than capacity
// permits are held, or ctx ends. Between attempts it waits for releases
// published by the masters, with a jittered fallback timer. Each release
// wakes one of the client's waiters. If ctx ends first, the error matches
// ctx.Err() and tells the last attempt's outcome. Invalid input fails at
// once with an error wrapping redlock.ErrInvalidArgument.
func (s *Semaphore) Acquire(ctx context.Context, capacity int) (*redlock.Lock, error) {
	if err := s.check(ctx, "Acquire", capacity); err != nil {
		return nil, err
	}
	// The waker is made after the first attempt, and read by later ones,
	// on this goroutine. A release that woke it freed a slot: the next
	// attempt tries that one first.
	var k link.SlotWaker
	waker := func(since time.Time) link.Waker {
		k = permits.NewWaker(s.client, s.name, since)
		return k
	}
	return retry.Acquire(ctx, s.client, s.name, s.opts, waker, func(ctx context.Context) (*redlock.Lock, error) {
		slot := -1
		if k != nil {
			slot = k.Freed()
		}
		return s.attempt(ctx, capacity, slot)
	})
}

// attempt tries to take a permit of slot, where a release freed it, or
// of one at random (slot -1). After a refusal it tries the slot the
// masters name free, until a quorum admits a permit. Each slot is one
// round; a failed one is undone. A freed slot that another permit took
// first ends no attempt: the slot named may be one no release announces
// (its permit expired), or one whose release woke this waiter too. It
// stops at an error that is not a refusal, once ctx ends, once the
// refusals name no slot a quorum may admit (the semaphore is full, or
// too few masters answered), or after capacity rounds. It returns the
// last error.
func (s *Semaphore) attempt(ctx context.Context, capacity, slot int) (*redlock.Lock, error) {
	if slot < 0 || slot >= capacity {
		slot = rand.N(capacity)
	}
	var err error
	for range capacity {
		var l *redlock.Lock
		l, slot, err = permits.AcquirePermit(ctx, s.client, s.name, capacity, slot, s.opts.TTL)
		if !retry.Retryable(ctx, err) || slot < 0 {
			return l, err
		}
	}
	return nil, err
}
