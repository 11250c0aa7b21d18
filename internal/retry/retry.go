// Package retry holds what the blocking locks of package mutex and rwmutex
// share: their options and the loop that waits for a lock.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redlock/redlock"
)

// Defaults of Options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
)

// Options configure a blocking lock. The zero value of each field selects
// its default.
type Options struct {
	// TTL is how long the lock lives on the masters without renewal.
	// Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timer between two
	// attempts of a blocking lock, for releases it did not hear of (see
	// redlock.Waker) and locks that expire. The delay doubles from
	// MinRetryDelay up to MaxRetryDelay, and each one is drawn at random
	// from its upper half, so that competing clients fall out of step.
	// Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration

	// AutoRenew keeps each acquired lock held until it is unlocked (see
	// redlock.Lock.AutoRenew). Default: off.
	AutoRenew bool
}

// Check fills in the defaults and names the first invalid value.
func (o Options) Check(client *redlock.Client, key string) (Options, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{redlock.ErrInvalidArgument}, args...)...)
	}
	o.TTL = orDefault(o.TTL, DefaultTTL)
	o.MinRetryDelay = orDefault(o.MinRetryDelay, DefaultMinRetryDelay)
	o.MaxRetryDelay = orDefault(o.MaxRetryDelay, DefaultMaxRetryDelay)
	switch {
	case client == nil:
		return o, bad("nil client")
	case key == "":
		return o, bad("empty key")
	case o.TTL < 0 || o.MinRetryDelay < 0 || o.MaxRetryDelay < 0:
		return o, bad("TTL %v, MinRetryDelay %v, MaxRetryDelay %v: must not be negative", o.TTL, o.MinRetryDelay, o.MaxRetryDelay)
	case o.MaxRetryDelay < o.MinRetryDelay:
		return o, bad("MaxRetryDelay %v is less than MinRetryDelay %v", o.MaxRetryDelay, o.MinRetryDelay)
	}
	return o, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Wait calls try until it gets the lock, fails for a reason waiting cannot
// mend, or ctx ends. After a first failed attempt it subscribes to the
// lock's releases (wakeAll: every release wakes it; else one waiter per
// release), tries again at once (a release may have come in between), and
// then retries on each wake-up or when the fallback timer fires. Waiters
// for an exclusive lock (not wakeAll) in one process take turns. If ctx
// ends first, the error matches ctx.Err() and tells the last attempt's
// outcome. With opts.AutoRenew the lock is renewed from then on.
func Wait(ctx context.Context, c *redlock.Client, key string, wakeAll bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) (*redlock.Lock, error) {
	if !wakeAll {
		done, err := takeTurn(ctx, c, key)
		if err != nil {
			return nil, fmt.Errorf("lock %q: %w", key, err)
		}
		defer done()
	}
	l, err := try(ctx)
	if retryable(ctx, err) {
		l, err = wait(ctx, c, key, wakeAll, opts, try)
	}
	if err != nil {
		return nil, err
	}
	if opts.AutoRenew {
		l.AutoRenew()
	}
	return l, nil
}

func wait(ctx context.Context, c *redlock.Client, key string, wakeAll bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) (*redlock.Lock, error) {
	waker := c.NewWaker(key, wakeAll)
	defer waker.Close()
	delay := opts.MinRetryDelay
	for {
		l, err := try(ctx)
		if !retryable(ctx, err) {
			return l, err
		}
		timer := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-waker.C:
		case <-timer.C:
			delay = min(2*delay, opts.MaxRetryDelay)
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("lock %q: %w; last attempt: %w", key, ctx.Err(), err)
		}
		timer.Stop()
	}
}

// retryable reports whether a failed attempt is worth another: the lock
// was held or the quorum not reached, and ctx has not ended.
func retryable(ctx context.Context, err error) bool {
	return err != nil && errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrUpgrade) && ctx.Err() == nil
}
