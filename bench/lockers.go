// Package bench compares redlock with other Redis lock libraries: go-redsync
// (Redlock on N masters) and bsm/redislock (one node). The benchmarks live in
// this package's tests; cmd/benchreport runs them and writes BENCHMARKS.md.
//
// This is a separate module so that the peers stay out of the library's
// go.mod. Everything here is for measurement only.
package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rueidisadapter"
)

// TTL is the lock TTL every library gets.
const TTL = 10 * time.Second

// NewRedisClient returns a go-redis client for addr with the settings every
// library gets in the benchmarks (those of integration.Cluster.Clients):
// context deadlines honoured, 200ms dial/read/write timeouts, no retries,
// no CLIENT SETINFO, no maintenance notifications. It is safe for
// concurrent use; the caller closes it.
func NewRedisClient(addr string) *redis.Client {
	return redis.NewClient(integration.MasterOptions(addr))
}

// NewRedisClients returns NewRedisClient for every address.
func NewRedisClients(addrs []string) []*redis.Client {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = NewRedisClient(a)
	}
	return cs
}

// CloseAll closes every client and joins the errors.
func CloseAll(cs []*redis.Client) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Worker locks and unlocks one key at a time. A Worker is used by one
// goroutine at a time: it is not safe for concurrent use (redsync's Mutex
// is not).
type Worker interface {
	// Lock takes the lock on key. Workers made by Locker.Worker try once;
	// those made by Locker.Contender retry with the library's own retry
	// policy until they hold the lock, the policy gives up, or ctx ends. A
	// Contender always locks the key it was made for and ignores key.
	Lock(ctx context.Context, key string) error
	// Unlock releases the lock taken by the last successful Lock.
	Unlock(ctx context.Context) error
}

// Locker is one library configured on a set of masters. It is safe for
// concurrent use; its Workers are not.
type Locker interface {
	// Worker returns a Worker that makes one attempt per Lock, on any key.
	Worker() Worker
	// Contender returns a Worker for key whose Lock retries with the
	// library's default retry settings.
	Contender(key string) (Worker, error)
	// Close waits for the library's background calls, if it has any.
	Close() error
}

// Library names, as the benchmarks label them.
const (
	Redlock   = "redlock"
	Redsync   = "redsync"
	Redislock = "redislock"
	// RedlockRueidis is redlock on rueidis clients (its own pipelining)
	// through package rueidisadapter.
	RedlockRueidis = "redlock+rueidis"
	// RedlockUnfenced is redlock without fencing tokens
	// (Options.NoFencing), as redsync and redislock are.
	RedlockUnfenced = "redlock-unfenced"
)

// NewLocker returns the named library on the given masters, all with TTL.
// Redislock takes exactly one master.
func NewLocker(lib string, masters []*redis.Client) (Locker, error) {
	switch lib {
	case Redlock, RedlockUnfenced:
		c, err := redlock.New(masters, &redlock.Options{NoFencing: lib == RedlockUnfenced})
		if err != nil {
			return nil, err
		}
		return &redlockLocker{c: c}, nil
	case RedlockRueidis:
		var scripters []redis.Scripter
		var closers []func()
		closeAll := func() {
			for _, c := range closers {
				c()
			}
		}
		for _, m := range masters {
			rc, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress: []string{m.Options().Addr}, ForceSingleClient: true, DisableCache: true,
			})
			if err != nil {
				closeAll()
				return nil, err
			}
			closers = append(closers, rc.Close)
			scripters = append(scripters, rueidisadapter.New(rc))
		}
		c, err := redlock.New(scripters, nil)
		if err != nil {
			closeAll()
			return nil, err
		}
		return &redlockLocker{c: c, close: closeAll}, nil
	case Transport:
		if len(masters) != 1 {
			return nil, fmt.Errorf("%s: %d masters, want 1", Transport, len(masters))
		}
		return newTransport(masters[0]), nil
	case Redsync:
		pools := make([]redsyncredis.Pool, len(masters))
		for i, m := range masters {
			pools[i] = goredis.NewPool(m)
		}
		return &redsyncLocker{rs: redsync.New(pools...), expiry: redsync.WithExpiry(TTL)}, nil
	case Redislock:
		if len(masters) != 1 {
			return nil, fmt.Errorf("redislock: %d masters, want 1", len(masters))
		}
		return &redislockLocker{c: redislock.New(masters[0])}, nil
	}
	return nil, fmt.Errorf("unknown library %q", lib)
}

