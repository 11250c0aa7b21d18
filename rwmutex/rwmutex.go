// Package rwmutex provides a distributed read-write lock on a
// redlock.Client. Many readers share it. A writer excludes readers and
// other writers. A waiting writer keeps new readers out, so that a stream
// of readers cannot starve it.
//
// Holders are owner identities (redlock.NewOwner) that the caller passes
// on. An owner may re-enter its read or write lock. It may take the read
// lock while it holds the write lock, then release the write lock: a
// downgrade. Asking for the write lock while holding the read lock is
// refused with redlock.ErrUpgrade, as it would wait for itself forever.
// Each reader's hold expires on its own. So a crashed reader blocks
// writers no longer than its TTL. All keys of one lock hash to one Redis
// Cluster slot, whatever its name (see redlock.Options.KeyPrefix).
package rwmutex

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

// hooks is what package redlock lends this package.
var hooks = link.Get[*redlock.Client, *redlock.Lock]()

// RWMutex is a distributed read-write lock on one key. The holds of an
// owner are counted by the RWMutex that took them. So use one RWMutex per
// key in a process. It is safe for concurrent use.
//
// An owner's read or write holds end as soon as that lock is lost (see
// redlock.Lock.Done). The next call of owner's on that side reports the
// loss. An unlock reports it as an error wrapping redlock.ErrNotHeld. A
// lock reports it as a failed re-entry. The call after that starts
// afresh. A lost read lock does not refuse owner's Lock as an upgrade.
//
// Make one with New. On a zero RWMutex, and with a nil context, the lock
// and unlock methods return an error wrapping redlock.ErrInvalidArgument.
type RWMutex struct {
	client    *redlock.Client
	key       string
	opts      retry.Options
	writeWait time.Duration
	readers   retry.Holders
	writers   retry.Holders
}

// New returns an RWMutex for key. It does no I/O. It returns an error
// wrapping redlock.ErrInvalidArgument for a nil client, an empty key, or
// an option that cannot work with the client's. opts may be nil for the
// defaults.
func New(client *redlock.Client, key string, opts *Options) (*RWMutex, error) {
	if opts == nil {
		opts = &Options{}
	}
	o, err := retry.Options{
		TTL:           opts.TTL,
		MinRetryDelay: opts.MinRetryDelay,
		MaxRetryDelay: opts.MaxRetryDelay,
		AutoRenew:     opts.AutoRenew,
	}.Check(client, key, "rwmutex.Options")
	if err != nil {
		return nil, err
	}
	ww := opts.WriteWait
	if ww == 0 {
		ww = DefaultWriteWait
	}
	if ww < time.Millisecond {
		return nil, fmt.Errorf("%w: rwmutex.Options.WriteWait %v: must be at least 1ms (it is kept in whole milliseconds, and 0 would let readers starve writers)",
			redlock.ErrInvalidArgument, ww)
	}
	kept := ww.Truncate(time.Millisecond) // as the masters keep it
	if o.MaxRetryDelay >= kept/2 {
		given := fmt.Sprint(ww)
		if kept != ww {
			given += ", kept as " + kept.String()
		}
		return nil, fmt.Errorf("%w: rwmutex.Options.MaxRetryDelay %v: must be less than half of WriteWait (%s), or a waiting writer's marker lapses between its attempts; lower it, or raise WriteWait to %v or more",
			redlock.ErrInvalidArgument, o.MaxRetryDelay, given, (2*o.MaxRetryDelay).Truncate(time.Millisecond)+time.Millisecond)
	}
	return &RWMutex{client: client, key: key, opts: o, writeWait: kept}, nil
}

// RLock adds a read hold for owner. It re-enters at once if owner
// already reads. Otherwise it blocks until no other owner writes or waits
// to write, or ctx ends. The error then matches ctx.Err().
func (m *RWMutex) RLock(ctx context.Context, owner string) error {
	return m.lock(ctx, "RLock", &m.readers, owner, true, true)
}

