// Package multi provides multi-resource locks on a redlock.Client: several
// names taken all at once or not at all, as one *redlock.Lock, over a
// quorum of independent masters.
//
// Each name is the same lock as the exclusive lock of that name (package
// mutex, Client.Acquire): a multi-resource lock on {a, b} excludes a
// Mutex on a, and shares its fencing counter. The Lock has one validity,
// one Token (the token of every name: larger than any earlier token of
// each), and one Release, Extend, AutoRenew, Done and Err for all names.
//
// A master sets every name or none, in one script; an attempt that no
// quorum granted is undone on every master. So a waiter holds nothing
// while it waits: callers that list the same names in any order never
// deadlock. docs/multi.md tells why no name is ever held twice.
package multi

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

// What package redlock lends this package.
var locks = link.GetMulti[*redlock.Client, *redlock.Lock]()

// Options configure a Mutex. The zero value of each field selects its
// default. New names the first invalid one.
type Options struct {
	// TTL is how long the lock lives on the masters without renewal, in
	// whole milliseconds. It must be longer than the client's
	// MasterTimeout and its own drift allowance (with fencing, at least
	// 4*MasterTimeout). Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timer between two
	// attempts of Acquire, for releases it did not hear of and locks that
	// expire. The delay doubles from MinRetryDelay up to MaxRetryDelay,
	// each drawn at random from its upper half. Both must be at least
	// 1ms. Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration

	// AutoRenew renews the lock until it is released (see
	// redlock.Lock.AutoRenew). Default: off.
	AutoRenew bool
}

// Defaults of Options.
const (
	DefaultTTL           = retry.DefaultTTL
	DefaultMinRetryDelay = retry.DefaultMinRetryDelay
	DefaultMaxRetryDelay = retry.DefaultMaxRetryDelay
)

// Mutex takes a set of names together. It holds no state of its own:
// each acquisition is a *redlock.Lock, released with its Release. It is
// safe for concurrent use; make one with New.
type Mutex struct {
	client *redlock.Client
	names  []string // sorted
	label  string   // the names, for errors
	opts   retry.Options
}

// New returns a Mutex for names, in any order. It does no I/O. It
// returns an error wrapping redlock.ErrInvalidArgument for a nil client,
// no name, an empty name, a name given twice, names that a Redis Cluster
// master holds in different slots (or a master that shards keys, under
// different hash tags), or an option that cannot work with the client's
// (a TTL not above its MasterTimeout, say). opts may be nil for the
// defaults.
func New(client *redlock.Client, names []string, opts *Options) (*Mutex, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil *redlock.Client", redlock.ErrInvalidArgument)
	}
	sorted, err := locks.CheckNames(client, names)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &Options{}
	}
	label := link.MultiKey(sorted)
	o, err := retry.Options(*opts).Check(client, label, "multi.Options")
	if err != nil {
		return nil, err
	}
	return &Mutex{client: client, names: sorted, label: label, opts: o}, nil
}

// Names returns the Mutex's names, sorted.
func (m *Mutex) Names() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.names...)
}

// Names returns the names of l, a multi-resource lock, sorted; nil for
// any other Lock. l.Token() is the fencing token of each of them. l.Key()
// joins them with commas for errors and events, quoting a name that holds
// a comma or starts with a double quote: Names tells them as they are.
func Names(l *redlock.Lock) []string { return locks.Names(l) }

// Held returns the names that masters found held by another Lock or by
// readers, as reported in err, an error of TryAcquire, Acquire or Do: sorted, each
// once; nil if none was. A master names the first of its names it finds
// held, so a name held after it there goes unreported.
func Held(err error) []string { return locks.Held(err) }

// check refuses a Mutex not made by New and a nil or ended context,
// before any I/O. op names the call.
func (m *Mutex) check(ctx context.Context, op string) error {
	switch {
	case m == nil || m.client == nil:
		return fmt.Errorf("%w: zero Mutex: use multi.New", redlock.ErrInvalidArgument)
	case ctx == nil:
		return retry.NilContext("Mutex."+op, m.label)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: Mutex.%s %s: context ended before the call: %w", redlock.ErrInvalidArgument, op, clip.Quote(m.label), ctx.Err())
	}
	return nil
}

// TryAcquire makes one attempt at every name. It returns the Lock, or an
// error wrapping redlock.ErrNotObtained if too few masters found every
// name free (the attempt is undone on every master); Held tells which
// names they found held. It blocks for one quorum round. With
// Options.AutoRenew the Lock is renewed until released.
func (m *Mutex) TryAcquire(ctx context.Context) (*redlock.Lock, error) {
	if err := m.check(ctx, "TryAcquire"); err != nil {
		return nil, err
	}
	l, err := locks.AcquireMulti(ctx, m.client, m.names, m.opts.TTL)
	if err != nil {
		return nil, err
	}
	if m.opts.AutoRenew {
		l.AutoRenew()
	}
	return l, nil
}

// Acquire blocks until it holds every name, or ctx ends. Between
// attempts it holds nothing. It waits for releases of any of the names,
// published by the masters, with a jittered fallback timer. If ctx ends
// first, the error matches ctx.Err() and tells the last attempt's
// outcome. Invalid input fails at once with an error wrapping
// redlock.ErrInvalidArgument.
func (m *Mutex) Acquire(ctx context.Context) (*redlock.Lock, error) {
	if err := m.check(ctx, "Acquire"); err != nil {
		return nil, err
	}
	return m.acquire(ctx)
}

// acquire is Acquire once its input is checked.
func (m *Mutex) acquire(ctx context.Context) (*redlock.Lock, error) {
	waker := func(since time.Time) link.Waker { return locks.NewWaker(m.client, m.names, since) }
	return retry.Acquire(ctx, m.client, m.label, m.opts, waker, func(ctx context.Context) (*redlock.Lock, error) {
		return locks.AcquireMulti(ctx, m.client, m.names, m.opts.TTL)
	})
}

// Do runs fn while every name is held, renewed automatically. It blocks
// like Acquire; fn is not called if that fails. fn's context ends with
// ctx, as soon as the lock is lost (its cause is the Lock's Err), or a
// tenth of the TTL before the validity runs out (its cause wraps
// redlock.ErrNotHeld). Once fn returns, or panics, Do releases the lock
// with a fresh context bounded by the TTL, not ctx. It returns fn's error
// joined with the release's. A nil fn or ctx is refused with an error
// wrapping redlock.ErrInvalidArgument, before anything is taken. No
// goroutine of Do's runs after it returns.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context, l *redlock.Lock) error) error {
	if err := m.check(ctx, "Do"); err != nil {
		return err
	}
	if fn == nil {
		return retry.NilFunc("Mutex.Do", m.label)
	}
	l, err := m.acquire(ctx)
	if err != nil {
		return err
	}
	l.AutoRenew()
	return retry.Run(ctx, l, m.opts.TTL/retry.MarginDivisor, m.opts.TTL, fn, l.Release)
}
