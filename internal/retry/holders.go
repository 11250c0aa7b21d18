package retry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-redlock/redlock"
)

// Holders keeps, per owner, the lock that owner holds through one handle.
// Changes for one owner run one at a time (a blocked Lock holds up only
// its own owner); reads never wait. The zero value is ready; it is safe
// for concurrent use.
type Holders struct {
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	mu    sync.Mutex // serializes changes
	lock  atomic.Pointer[redlock.Lock]
	users int // calls using this holder; guarded by Holders.mu
}

// with runs f with the owner's lock (nil when the owner holds nothing
// here) while no other change for the same owner runs, and stores the
// lock f returns.
func (h *Holders) with(owner string, f func(*redlock.Lock) (*redlock.Lock, error)) error {
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
	l, err := f(o.lock.Load())
	o.lock.Store(l)
	o.mu.Unlock()

	h.mu.Lock()
	// Another call for the owner may have stored a lock since: look again.
	if o.users--; o.users == 0 && o.lock.Load() == nil {
		delete(h.m, owner)
	}
	h.mu.Unlock()
	return err
}

// Get returns the lock the owner holds here, or nil. It does not wait.
func (h *Holders) Get(owner string) *redlock.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.m[owner]; o != nil {
		return o.lock.Load()
	}
	return nil
}

// Take adds a hold for owner: it re-enters the lock the owner holds here,
// else calls try once, or through Wait when block. A new lock is renewed
// automatically with opts.AutoRenew.
func (h *Holders) Take(ctx context.Context, c *redlock.Client, key, owner string, wakeAll, block bool, opts Options,
	try func(context.Context) (*redlock.Lock, error)) error {
	return h.with(owner, func(l *redlock.Lock) (*redlock.Lock, error) {
		if l != nil {
			return l, l.Reenter(ctx)
		}
		if block {
			return Wait(ctx, c, key, wakeAll, opts, try)
		}
		l, err := try(ctx)
		if err == nil && opts.AutoRenew {
			l.AutoRenew()
		}
		return l, err
	})
}

// Release removes one of owner's holds; it forgets the lock after the last.
// It returns an error wrapping redlock.ErrNotHeld if owner holds nothing
// here; op and key name the call in that error.
func (h *Holders) Release(ctx context.Context, owner, op, key string) error {
	return h.with(owner, func(l *redlock.Lock) (*redlock.Lock, error) {
		if l == nil {
			return nil, fmt.Errorf("%w: %s %q: owner %q holds nothing here", redlock.ErrNotHeld, op, key, owner)
		}
		err := l.Release(ctx)
		if l.Holds() == 0 {
			l = nil
		}
		return l, err
	})
}

// Drop forgets the lock owner holds here and returns it, or nil.
func (h *Holders) Drop(owner string) *redlock.Lock {
	var dropped *redlock.Lock
	_ = h.with(owner, func(l *redlock.Lock) (*redlock.Lock, error) {
		dropped = l
		return nil, nil
	})
	return dropped
}
