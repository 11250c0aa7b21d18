package retry

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-redlock/redlock"
)

// Holders keeps, per owner, the lock that owner holds through one handle.
// Calls for one owner run one at a time; other owners are not held up. The
// zero value is ready; it is safe for concurrent use.
type Holders struct {
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	mu    sync.Mutex
	lock  *redlock.Lock
	users int // calls using this holder; guarded by Holders.mu
}

// With runs f on the owner's lock slot (nil when the owner holds nothing
// here) while no other call for the same owner runs.
func (h *Holders) With(owner string, f func(lock **redlock.Lock) error) error {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*holder{}
	}
	o := h.m[owner]
	if o == nil {
		o = &holder{}
		h.m[owner] = o
	}
	o.users++
	h.mu.Unlock()

	o.mu.Lock()
	err := f(&o.lock)
	empty := o.lock == nil
	o.mu.Unlock()

	h.mu.Lock()
	o.users--
	if o.users == 0 && empty {
		delete(h.m, owner)
	}
	h.mu.Unlock()
	return err
}

// Get returns the lock the owner holds here, or nil.
func (h *Holders) Get(owner string) *redlock.Lock {
	var l *redlock.Lock
	_ = h.With(owner, func(lock **redlock.Lock) error {
		l = *lock
		return nil
	})
	return l
}

// Take adds a hold for owner: it re-enters the lock the owner holds here,
// else calls try once, or through Wait when block. A new lock is renewed
// automatically with opts.AutoRenew.
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	return h.With(owner, func(lock **redlock.Lock) error {
		if *lock != nil {
			return (*lock).Reenter(ctx)
		}
		var err error
		if block {
			*lock, err = Wait(ctx, c, key, wakeAll, opts, try)
		} else if *lock, err = try(ctx); err == nil && opts.AutoRenew {
			(*lock).AutoRenew()
		}
		return err
	})
}

// Release removes one of owner's holds; it forgets the lock after the last.
// It returns an error wrapping redlock.ErrNotHeld if owner holds nothing
// here; what names the lock in that error.
func (h *Holders) Release(ctx context.Context, owner, what string) error {
	return h.With(owner, func(lock **redlock.Lock) error {
		l := *lock
		if l == nil {
			return fmt.Errorf("%w: %s is not held by owner %q", redlock.ErrNotHeld, what, owner)
		}
		err := l.Release(ctx)
		if l.Holds() == 0 {
			*lock = nil
		}
		return err
	})
}
