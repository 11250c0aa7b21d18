// Package mutex provides distributed mutual-exclusion locks on a
// redlock.Client. Mutex is like sync.Mutex. Reentrant is held by an owner
// identity that may lock it again. Both block with wake-on-release and a
// jittered fallback timer. Both can renew their lock automatically.
package mutex

import (
	"context"
	"fmt"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/retry"
)

// Mutex is a distributed lock on one key. Like sync.Mutex it is not
// reentrant. It may be unlocked by another goroutine than the one that
// locked it. It is safe for concurrent use. Goroutines of one process that
// share a Mutex wait for each other locally before they compete with
// other processes. So do the Mutexes and Reentrants of one client on one
// key. The holder keeps the process's turn until its Unlock hands the
// lock on, and the next of them tries then.
//
// The Mutex is unlocked as soon as its lock is lost, as if Unlock had
// run. The lock is lost when its validity ran out, renewal failed, a
// round found it lost, at Client.Close, or by a Release on the Lock
// itself (see redlock.Lock.Done). A Lock or TryLock can then take the
// lock anew, without Unlock, and a waiting Lock tries. Each loss is then
// reported once, by an Unlock, before any Unlock releases a lock taken
// later. The Mutex cannot tell its goroutines apart. The deferred Unlock
// of a lost hold must not release another goroutine's lock. Until then
// Current returns the lost lock, and Extend fails.
//
// Make one with New. On a zero Mutex, and with a nil context, Lock,
// TryLock, Unlock and Extend return an error wrapping
// redlock.ErrInvalidArgument.
type Mutex struct {
	client *redlock.Client
	key    string
	opts   retry.Options
	// holds has one owner, "". Its turn is taken while this Mutex holds
	// or seeks the lock. It has its own mutex; the fields above are set by
	// New, then never changed.
	holds retry.Holders
}

// New returns a Mutex for key. It does no I/O. It returns an error
// wrapping redlock.ErrInvalidArgument for a nil client, an empty key, or
// an option that cannot work with the client's. opts may be nil for the
// defaults.
func New(client *redlock.Client, key string, opts *Options) (*Mutex, error) {
	o, err := check(client, key, opts)
	if err != nil {
		return nil, err
	}
	m := &Mutex{client: client, key: key, opts: o}
	m.holds.Mutex = true
	return m, nil
}

// check returns an error if m was not made by New, or ctx is nil. op
// names the call.
func (m *Mutex) check(ctx context.Context, op string) error {
	if m.client == nil {
		return fmt.Errorf("%w: zero Mutex: use mutex.New", redlock.ErrInvalidArgument)
	}
	if ctx == nil {
		return retry.NilContext("Mutex."+op, m.key)
	}
	return nil
}

// Key returns the key of the lock.
func (m *Mutex) Key() string { return m.key }

// Lock blocks until this Mutex holds the lock or ctx ends. It waits for
// its turn among this process's holder and waiters for the key on the
// client. It then waits for releases published by the masters, with a
// jittered fallback timer. A failed attempt holds nothing on the masters:
// it is undone (see redlock.Client.Acquire). If ctx ends first, the error
// matches ctx.Err() and tells the last attempt's outcome. An invalid TTL
// fails at once.
func (m *Mutex) Lock(ctx context.Context) error {
	if err := m.check(ctx, "Lock"); err != nil {
		return err
	}
	_, err := m.acquire(ctx, true)
	return err
}

// TryLock makes one attempt and does not wait. It returns nil if this
// Mutex now holds the lock. It returns an error wrapping
// redlock.ErrNotObtained if the lock is held elsewhere (in this process
// too) or no quorum agreed. It blocks for at most one quorum round.
func (m *Mutex) TryLock(ctx context.Context) error {
	if err := m.check(ctx, "TryLock"); err != nil {
		return err
	}
	_, err := m.acquire(ctx, false)
	return err
}

