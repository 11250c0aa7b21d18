// Package link hands packages mutex and rwmutex, and the command redlock,
// what package redlock keeps out of its public API: wake-on-release, the
// waiting writer's acquire, the release that hands the turn on, the TTL
// check and the keys of a lock. Package redlock sets every variable when
// it initializes; the values typed any are *redlock.Client and
// *redlock.Lock.
package link

import (
	"context"
	"time"
)

// Waker is woken when a lock it watches is released on a master. It is
// safe for concurrent use.
type Waker interface {
	// Wake receives a value when the waiter should retry.
	Wake() <-chan struct{}
	// Close stops the Waker of a waiter that got the lock; it is
	// idempotent, and so is GiveUp.
	Close()
	// GiveUp is Close for a waiter that leaves without the lock: the
	// releases that woke it wake the next waiter instead.
	GiveUp()
	// Settled reports whether every master had confirmed the watch's
	// subscription before the caller's last attempt began, so that a
	// release since then wakes the Waker: the caller may wait without
	// trying again first.
	Settled() bool
}

var (
	// NewWaker watches releases of the lock named key on client. With
	// all, every release wakes it (readers may share the lock); else each
	// release wakes one of the client's other such waiters, in turn. A
	// release seen at or after since (zero: none) wakes it at once.
	NewWaker func(client any, key string, all bool, since time.Time) Waker

	// AcquireWaitingWrite is Client.AcquireWrite by a writer that will
	// retry: while readers hold the lock, it keeps new readers out for
	// writeWait after each attempt. It returns a *redlock.Lock.
	AcquireWaitingWrite func(ctx context.Context, client any, key, owner string, ttl, writeWait time.Duration) (any, error)

	// Release is Lock.Release (l a *redlock.Lock) that, if it is the
	// last, calls queued when it hands the lock on: once its calls are
	// queued on every master, so that a call on the same key made after
	// that reaches each master behind the release, where that is safe
	// and cheap; else once its round is decided. queued must not block
	// nor use l; where nothing was sent, it may not run.
	Release func(ctx context.Context, l any, queued func()) error

	// CheckTTL returns an error wrapping redlock.ErrInvalidArgument, that
	// calls the TTL name, if no lock of this TTL can be obtained with
	// client's options.
	CheckTTL func(client any, name string, ttl time.Duration) error

	// LockKeys returns the keys of the lock named name under prefix, in
	// the order of scripts.lua: the main key (also the channel releases
	// are published on), and for rw ":r", ":rn", ":ww" (not ":rh", which
	// the scripts name themselves).
	LockKeys func(prefix, name string, rw bool) []string

	// ParseHolder reads the value of a lock's main key (exclusive,
	// reentrant or write); ok is false for a value not in redlock's form.
	ParseHolder func(v string) (h Holder, ok bool)

	// FormatHolder is the value of a lock's main key for h.
	FormatHolder func(h Holder) string

	// ObserveWait reports to client's Observer, if any, that a blocking
	// lock call on key waited for waited and then got l (a
	// *redlock.Lock) or stopped with err.
	ObserveWait func(ctx context.Context, client any, key string, waited time.Duration, l any, err error)
)

// Holder is what a master stores of the Lock that holds a lock.
type Holder struct {
	Owner, Nonce string
	Holds        int
	Token        string // "1" without fencing tokens
	Waited       bool   // an acquire was refused meanwhile: the last release publishes
}
