// Package rwmutex provides a distributed read-write lock on a
// redlock.Client: many readers share it, a writer excludes readers and
// other writers, and a waiting writer keeps new readers out so that a
// stream of readers cannot starve it.
//
// Holders are owner identities (redlock.NewOwner) that the caller passes
// on. An owner may re-enter its read or write lock, take the read lock
// while it holds the write lock and then release the write lock (a
// downgrade); asking for the write lock while holding the read lock is
// refused with redlock.ErrUpgrade, as it would wait for itself forever.
// Each reader's hold expires on its own, so a crashed reader blocks
// writers no longer than its TTL. All keys of one lock share the Redis
// Cluster hash tag {key}.
package rwmutex

import (
	"context"
	"fmt"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/retry"
)

// Options configure an RWMutex; see mutex.Options.
type Options = retry.Options

// RWMutex is a distributed read-write lock on one key. The holds of an
// owner are counted by the RWMutex that took them: use one RWMutex per key
// in a process. It is safe for concurrent use.
type RWMutex struct {
	client  *redlock.Client
	key     string
	opts    Options
	readers retry.Holders
	writers retry.Holders
}

// New returns an RWMutex for key. It does no I/O; it returns an error
// wrapping redlock.ErrInvalidArgument for a nil client, an empty key or bad
// options. opts may be nil for the defaults.
func New(client *redlock.Client, key string, opts *Options) (*RWMutex, error) {
	if opts == nil {
		opts = &Options{}
	}
	o, err := opts.Check(client, key)
	if err != nil {
		return nil, fmt.Errorf("rwmutex: %w", err)
	}
	if ww := client.WriteWait(); o.MaxRetryDelay >= ww/2 {
		return nil, fmt.Errorf("%w: rwmutex: MaxRetryDelay %v: must be less than half the client's WriteWait (%v), or a waiting writer's marker lapses between its attempts",
			redlock.ErrInvalidArgument, o.MaxRetryDelay, ww)
	}
	return &RWMutex{client: client, key: key, opts: o}, nil
}

// RLock adds a read hold for owner. It re-enters at once if owner already
// reads; otherwise it blocks until no other owner writes or waits to
// write, or ctx ends (the error then matches ctx.Err()).
func (m *RWMutex) RLock(ctx context.Context, owner string) error {
	return m.lock(ctx, &m.readers, owner, true, true)
}

// TryRLock is RLock without waiting.
func (m *RWMutex) TryRLock(ctx context.Context, owner string) error {
	return m.lock(ctx, &m.readers, owner, true, false)
}

// Lock adds a write hold for owner. It re-enters at once if owner already
// writes; it fails at once with redlock.ErrUpgrade if owner reads;
// otherwise it blocks until no other owner reads or writes, or ctx ends.
// While it waits for readers, new readers wait for it.
func (m *RWMutex) Lock(ctx context.Context, owner string) error {
	return m.lock(ctx, &m.writers, owner, false, true)
}

// TryLock is Lock without waiting; it leaves no write-wait marker.
func (m *RWMutex) TryLock(ctx context.Context, owner string) error {
	return m.lock(ctx, &m.writers, owner, false, false)
}

func (m *RWMutex) lock(ctx context.Context, side *retry.Holders, owner string, read, block bool) error {
	if !read && m.readers.Get(owner) != nil && m.writers.Get(owner) == nil {
		return fmt.Errorf("rwmutex %q: owner %q: %w", m.key, owner, redlock.ErrUpgrade)
	}
	// A release may admit every waiting reader, but only one writer.
	return side.Take(ctx, m.client, m.key, owner, read, block, m.opts, func(ctx context.Context) (*redlock.Lock, error) {
		if read {
			return m.client.AcquireRead(ctx, m.key, owner, m.opts.TTL)
		}
		return m.client.AcquireWrite(ctx, m.key, owner, m.opts.TTL, block)
	})
}

// RUnlock removes one of owner's read holds; the last one releases its
// read lock and wakes waiting writers. It returns an error wrapping
// redlock.ErrNotHeld if owner holds no read lock here, or if its hold had
// already expired on a quorum.
func (m *RWMutex) RUnlock(ctx context.Context, owner string) error {
	return m.readers.Release(ctx, owner, fmt.Sprintf("rwmutex %q read lock", m.key))
}

// Unlock removes one of owner's write holds; the last one releases the
// write lock (a read lock owner also holds stays: a downgrade).
func (m *RWMutex) Unlock(ctx context.Context, owner string) error {
	return m.writers.Release(ctx, owner, fmt.Sprintf("rwmutex %q write lock", m.key))
}

// Reader returns owner's read lock, or nil.
func (m *RWMutex) Reader(owner string) *redlock.Lock { return m.readers.Get(owner) }

// Writer returns owner's write lock, or nil. Its Token is the fencing token.
func (m *RWMutex) Writer(owner string) *redlock.Lock { return m.writers.Get(owner) }
