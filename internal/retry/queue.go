package retry

import (
	"context"
	"sync"

	"github.com/go-redlock/redlock"
)

// queue lets the waiters of one process for one exclusive lock take turns:
// only the one holding the turn tries, so that they do not split the
// masters' votes among themselves, and each release wakes the one waiter
// that will try.
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

// takeTurn blocks until it is the caller's turn among this process's
// waiters for key on c, or ctx ends. The returned func gives the turn up.
func takeTurn(ctx context.Context, c *redlock.Client, key string) (func(), error) {
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
		return func() { <-q.turn; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
