// Package mutex provides a distributed mutual-exclusion lock on a
// redlock.Client: the lock of one key, held by a quorum of Redis masters.
package mutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redlock/redlock"
)

// Defaults of Options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
)

// Options configure a Mutex. The zero value of each field selects its
// default.
type Options struct {
	// TTL is how long the lock lives on the masters without an Extend.
	// Default: 10s (DefaultTTL).
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the pause between two attempts
	// of Lock. The pause doubles from MinRetryDelay up to MaxRetryDelay, and
	// each one is drawn at random from its upper half, so that competing
	// clients fall out of step. Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration
}

// Mutex is a distributed lock on one key. Like sync.Mutex it is not
// reentrant, and it may be unlocked by another goroutine than the one that
// locked it. It is safe for concurrent use: goroutines of one process that
// share a Mutex wait for each other locally before they compete with other
// processes.
type Mutex struct {
	client             *redlock.Client
	key                string
	ttl                time.Duration
	minDelay, maxDelay time.Duration

	turn chan struct{} // holds a token while this Mutex holds or seeks the lock
	mu   sync.Mutex    // guards lock
	lock *redlock.Lock
}

// New returns a Mutex for key. It does no I/O; it returns an error wrapping
// redlock.ErrInvalidArgument for an empty key or bad options. opts may be
// nil for the defaults. The TTL itself is checked against the client's
// options by the first Lock.
func New(client *redlock.Client, key string, opts *Options) (*Mutex, error) {
	if opts == nil {
		opts = &Options{}
	}
	m := &Mutex{
		client:   client,
		key:      key,
		ttl:      orDefault(opts.TTL, DefaultTTL),
		minDelay: orDefault(opts.MinRetryDelay, DefaultMinRetryDelay),
		maxDelay: orDefault(opts.MaxRetryDelay, DefaultMaxRetryDelay),
		turn:     make(chan struct{}, 1),
	}
	switch {
	case client == nil:
		return nil, fmt.Errorf("%w: mutex: nil client", redlock.ErrInvalidArgument)
	case key == "":
		return nil, fmt.Errorf("%w: mutex: empty key", redlock.ErrInvalidArgument)
	case m.ttl < 0 || m.minDelay < 0 || m.maxDelay < 0:
		return nil, fmt.Errorf("%w: mutex: TTL %v, MinRetryDelay %v, MaxRetryDelay %v: must not be negative",
			redlock.ErrInvalidArgument, m.ttl, m.minDelay, m.maxDelay)
	case m.maxDelay < m.minDelay:
		return nil, fmt.Errorf("%w: mutex: MaxRetryDelay %v is less than MinRetryDelay %v",
			redlock.ErrInvalidArgument, m.maxDelay, m.minDelay)
	}
	return m, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Key returns the key of the lock.
func (m *Mutex) Key() string { return m.key }

// Lock blocks until this Mutex holds the lock or ctx ends. Between attempts
// it waits a jittered, growing delay. A failed attempt leaves nothing on the
// masters. If ctx ends first, the error matches ctx.Err() and tells the last
// attempt's outcome; an invalid TTL fails at once.
func (m *Mutex) Lock(ctx context.Context) error {
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mutex %q: %w", m.key, ctx.Err())
	}
	delay := m.minDelay
	for {
		err := m.acquire(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, redlock.ErrNotObtained) || ctx.Err() != nil {
			<-m.turn
			return err
		}
		wait := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			<-m.turn
			return fmt.Errorf("mutex %q: %w; last attempt: %w", m.key, ctx.Err(), err)
		}
		delay = min(2*delay, m.maxDelay)
	}
}

// TryLock makes one attempt and does not wait: it returns nil if this
// Mutex now holds the lock, and an error wrapping redlock.ErrNotObtained if
// the lock is held elsewhere (in this process too) or no quorum agreed.
// It blocks for at most one quorum round.
func (m *Mutex) TryLock(ctx context.Context) error {
	select {
	case m.turn <- struct{}{}:
	default:
		return fmt.Errorf("%w: mutex %q is held by this process", redlock.ErrNotObtained, m.key)
	}
	if err := m.acquire(ctx); err != nil {
		<-m.turn
		return err
	}
	return nil
}

func (m *Mutex) acquire(ctx context.Context) error {
	l, err := m.client.Acquire(ctx, m.key, m.ttl)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.lock = l
	m.mu.Unlock()
	return nil
}

// Unlock releases the lock. It returns an error wrapping redlock.ErrNotHeld
// if this Mutex does not hold it, or if the lock had already expired on a
// quorum of masters (the critical section may have overlapped another
// holder's). Either way the Mutex is unlocked afterwards. It blocks for at
// most one quorum round.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	l := m.lock
	m.lock = nil
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: mutex %q is not locked", redlock.ErrNotHeld, m.key)
	}
	err := l.Release(ctx)
	<-m.turn
	return err
}

// Extend renews the lock for another TTL from now. It returns an error
// wrapping redlock.ErrNotHeld if this Mutex does not hold the lock or its
// validity ran out (then the Mutex stays locked until Unlock). It blocks for
// at most one quorum round.
func (m *Mutex) Extend(ctx context.Context) error {
	m.mu.Lock()
	l := m.lock
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: mutex %q is not locked", redlock.ErrNotHeld, m.key)
	}
	return l.Extend(ctx, m.ttl)
}

// Until returns the time until which the lock is safely held, or the zero
// time if this Mutex does not hold it.
func (m *Mutex) Until() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lock == nil {
		return time.Time{}
	}
	return m.lock.Until()
}
