package mutex

import (
	"context"
	"fmt"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/retry"
)

// Reentrant is a distributed lock on one key that its owner may lock
// again. Go has no thread identity. So the owner is a value the caller
// makes (redlock.NewOwner) and passes on to whatever runs on its behalf.
// Each Lock by the owner adds a hold, and each Unlock removes one. The
// last Unlock frees the lock; another owner waits meanwhile. The holds of
// an owner are counted by the Reentrant that took them. So use one
// Reentrant per key in a process. It is safe for concurrent use.
//
// An owner's holds end as soon as its lock is lost (see
// redlock.Lock.Done). Its next call reports the loss. An Unlock reports
// it as an error wrapping redlock.ErrNotHeld. A Lock or TryLock reports
// it as a failed re-entry. The call after that starts afresh.
//
// Make one with NewReentrant. On a zero Reentrant, and with a nil
// context, Lock, TryLock and Unlock return an error wrapping
// redlock.ErrInvalidArgument.
type Reentrant struct {
	client  *redlock.Client
	key     string
	opts    retry.Options
	holders retry.Holders
}

// NewReentrant returns a Reentrant for key. It does no I/O and validates
// like New.
func NewReentrant(client *redlock.Client, key string, opts *Options) (*Reentrant, error) {
	o, err := check(client, key, opts)
	if err != nil {
		return nil, err
	}
	return &Reentrant{client: client, key: key, opts: o}, nil
}

// Lock adds a hold for owner. If owner already holds the lock, it
// re-enters at once: one quorum round, which also renews the TTL. It
// then fails with redlock.ErrNotHeld if the lock was lost meanwhile. It
// also fails so where the loss had ended owner's holds unreported.
// Otherwise it blocks like Mutex.Lock until owner holds the lock or ctx
// ends.
func (r *Reentrant) Lock(ctx context.Context, owner string) error {
	return r.lock(ctx, "Lock", owner, true)
}

// TryLock is Lock without waiting: one attempt. It returns an error
// wrapping redlock.ErrNotObtained if another owner holds the lock, or if
// another call of owner's is under way.
func (r *Reentrant) TryLock(ctx context.Context, owner string) error {
	return r.lock(ctx, "TryLock", owner, false)
}

// check returns an error if r was not made by NewReentrant, or ctx is
// nil. op names the call.
func (r *Reentrant) check(ctx context.Context, op string) error {
	if r.client == nil {
		return fmt.Errorf("%w: zero Reentrant: use mutex.NewReentrant", redlock.ErrInvalidArgument)
	}
	if ctx == nil {
		return retry.NilContext("Reentrant."+op, r.key)
	}
	return nil
}

func (r *Reentrant) lock(ctx context.Context, op, owner string, block bool) error {
	if err := r.check(ctx, op); err != nil {
		return err
	}
	return r.holders.Take(ctx, r.client, r.key, owner, false, block, r.opts, func(ctx context.Context) (*redlock.Lock, error) {
		return r.client.AcquireAs(ctx, r.key, owner, r.opts.TTL)
	})
}

// Unlock removes one of owner's holds. The last one releases the lock on
// the masters. It returns an error wrapping redlock.ErrNotHeld if owner
// holds nothing here; another owner's Unlock gets it too. It also wraps
// redlock.ErrNotHeld if a quorum no longer held the lock. It wraps
// redlock.ErrNoQuorum where too few masters answered in time to tell (see
// redlock.Lock.Release). It blocks for one quorum round. While owner
// holds the lock, it first waits for another call of owner's that is
// under way. If ctx ends first, the error matches ctx.Err() and the hold
// is kept. While owner holds nothing, it returns ErrNotHeld at once.
// After owner's lock was lost, it sends nothing and its error says so,
// wrapping the lock's Err too.
func (r *Reentrant) Unlock(ctx context.Context, owner string) error {
	if err := r.check(ctx, "Unlock"); err != nil {
		return err
	}
	return r.holders.Release(ctx, owner, "release", r.key)
}

// Current returns the lock owner holds, or nil. Its Holds counts the
// holds. Token, Done, Err and Context serve the work done under it. After
// a loss it returns the lost lock, until owner's next call reports it.
func (r *Reentrant) Current(owner string) *redlock.Lock { return r.holders.Get(owner) }
