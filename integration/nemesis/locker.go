package nemesis

import (
	"context"
	"fmt"
	mrand "math/rand/v2"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rwmutex"
)

// Kind is the lock a run's clients use.
type Kind int

const (
	// Exclusive is mutex.Mutex: every section reads and writes.
	Exclusive Kind = iota
	// Reentrant is mutex.Reentrant: every section locks twice (nested),
	// writes under the inner hold and unlocks twice.
	Reentrant
	// ReadWrite is rwmutex.RWMutex: a third of the sections take the write
	// lock and write, the others share the read lock and only read.
	ReadWrite
	// Election is election.Election: each client is a candidate, and a
	// section is one leadership, fenced by its epoch (see Term).
	Election
	// Semaphore is semaphore.Semaphore: each section holds a permit,
	// fenced by its token on the resource of its slot (see Permit).
	Semaphore
	// Fair is mutex.Fair: every section queues (see Waiter).
	Fair
)

func (k Kind) String() string {
	switch k {
	case Reentrant:
		return "mutex.Reentrant"
	case ReadWrite:
		return "rwmutex.RWMutex"
	case Election:
		return "election.Election"
	case Semaphore:
		return "semaphore.Semaphore"
	case Fair:
		return "mutex.Fair"
	case Multi:
		return "multi.Mutex"
	}
	return "mutex.Mutex"
}

// locker is one client's lock of the Kind under test. Only the client's
// goroutine uses it.
type locker interface {
	// lock takes the lock for one section, shared if it chooses so, and
	// returns the Lock the section holds.
	lock(ctx context.Context) (l *redlock.Lock, shared bool, err error)
	// unlock ends the section.
	unlock(ctx context.Context) error
}

func newLocker(k Kind, c *redlock.Client, id int, cfg Config, key string) (locker, error) {
	owner := fmt.Sprintf("c%d", id)
	switch k {
	case Reentrant:
		m, err := mutex.NewReentrant(c, key, cfg.mutexOptions())
		return &reentrantLocker{m: m, owner: owner}, err
	case ReadWrite:
		m, err := rwmutex.New(c, key, &rwmutex.Options{
			TTL:           cfg.TTL,
			MinRetryDelay: cfg.MinRetryDelay,
			MaxRetryDelay: cfg.MaxRetryDelay,
			AutoRenew:     cfg.AutoRenew,
		})
		return &rwLocker{m: m, owner: owner}, err
	}
	m, err := mutex.New(c, key, cfg.mutexOptions())
	return &mutexLocker{m}, err
}

func (c *Config) mutexOptions() *mutex.Options {
	return &mutex.Options{
		TTL:           c.TTL,
		MinRetryDelay: c.MinRetryDelay,
		MaxRetryDelay: c.MaxRetryDelay,
		AutoRenew:     c.AutoRenew,
	}
}

type mutexLocker struct{ m *mutex.Mutex }

func (x *mutexLocker) lock(ctx context.Context) (*redlock.Lock, bool, error) {
	if err := x.m.Lock(ctx); err != nil {
		return nil, false, err
	}
	return x.m.Current(), false, nil
}

func (x *mutexLocker) unlock(ctx context.Context) error { return x.m.Unlock(ctx) }

// reentrantLocker nests two holds; the inner one must keep the Lock and
// its token.
type reentrantLocker struct {
	m     *mutex.Reentrant
	owner string
	held  int
}

func (x *reentrantLocker) lock(ctx context.Context) (*redlock.Lock, bool, error) {
	if err := x.m.Lock(ctx, x.owner); err != nil {
		return nil, false, err
	}
	x.held = 1
	outer := x.m.Current(x.owner)
	token := outer.Token()
	if err := x.m.Lock(ctx, x.owner); err != nil {
		// The outer hold stays: the section runs under it alone.
		return outer, false, nil // a failed re-entry is not a failed section
	}
	x.held = 2
	if l := x.m.Current(x.owner); l != outer || l.Holds() != 2 || l.Token() != token {
		return nil, false, fmt.Errorf("re-entry: Lock %p holds %d token %d, want %p holds 2 token %d", l, l.Holds(), l.Token(), outer, token)
	}
	return outer, false, nil
}

func (x *reentrantLocker) unlock(ctx context.Context) error {
	var err error
	for ; x.held > 0; x.held-- {
		if e := x.m.Unlock(ctx, x.owner); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// rwLocker writes in a third of its sections and reads in the others.
type rwLocker struct {
	m      *rwmutex.RWMutex
	owner  string
	shared bool
}

func (x *rwLocker) lock(ctx context.Context) (*redlock.Lock, bool, error) {
	x.shared = mrand.IntN(3) != 0
	if x.shared {
		if err := x.m.RLock(ctx, x.owner); err != nil {
			return nil, true, err
		}
		return x.m.Reader(x.owner), true, nil
	}
	if err := x.m.Lock(ctx, x.owner); err != nil {
		return nil, false, err
	}
	return x.m.Writer(x.owner), false, nil
}

func (x *rwLocker) unlock(ctx context.Context) error {
	if x.shared {
		return x.m.RUnlock(ctx, x.owner)
	}
	return x.m.Unlock(ctx, x.owner)
}
