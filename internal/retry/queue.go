package retry

import (
	"context"
	"sync"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/link"
)

// queue lets the waiters of one process for one exclusive lock take turns:
// only the one holding the turn tries, so that they do not split the
// masters' votes among themselves, and each release wakes the one waiter
// that will try. The waiter that gets the lock keeps the turn until its
// release hands the lock on (see Release), so the next one tries once the
// lock is free instead of being refused while it is held.
type queue struct {
	turn chan struct{}
	refs int // guarded by queuesMu
}

type queueKey struct {
	client *redlock.Client
	key    string
}

var (
	queuesMu sync.Mutex
	queues   = map[queueKey]*queue{}
)

// Turn is a waiter's turn among its process's waiters for an exclusive
// lock, and then its holder's. It is given up once: by Release, when the
// lock's last release hands it on, or as soon as the lock ends otherwise (lost,
// expired, its Client closed, or released without Release). A nil *Turn
// is no turn: its methods do nothing. It is safe for concurrent use.
type Turn struct {
	q     *queue
	leave func()

	mu    sync.Mutex
	given bool
	stop  func() bool // stops watching the lock's end (see keepWhile)
}

// takeTurn blocks until it is the caller's turn among this process's
// waiters and holder for key on c, or ctx ends. waited tells whether it
// had to wait.
func takeTurn(ctx context.Context, c *redlock.Client, key string) (t *Turn, waited bool, err error) {
	k := queueKey{c, key}
	queuesMu.Lock()
	q := queues[k]
	if q == nil {
		q = &queue{turn: make(chan struct{}, 1)}
		queues[k] = q
	}
	q.refs++
	queuesMu.Unlock()
	leave := func() {
		queuesMu.Lock()
		if q.refs--; q.refs == 0 {
			delete(queues, k)
		}
		queuesMu.Unlock()
	}
	select {
	case q.turn <- struct{}{}:
		return &Turn{q: q, leave: leave}, false, nil
	default:
	}
	select {
	case q.turn <- struct{}{}:
		return &Turn{q: q, leave: leave}, true, nil
	case <-ctx.Done():
		leave()
		return nil, true, ctx.Err()
	}
}

// give gives the turn up; only the first call does.
func (t *Turn) give() {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.given {
		t.mu.Unlock()
		return
	}
	t.given = true
	t.mu.Unlock()
	t.unwatch()
	<-t.q.turn
	t.leave()
}

// unwatch stops keepWhile's watch, if any.
func (t *Turn) unwatch() {
	if t == nil {
		return
	}
	t.mu.Lock()
	stop := t.stop
	t.stop = nil
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// keepWhile keeps the turn while l is held: it is given up when l ends,
// unless Release stopped watching first.
func (t *Turn) keepWhile(l *redlock.Lock) {
	if t == nil {
		return
	}
	stop := context.AfterFunc(l.Context(), t.give)
	t.mu.Lock()
	t.stop = stop
	t.mu.Unlock()
}

// Release gives up one hold of l (see redlock.Lock.Release). The last one
// gives up t, the turn l was taken with (nil: none), and runs then, if
// set, when the release hands the lock on (see link.Release), at the
// latest when Release returns: the next waiter of this process then tries
// at once, and its acquire reaches each master behind the release and
// finds the lock free, where it would have been refused while l was held.
// Another hold keeps l and t (given up when l ends), and runs then when
// Release returns: then always runs once. then must not block.
func Release(ctx context.Context, l *redlock.Lock, t *Turn, then func()) error {
	if l.Holds() > 1 || t == nil && then == nil {
		if then != nil {
			defer then()
		}
		return l.Release(ctx)
	}
	t.unwatch() // a lock that ended meanwhile gave the turn up already
	var once sync.Once
	handOff := func() {
		once.Do(func() {
			t.give()
			if then != nil {
				then()
			}
		})
	}
	defer handOff() // where nothing was sent
	return link.Release(ctx, l, handOff)
}
