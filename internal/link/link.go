// Package link hands packages mutex and rwmutex, and the command redlock,
// what package redlock keeps out of its public API: wake-on-release, the
// waiting writer's acquire, the release that hands the turn on, the TTL
// check and the keys of a lock. Package redlock registers them once, when
// it initializes, as Hooks of its own types; the others fetch them with
// Get of the same types.
package link

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// Hooks is what package redlock lends: C is *redlock.Client and L is
// *redlock.Lock. Its methods are safe for concurrent use.
type Hooks[C, L any] interface {
	// NewWaker watches releases of the lock named key on client. With
	// all, every release wakes it (readers may share the lock); else each
	// release wakes one of the client's other such waiters, in turn. A
	// release seen at or after since (zero: none) wakes it at once.
	NewWaker(client C, key string, all bool, since time.Time) Waker

	// AcquireWaitingWrite is Client.AcquireWrite by a writer that will
	// retry: while readers hold the lock, it keeps new readers out for
	// writeWait after each attempt.
	AcquireWaitingWrite(ctx context.Context, client C, key, owner string, ttl, writeWait time.Duration) (L, error)

	// Release is Lock.Release that, if it is the last, calls queued when
	// it hands the lock on. That is once its calls are queued on every
	// master, where that is safe and cheap: a call on the same key made
	// after that reaches each master behind the release. Else it is once
	// its round is decided. queued must not block nor use l; where
	// nothing was sent, it may not run.
	Release(ctx context.Context, l L, queued func()) error

	// CheckTTL returns an error wrapping redlock.ErrInvalidArgument, that
	// calls the TTL name, if no lock of this TTL can be obtained with
	// client's options, or, with fencing, if it is below 4*MasterTimeout.
	CheckTTL(client C, name string, ttl time.Duration) error

	// LockKeys returns the keys of the lock named name under prefix, in
	// the order of scripts.lua: the main key (also the channel releases
	// are published on), and for rw ":r", ":rn", ":ww" (not ":rh", which
	// the scripts name themselves).
	LockKeys(prefix, name string, rw bool) []string

	// ObserveWait reports to client's Observer, if any, that a blocking
	// lock call on key waited for waited and then got l (nil: none) or
	// stopped with err.
	ObserveWait(ctx context.Context, client C, key string, waited time.Duration, l L, err error)

	// ObserveAttempt tells client's Observer, if any, that a blocking
	// lock call's attempt on key could not reach a quorum, once per
	// episode. err is the attempt's error; stalled says whether the
	// previous attempts of the call are in such an episode. It returns
	// whether this attempt is: an attempt that heard a quorum ends one.
	// Without an Observer it does nothing and returns false.
	ObserveAttempt(ctx context.Context, client C, key string, err error, stalled bool) bool
}

// registered is the Hooks that Register stored, of its own type
// arguments. It is set once, before any Get.
var registered any

// Register stores h; package redlock calls it once, when it initializes.
func Register[C, L any](h Hooks[C, L]) {
	if registered != nil {
		panic("link: Hooks registered twice")
	}
	registered = h
}

// Get returns the Hooks that Register stored. The types must be those
// Register was called with; package redlock, imported by every caller,
// has registered them by the time the caller initializes.
func Get[C, L any]() Hooks[C, L] {
	h, ok := registered.(Hooks[C, L])
	if !ok {
		var c C
		var l L
		panic(fmt.Sprintf("link: no Hooks[%T, %T] registered", c, l))
	}
	return h
}

// Holder is what a master stores of the Lock that holds a lock.
type Holder struct {
	Owner, Nonce string
	Holds        int
	Token        string // "1" without fencing tokens
	Waited       bool   // an acquire was refused meanwhile: the last release publishes
}

// FormatHolder and ParseHolder write and read the value of a lock's main
// key (exclusive, reentrant or write) as scripts.lua does ("@value"):
// "holds:token:waited:holder". There holder is the nonce's length, ':',
// the nonce and the owner.
func FormatHolder(h Holder) string {
	waited := "0"
	if h.Waited {
		waited = "1"
	}
	return strconv.Itoa(h.Holds) + ":" + h.Token + ":" + waited + ":" + strconv.Itoa(len(h.Nonce)) + ":" + h.Nonce + h.Owner
}

// ParseHolder reads what FormatHolder writes; ok is false for a value not
// in that form.
func ParseHolder(v string) (h Holder, ok bool) {
	fields := strings.SplitN(v, ":", 5)
	if len(fields) != 5 || !digits(fields[0]) || !digits(fields[1]) || !digits(fields[3]) {
		return h, false
	}
	n, err := strconv.Atoi(fields[3])
	if err != nil || n > len(fields[4]) {
		return h, false
	}
	switch fields[2] {
	case "0":
	case "1":
		h.Waited = true
	default:
		return h, false
	}
	h.Holds, err = strconv.Atoi(fields[0])
	if err != nil {
		return h, false
	}
	h.Token, h.Nonce, h.Owner = fields[1], fields[4][:n], fields[4][n:]
	return h, true
}

// digits reports whether s is one or more decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