// --- redlock ---

type redlockLocker struct {
	c     *redlock.Client
	close func() // closes the clients made for it; nil if none
}

func (r *redlockLocker) Worker() Worker { return &redlockWorker{c: r.c} }

func (r *redlockLocker) Contender(key string) (Worker, error) {
	m, err := mutex.New(r.c, key, &mutex.Options{TTL: TTL})
	if err != nil {
		return nil, err
	}
	return mutexWorker{m}, nil
}

func (r *redlockLocker) Close() error {
	err := r.c.Close()
	if r.close != nil {
		r.close()
	}
	return err
}

type redlockWorker struct {
	c *redlock.Client
	l *redlock.Lock
}

func (w *redlockWorker) Lock(ctx context.Context, key string) error {
	l, err := w.c.Acquire(ctx, key, TTL)
	w.l = l
	return err
}

func (w *redlockWorker) Unlock(ctx context.Context) error {
	if w.l == nil {
		return errors.New("redlock: not locked")
	}
	err := w.l.Release(ctx)
	w.l = nil
	return err
}

type mutexWorker struct{ m *mutex.Mutex }

func (w mutexWorker) Lock(ctx context.Context, _ string) error { return w.m.Lock(ctx) }
func (w mutexWorker) Unlock(ctx context.Context) error         { return w.m.Unlock(ctx) }

// --- redsync ---

type redsyncLocker struct {
	rs     *redsync.Redsync
	expiry redsync.Option
}

// Worker makes one attempt per Lock (TryLockContext); uncontended, that is
// what LockContext does too. A redsync Mutex is bound to its key: the
// Worker makes one per new key (as redsync's users do) and reuses it while
// the key stays the same.
func (r *redsyncLocker) Worker() Worker { return &redsyncWorker{r: r} }

// Contender keeps redsync's default retry settings (32 tries, 50-250ms
// apart); only the expiry is set, to TTL.
func (r *redsyncLocker) Contender(key string) (Worker, error) {
	return &redsyncWorker{r: r, key: key, m: r.rs.NewMutex(key, r.expiry), retry: true}, nil
}

func (r *redsyncLocker) Close() error { return nil }

type redsyncWorker struct {
	r     *redsyncLocker
	key   string
	m     *redsync.Mutex
	retry bool
}

func (w *redsyncWorker) Lock(ctx context.Context, key string) error {
	if w.retry {
		return w.m.LockContext(ctx)
	}
	if w.m == nil || key != w.key {
		w.key, w.m = key, w.r.rs.NewMutex(key, w.r.expiry)
	}
	return w.m.TryLockContext(ctx)
}

func (w *redsyncWorker) Unlock(ctx context.Context) error {
	ok, err := w.m.UnlockContext(ctx)
	if !ok && err == nil {
		err = errors.New("redsync: unlock: no quorum")
	}
	return err
}

// --- bsm/redislock ---

type redislockLocker struct{ c *redislock.Client }

func (r *redislockLocker) Worker() Worker { return &redislockWorker{c: r.c} }

// Contender retries with redislock's documented example policy, a linear
// 100ms backoff; its default is not to retry at all.
func (r *redislockLocker) Contender(key string) (Worker, error) {
	return &redislockWorker{c: r.c, key: key, opts: &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
	}}, nil
}

func (r *redislockLocker) Close() error { return nil }

type redislockWorker struct {
	c    *redislock.Client
	key  string
	opts *redislock.Options
	l    *redislock.Lock
}

func (w *redislockWorker) Lock(ctx context.Context, key string) error {
	if w.opts != nil { // a Contender
		key = w.key
	}
	l, err := w.c.Obtain(ctx, key, TTL, w.opts)
	w.l = l
	return err
}

func (w *redislockWorker) Unlock(ctx context.Context) error {
	err := w.l.Release(ctx) // a nil Lock reports ErrLockNotHeld
	w.l = nil
	return err
}