// acquire takes the lock, and returns the Lock it took: Current may
// return a lost one instead.
func (m *Mutex) acquire(ctx context.Context, block bool) (*redlock.Lock, error) {
	m.holds.Holding("") // ends a hold whose lock ended, freeing the turn
	var took *redlock.Lock
	err := m.holds.Take(ctx, m.client, m.key, "", false, block, m.opts, func(ctx context.Context) (*redlock.Lock, error) {
		l, err := m.client.Acquire(ctx, m.key, m.opts.TTL)
		if err == nil { // the last success is the one held
			took = l
		}
		return l, err
	})
	if err != nil {
		return nil, err
	}
	return took, nil
}

// Resume makes this Mutex hold the lock that the Lock of value holds:
// value is that Lock's Value, kept by a process that restarted, or handed
// over by another. It takes the lock over as redlock.Client.Resume does,
// with the Mutex's TTL for renewals. Like Lock's, it is renewed
// automatically only with Options.AutoRenew. The old Lock loses the lock
// wherever Resume reaches a master. It does not wait: it fails with an
// error wrapping redlock.ErrNotObtained if fewer than a quorum hold the
// lock for value, or if this Mutex holds or seeks the lock. It blocks
// for Resume's rounds.
func (m *Mutex) Resume(ctx context.Context, value string) error {
	if err := m.check(ctx, "Resume"); err != nil {
		return err
	}
	m.holds.Holding("") // ends a hold whose lock ended, freeing the turn
	return m.holds.Take(ctx, m.client, m.key, "", false, false, m.opts, func(ctx context.Context) (*redlock.Lock, error) {
		return m.client.Resume(ctx, m.key, value, m.opts.TTL)
	})
}

// Unlock releases the lock. It returns an error wrapping
// redlock.ErrNotHeld if this Mutex does not hold it. That includes while
// a Lock or TryLock of it is under way. It also wraps redlock.ErrNotHeld
// if the lock had already expired on a quorum of masters: the critical
// section may have overlapped another holder's. It wraps
// redlock.ErrNoQuorum instead where too few masters answered in time to
// tell (see redlock.Lock.Release). Either way the Mutex is unlocked
// afterwards. After the lock was lost, Unlock sends nothing and its error
// says so, wrapping the lock's Err too. It blocks for at most one quorum
// round.
func (m *Mutex) Unlock(ctx context.Context) error {
	if err := m.check(ctx, "Unlock"); err != nil {
		return err
	}
	l, t, lost := m.holds.Drop()
	if lost != nil {
		return retry.Lost("release", m.key, "this Mutex", lost)
	}
	if l == nil {
		return fmt.Errorf("%w: release %s: this Mutex does not hold it", redlock.ErrNotHeld, clip.Quote(m.key))
	}
	// The Mutex is free for its other goroutines as soon as the release
	// hands the lock on.
	return retry.Release(ctx, l, t)
}

// Extend renews the lock for another TTL from now. It returns an error
// wrapping redlock.ErrNotHeld if this Mutex does not hold the lock, or if
// it was lost. The Mutex is then unlocked. It returns one wrapping
// redlock.ErrNoQuorum where too few masters answered in time (see
// redlock.Lock.Extend). It blocks for at most one quorum round.
func (m *Mutex) Extend(ctx context.Context) error {
	if err := m.check(ctx, "Extend"); err != nil {
		return err
	}
	l := m.Current()
	if l == nil {
		return fmt.Errorf("%w: extend %s: this Mutex does not hold it", redlock.ErrNotHeld, clip.Quote(m.key))
	}
	return l.Extend(ctx, m.opts.TTL)
}

// Current returns the lock this Mutex holds, or nil. Its Token is the
// fencing token to hand to the protected resource. Its Done, Err and
// Context tell when the lock is lost; Until tells when it runs out. After
// a loss it returns the lost lock until an Unlock reports the loss. It
// does so even where a Lock took the lock anew.
func (m *Mutex) Current() *redlock.Lock { return m.holds.Get("") }
