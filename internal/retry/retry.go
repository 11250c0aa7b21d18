// Package retry holds what the blocking locks and the semaphore share:
// their options and the loop that waits for a lock or a permit.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
)

// Options configure a blocking lock. Packages mutex and rwmutex document
// them for their users, with their defaults.
type Options struct {
	TTL           time.Duration
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration
	AutoRenew     bool
}

// hooks is what package redlock lends this package.
var hooks = link.Get[*redlock.Client, *redlock.Lock]()

// Defaults of Options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
)

// Check fills in the defaults and names the first invalid value. what is
// the options' type, such as "mutex.Options". The TTL must also suit the
// client's options.
func (o Options) Check(client *redlock.Client, key, what string) (Options, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s."+format, append([]any{redlock.ErrInvalidArgument, what}, args...)...)
	}
	if client == nil {
		return o, fmt.Errorf("%w: nil *redlock.Client", redlock.ErrInvalidArgument)
	}
	if key == "" {
		return o, fmt.Errorf("%w: empty key", redlock.ErrInvalidArgument)
	}
	o.TTL = orDefault(o.TTL, DefaultTTL)
	o.MinRetryDelay = orDefault(o.MinRetryDelay, DefaultMinRetryDelay)
	o.MaxRetryDelay = orDefault(o.MaxRetryDelay, DefaultMaxRetryDelay)
	switch {
	case o.TTL < time.Millisecond:
		return o, bad("TTL %v: must be at least 1ms (Redis keeps whole milliseconds; is a unit missing?)", o.TTL)
	case o.MinRetryDelay < time.Millisecond:
		return o, bad("MinRetryDelay %v: must be at least 1ms (shorter retries spin without jitter)", o.MinRetryDelay)
	case o.MaxRetryDelay < time.Millisecond:
		return o, bad("MaxRetryDelay %v: must be at least 1ms (shorter retries spin without jitter)", o.MaxRetryDelay)
	case o.MaxRetryDelay < o.MinRetryDelay:
		return o, bad("MaxRetryDelay %v: must not be less than MinRetryDelay (%v)", o.MaxRetryDelay, o.MinRetryDelay)
	}
	if err := hooks.CheckTTL(client, what+".TTL", o.TTL); err != nil {
		return o, err
	}
	return o, nil
}

// Backoff is a retry delay that doubles from MinRetryDelay up to
// MaxRetryDelay. It is not safe for concurrent use.
type Backoff struct{ delay, most time.Duration }

// Backoff returns the delay of a first retry.
func (o Options) Backoff() *Backoff {
	return &Backoff{o.MinRetryDelay, o.MaxRetryDelay}
}

// Draw returns a delay drawn at random from the upper half of the current
// one, so that competing clients fall out of step.
func (b *Backoff) Draw() time.Duration { return b.delay/2 + rand.N(b.delay/2+1) }

// Double doubles the delay, up to MaxRetryDelay.
func (b *Backoff) Double() { b.delay = min(2*b.delay, b.most) }

