package link

import (
	"context"
	"fmt"
	"time"
)

// Queues is what package redlock lends the fair lock of package mutex: C
// is *redlock.Client and L is *redlock.Lock. A fair lock is the exclusive
// lock of its name plus a queue of waiters on each master (see "@queue" in
// scripts.lua). Its methods are safe for concurrent use; each blocks for
// the rounds it names.
type Queues[C, L any] interface {
	// Enqueue queues waiter id on the lock named name for ttl, and returns
	// its ticket: the largest a quorum handed out. Where those differ, a
	// second round settles the ticket on a quorum. A failed enqueue is
	// undone, and wraps redlock.ErrNotObtained.
	Enqueue(ctx context.Context, client C, name, id string, ttl time.Duration) (uint64, error)

	// Renew keeps waiter id of ticket queued for ttl more, queueing it
	// where it is missing. It returns how many live waiters the masters of
	// a quorum show ahead of it at most, and when the round started.
	Renew(ctx context.Context, client C, name, id string, ticket uint64, ttl time.Duration) (ahead int, start time.Time, err error)

	// Leave drops waiter id from the queue on every master it reaches,
	// within one round, whatever ctx says.
	Leave(ctx context.Context, client C, name, id string, ttl time.Duration) error

	// Acquire tries once to take the lock named name for waiter id, of
	// ticket and waiter TTL wait, as Client.Acquire does: a master grants
	// it only where no live waiter is ahead of the ticket. After a refusal
	// of the masters, ahead is 1 where so many found a live waiter ahead
	// that the others cannot make a quorum: none grants before one of them
	// publishes the waiter as next. Else it is 0, and -1 where err is no
	// round's refusal.
	Acquire(ctx context.Context, client C, name, id string, ticket uint64, wait, ttl time.Duration) (l L, ahead int, err error)

	// NewWaker watches what wakes waiter id of the lock named name.
	NewWaker(client C, name, id string) QueueWaker

	// Deadline is start + ttl less the client's drift allowance.
	Deadline(client C, start time.Time, ttl time.Duration) time.Time

	// QueueKeys returns the keys of the queue of the lock named name under
	// prefix: waiters, expiries, counter.
	QueueKeys(prefix, name string) []string
}

// QueueWaker is what a fair lock's waiter waits on. It is safe for
// concurrent use.
type QueueWaker interface {
	// Next receives a value when a master publishes that the waiter is
	// next in the queue.
	Next() <-chan struct{}
	// Freed receives a value when a master publishes a release of the
	// lock of the name: any exclusive hold's, a Mutex's too. It does not
	// tell whom the queue puts next.
	Freed() <-chan struct{}
	// Live is closed once every master confirmed every subscription: a
	// publication after that reaches the QueueWaker while connections
	// last. One that never can subscribe is never live.
	Live() <-chan struct{}
	// Close stops it; closing again does nothing.
	Close()
}

// queues is the Queues that RegisterQueues stored.
var queues any

// RegisterQueues stores h; package redlock calls it once, when it
// initializes.
func RegisterQueues[C, L any](h Queues[C, L]) {
	if queues != nil {
		panic("link: Queues registered twice")
	}
	queues = h
}

// GetQueues returns the Queues that RegisterQueues stored, of the same
// types.
func GetQueues[C, L any]() Queues[C, L] {
	h, ok := queues.(Queues[C, L])
	if !ok {
		var c C
		var l L
		panic(fmt.Sprintf("link: no Queues[%T, %T] registered", c, l))
	}
	return h
}
