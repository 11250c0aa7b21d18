package retry

import (
	"context"
	"sync"

	"github.com/go-redlock/redlock"
)

// Turn is one call's turn: the one token a blocking call of package mutex
// or rwmutex takes. It holds up to two places. They are taken in this
// order and given back together.
//
// The owner's place lets one change of an owner's holds run at a time. A
// Mutex's hold keeps it, so the Mutex's next Lock waits for the Unlock.
//
// The process's place lets this process's waiters for one exclusive lock
// try one at a time. So they do not split the masters' votes among
// themselves. The waiter that gets the lock keeps the place until its
// release hands the lock on. The next waiter then tries once the lock is
// free, instead of being refused while it is held.
//
// The two are distinct. An owner's re-entry or release must not wait for
// another owner's waiter, which waits for that very release. The zero
// Turn holds nothing. It is safe for concurrent use.
type Turn struct {
	mu   sync.Mutex
	busy chan struct{} // the owner's place, held while not nil; guarded by mu
	q    *queue        // the process's place, held while not nil; guarded by mu
}

// queue is the process's place for one exclusive lock.
type queue struct {
	turn chan struct{} // holds a token while a waiter or holder has the place
	key  queueKey
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

// line adds the process's place for key on c to t. It blocks until the
// place is free or ctx ends. waited tells whether it had to wait.
func (t *Turn) line(ctx context.Context, c *redlock.Client, key string) (waited bool, err error) {
	k := queueKey{c, key}
	queuesMu.Lock()
	q := queues[k]
	if q == nil {
		q = &queue{turn: make(chan struct{}, 1), key: k}
		queues[k] = q
	}
	q.refs++
	queuesMu.Unlock()
	select {
	case q.turn <- struct{}{}:
	default:
		waited = true
		select {
		case q.turn <- struct{}{}:
		case <-ctx.Done():
			q.unref()
			return true, ctx.Err()
		}
	}
	t.mu.Lock()
	t.q = q
	t.mu.Unlock()
	return waited, nil
}

// unref forgets q once no call uses it.
func (q *queue) unref() {
	queuesMu.Lock()
	if q.refs--; q.refs == 0 {
		delete(queues, q.key)
	}
	queuesMu.Unlock()
}

// leaveLine gives the process's place up, if t holds it.
func (t *Turn) leaveLine() {
	if t == nil {
		return
	}
	t.mu.Lock()
	q := t.q
	t.q = nil
	t.mu.Unlock()
	if q != nil {
		<-q.turn
		q.unref()
	}
}

// leaveOwner gives the owner's place up, if t holds it.
func (t *Turn) leaveOwner() {
	t.mu.Lock()
	busy := t.busy
	t.busy = nil
	t.mu.Unlock()
	if busy != nil {
		<-busy
	}
}

// give gives every place t holds up. Later calls do nothing. A nil *Turn
// holds nothing.
func (t *Turn) give() {
	if t == nil {
		return
	}
	t.leaveLine()
	t.leaveOwner()
}

// lined reports whether t holds the process's place.
func (t *Turn) lined() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.q != nil
}

// Release gives up one hold of l, and t, the turn l's hold kept (nil:
// none). The last hold gives t up when the release hands the lock on, at
// the latest when Release returns. The next waiter of this process then
// tries at once. Its acquire reaches each master behind the release. It
// finds the lock free there, where it would have been refused while l was
// held. l may keep another hold, taken through the Lock itself. t then
// gives the owner's place up when Release returns, and the process's once
// l ends.
func Release(ctx context.Context, l *redlock.Lock, t *Turn) error {
	if t == nil {
		return l.Release(ctx)
	}
	if l.Holds() > 1 {
		context.AfterFunc(l.Context(), t.give)
		defer t.leaveOwner()
		return l.Release(ctx)
	}
	defer t.give() // where nothing was sent
	return hooks.Release(ctx, l, t.give)
}