// NilContext is the error of call op (such as "Mutex.Lock") on key when
// its context is nil. The call is refused before anything is done.
func NilContext(op, key string) error {
	return fmt.Errorf("%w: %s %s: nil context", redlock.ErrInvalidArgument, op, clip.Quote(key))
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Wait calls try until it gets the lock, fails for a reason waiting
// cannot mend, or ctx ends. After a first failed attempt it subscribes to
// the lock's releases. With wakeAll every release wakes it; else one
// waiter per release. It tries again at once, unless the client already
// watched the releases: one may have come in between. It then retries on
// each wake-up, or when the fallback timer fires. Waiters for an
// exclusive lock (not wakeAll) in one process take turns. Wait first adds
// the process's place to t, and keeps it there once it gets the lock. If
// ctx ends first, the error matches ctx.Err() and tells the last
// attempt's outcome. With opts.AutoRenew the lock is renewed from then
// on. The wait is reported to the client's Observer if Wait waited for
// its turn, or its first attempt found the lock held. So is each episode
// of attempts that reached no quorum, once.
func Wait(ctx context.Context, c *redlock.Client, key string, wakeAll bool, opts Options, t *Turn,
	try func(context.Context) (*redlock.Lock, error)) (*redlock.Lock, error) {
	start := time.Now() // a wait for a turn counts as waiting
	var waited bool
	if !wakeAll {
		var err error
		if waited, err = t.line(ctx, c, key); err != nil {
			err = fmt.Errorf("%w: acquire %s: gave up waiting for a turn among this process's holder and waiters: %w", redlock.ErrNotObtained, clip.Quote(key), err)
			hooks.ObserveWait(ctx, c, key, time.Since(start), nil, err)
			return nil, err
		}
	}
	// An episode of attempts that reach no quorum is told once.
	stalled, attempt := false, try
	try = func(ctx context.Context) (*redlock.Lock, error) {
		l, err := attempt(ctx)
		stalled = hooks.ObserveAttempt(ctx, c, key, err, stalled)
		return l, err
	}
	var l *redlock.Lock
	kept := false
	defer func() {
		if kept {
			return
		}
		// Failed, or a panic (an Observer's, say). Never keep the turn,
		// nor a lock nobody will release.
		t.leaveLine()
		if l != nil {
			defer func() { _ = recover() }() // the first panic goes on
			_ = l.Release(context.WithoutCancel(ctx))
		}
	}()
	tried := time.Now()
	l, err := try(ctx)
	if Retryable(ctx, err) {
		l, err = wait(ctx, c, key, wakeAll, opts, try, tried, err)
		waited = true
	}
	err = CtxErr(ctx, err)
	if waited {
		hooks.ObserveWait(ctx, c, key, time.Since(start), l, err)
	}
	if err != nil {
		l = nil // not ours to release
		return nil, err
	}
	if opts.AutoRenew {
		l.AutoRenew()
	}
	kept = true
	return l, nil
}

// wait is Wait after the first attempt, which started at tried and failed
// with err.
func wait(ctx context.Context, c *redlock.Client, key string, wakeAll bool, opts Options,
	try func(context.Context) (*redlock.Lock, error), tried time.Time, err error) (*redlock.Lock, error) {
	return Until(ctx, hooks.NewWaker(c, key, wakeAll, tried), opts, try, err)
}

// Until retries try on each of waker's wake-ups, or when the jittered
// fallback timer fires, until an attempt is not retryable or ctx ends.
// err is the failed attempt before; it tries again at once unless waker
// settled before that attempt began. Until stops waker: a waiter that
// leaves without the lock gives up its wake-ups to the next. If ctx ends
// first, the error matches ctx.Err() and tells the last attempt's outcome.
func Until(ctx context.Context, waker link.Waker, opts Options,
	try func(context.Context) (*redlock.Lock, error), err error) (*redlock.Lock, error) {
	got := false
	defer func() {
		if got {
			waker.Close()
		} else {
			waker.GiveUp()
		}
	}()
	delay := opts.Backoff()
	for again := !waker.Settled(); ; again = true {
		if again {
			var l *redlock.Lock
			if l, err = try(ctx); !Retryable(ctx, err) {
				got = err == nil
				return l, CtxErr(ctx, err)
			}
		}
		timer := time.NewTimer(delay.Draw())
		select {
		case <-waker.Wake():
		case <-timer.C:
			delay.Double()
		case <-ctx.Done():
			timer.Stop()
			return nil, CtxErr(ctx, err)
		}
		timer.Stop()
	}
}

// CtxErr makes err, an attempt's error, match ctx.Err() if ctx has
// ended. The attempt may have seen it end only after its round.
func CtxErr(ctx context.Context, err error) error {
	if end := ctx.Err(); err != nil && end != nil && !errors.Is(err, end) {
		return fmt.Errorf("%w; gave up waiting: %w", err, end)
	}
	return err
}

// Retryable reports whether a failed attempt is worth another. The lock
// was held or the quorum not reached, and ctx has not ended.
func Retryable(ctx context.Context, err error) bool {
	return err != nil && errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrUpgrade) && ctx.Err() == nil
}

// Acquire calls attempt until it gets a lock, fails for a reason waiting
// cannot mend, or ctx ends. After a failed first attempt it waits on the
// Waker that waker makes, for the releases since that attempt began.
// label names the lock to the client's Observer: each episode of attempts
// that reach no quorum is told once, and so is a wait. With
// opts.AutoRenew the lock is renewed from then on. A lock got when an
// Observer panics is released: nobody else would.
func Acquire(ctx context.Context, c *redlock.Client, label string, opts Options,
	waker func(since time.Time) link.Waker, attempt func(context.Context) (*redlock.Lock, error)) (*redlock.Lock, error) {
	start := time.Now()
	stalled := false
	var got *redlock.Lock
	kept := false
	defer func() {
		if got != nil && !kept {
			defer func() { _ = recover() }() // the first panic goes on
			_ = got.Release(context.WithoutCancel(ctx))
		}
	}()
	try := func(ctx context.Context) (*redlock.Lock, error) {
		l, err := attempt(ctx)
		got = l
		stalled = hooks.ObserveAttempt(ctx, c, label, err, stalled)
		return l, err
	}
	tried := time.Now()
	l, err := try(ctx)
	if Retryable(ctx, err) {
		l, err = Until(ctx, waker(tried), opts, try, err)
		hooks.ObserveWait(ctx, c, label, time.Since(start), l, err)
	}
	if err != nil {
		return nil, CtxErr(ctx, err)
	}
	if opts.AutoRenew {
		l.AutoRenew()
	}
	kept = true
	return l, nil
}