// TryRLock is RLock without waiting. It also fails, with an error
// wrapping redlock.ErrNotObtained, while another call of owner's reads is
// under way.
func (m *RWMutex) TryRLock(ctx context.Context, owner string) error {
	return m.lock(ctx, "TryRLock", &m.readers, owner, true, false)
}

// Lock adds a write hold for owner. It re-enters at once if owner
// already writes. It fails at once with redlock.ErrUpgrade if owner
// reads. Otherwise it blocks until no other owner reads or writes, or ctx
// ends. While it waits for readers, new readers wait for it.
func (m *RWMutex) Lock(ctx context.Context, owner string) error {
	return m.lock(ctx, "Lock", &m.writers, owner, false, true)
}

// TryLock is Lock without waiting. It leaves no write-wait marker. It
// also fails, with an error wrapping redlock.ErrNotObtained, while
// another call of owner's writes is under way.
func (m *RWMutex) TryLock(ctx context.Context, owner string) error {
	return m.lock(ctx, "TryLock", &m.writers, owner, false, false)
}

// check returns an error if m was not made by New, or ctx is nil. op
// names the call.
func (m *RWMutex) check(ctx context.Context, op string) error {
	if m.client == nil {
		return fmt.Errorf("%w: zero RWMutex: use rwmutex.New", redlock.ErrInvalidArgument)
	}
	if ctx == nil {
		return retry.NilContext("RWMutex."+op, m.key)
	}
	return nil
}

func (m *RWMutex) lock(ctx context.Context, op string, side *retry.Holders, owner string, read, block bool) error {
	if err := m.check(ctx, op); err != nil {
		return err
	}
	if !read && m.readers.Holding(owner) != nil && m.writers.Holding(owner) == nil {
		return fmt.Errorf("%w: acquire write %s: owner %q reads it: %w", redlock.ErrNotObtained, clip.Quote(m.key), owner, redlock.ErrUpgrade)
	}
	// A release may admit every waiting reader, but only one writer.
	return side.Take(ctx, m.client, m.key, owner, read, block, m.opts, func(ctx context.Context) (*redlock.Lock, error) {
		if read {
			return m.client.AcquireRead(ctx, m.key, owner, m.opts.TTL)
		}
		if block {
			return hooks.AcquireWaitingWrite(ctx, m.client, m.key, owner, m.opts.TTL, m.writeWait)
		}
		return m.client.AcquireWrite(ctx, m.key, owner, m.opts.TTL)
	})
}

// RUnlock removes one of owner's read holds. The last one releases its
// read lock and wakes waiting writers. It returns an error wrapping
// redlock.ErrNotHeld if owner holds no read lock here. It also wraps
// redlock.ErrNotHeld if the hold had already expired on a quorum. It
// wraps redlock.ErrNoQuorum where too few masters answered in time to
// tell. While owner reads, it waits for another call of owner's reads
// that is under way. If ctx ends first, the error matches ctx.Err() and
// the hold is kept. While owner holds no read lock, it returns ErrNotHeld
// at once. After owner's read lock was lost, it sends nothing and its
// error says so, wrapping the lock's Err too.
func (m *RWMutex) RUnlock(ctx context.Context, owner string) error {
	if err := m.check(ctx, "RUnlock"); err != nil {
		return err
	}
	return m.readers.Release(ctx, owner, "release read", m.key)
}

// Unlock removes one of owner's write holds. The last one releases the
// write lock. A read lock owner also holds stays: a downgrade. It returns
// and waits as RUnlock does.
func (m *RWMutex) Unlock(ctx context.Context, owner string) error {
	if err := m.check(ctx, "Unlock"); err != nil {
		return err
	}
	return m.writers.Release(ctx, owner, "release write", m.key)
}

// Reader returns owner's read lock, or nil. After a loss it returns the
// lost lock, until owner's next read call reports it.
func (m *RWMutex) Reader(owner string) *redlock.Lock { return m.readers.Get(owner) }

// Writer returns owner's write lock, or nil. Its Token is the fencing
// token. After a loss it returns the lost lock, until owner's next write
// call reports it.
func (m *RWMutex) Writer(owner string) *redlock.Lock { return m.writers.Get(owner) }
