package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/semaphore"
)

// Capacity is the permits every library's semaphore hands out at once.
const Capacity = 4

// Backoff bounds of the emulated semaphores between two passes over
// their slots: each delay doubles up to the maximum, drawn at random from
// its upper half. They have no wake on release: a short delay is their
// best case.
const (
	minSlotBackoff = time.Millisecond
	maxSlotBackoff = 8 * time.Millisecond
)

// NewSemaphore returns the named library's counting semaphore of
// Capacity on the given masters, as a Locker. Its Worker makes one
// attempt per Lock at a permit of the semaphore named by the key; its
// Contenders wait for a permit of theirs. Key names the semaphore.
//
// Redlock is package semaphore. Redsync and redislock have none:
// Capacity slot locks "key:0" ... emulate one. An attempt tries each
// slot once, from one at random; a Contender sleeps a short backoff
// between attempts. Redislock takes exactly one master.
func NewSemaphore(lib string, masters []*redis.Client) (Locker, error) {
	switch lib {
	case Redlock:
		c, err := redlock.New(masters, nil)
		if err != nil {
			return nil, err
		}
		return &redlockSemaphore{c: c}, nil
	case Redsync:
		pools := make([]redsyncredis.Pool, len(masters))
		for i, m := range masters {
			pools[i] = goredis.NewPool(m)
		}
		rs := redsync.New(pools...)
		return slotSemaphore(func(ctx context.Context, key string) (func(context.Context) error, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(TTL), redsync.WithTries(1))
			if err := m.TryLockContext(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if !ok && err == nil {
					err = errors.New("redsync: unlock: no quorum")
				}
				return err
			}, nil
		}), nil
	case Redislock:
		if len(masters) != 1 {
			return nil, fmt.Errorf("redislock: %d masters, want 1", len(masters))
		}
		c := redislock.New(masters[0])
		return slotSemaphore(func(ctx context.Context, key string) (func(context.Context) error, error) {
			l, err := c.Obtain(ctx, key, TTL, nil)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}), nil
	}
	return nil, fmt.Errorf("no semaphore for library %q", lib)
}

// --- redlock: package semaphore ---

type redlockSemaphore struct{ c *redlock.Client }

func (r *redlockSemaphore) Worker() Worker { return &permitWorker{c: r.c} }

func (r *redlockSemaphore) Contender(key string) (Worker, error) {
	s, err := semaphore.New(r.c, key, &semaphore.Options{TTL: TTL})
	if err != nil {
		return nil, err
	}
	return &permitWorker{c: r.c, s: s}, nil
}

func (r *redlockSemaphore) Close() error { return r.c.Close() }

// permitWorker holds a permit; with s it waits for one (Acquire), else
// it makes one attempt on the key's semaphore (TryAcquire).
type permitWorker struct {
	c *redlock.Client
	s *semaphore.Semaphore
	l *redlock.Lock
}

func (w *permitWorker) Lock(ctx context.Context, key string) error {
	if w.s != nil {
		l, err := w.s.Acquire(ctx, Capacity)
		w.l = l
		return err
	}
	s, err := semaphore.New(w.c, key, &semaphore.Options{TTL: TTL})
	if err != nil {
		return err
	}
	w.l, err = s.TryAcquire(ctx, Capacity)
	return err
}

func (w *permitWorker) Unlock(ctx context.Context) error {
	if w.l == nil {
		return errors.New("redlock: no permit")
	}
	err := w.l.Release(ctx)
	w.l = nil
	return err
}

// --- redsync and redislock: slot locks ---

// slotSemaphore emulates a semaphore with Capacity locks, "key:0" and
// on. take makes one attempt at the lock of key, and returns its release.
type slotSemaphore func(ctx context.Context, key string) (release func(context.Context) error, err error)

func (t slotSemaphore) Worker() Worker { return &slotWorker{take: t} }

func (t slotSemaphore) Contender(key string) (Worker, error) {
	return &slotWorker{take: t, key: key, wait: true}, nil
}

func (t slotSemaphore) Close() error { return nil }

type slotWorker struct {
	take    slotSemaphore
	key     string // a Contender's semaphore
	wait    bool   // a Contender
	release func(context.Context) error
}

func (w *slotWorker) Lock(ctx context.Context, key string) error {
	if !w.wait {
		return w.attempt(ctx, key)
	}
	delay := minSlotBackoff
	for {
		err := w.attempt(ctx, w.key)
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
		delay = min(2*delay, maxSlotBackoff)
	}
}

// attempt tries every slot once, from one at random.
func (w *slotWorker) attempt(ctx context.Context, key string) error {
	first := rand.N(Capacity)
	var err error
	for k := range Capacity {
		var release func(context.Context) error
		if release, err = w.take(ctx, fmt.Sprintf("%s:%d", key, (first+k)%Capacity)); err == nil {
			w.release = release
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return err
}

func (w *slotWorker) Unlock(ctx context.Context) error {
	if w.release == nil {
		return errors.New("no slot held")
	}
	err := w.release(ctx)
	w.release = nil
	return err
}
