package link

import (
	"context"
	"fmt"
	"time"
)

// Semaphores is what package redlock lends package semaphore: C is
// *redlock.Client and L is *redlock.Lock. A permit is a Lock of its own
// mode (see "@permits" in scripts.lua). Its methods are safe for
// concurrent use.
type Semaphores[C, L any] interface {
	// AcquirePermit takes the permit of slot (0 <= slot < capacity) of
	// the semaphore named name for ttl, where a quorum of masters admit it:
	// each holds no live permit of that slot, and fewer than capacity
	// live permits. It blocks for one round, and fails as Client.Acquire
	// does. After a refusal, next is a slot the masters named free, where
	// enough of them did that a quorum may admit it. Else next is -1: no
	// slot would be admitted now.
	AcquirePermit(ctx context.Context, client C, name string, capacity, slot int, ttl time.Duration) (l L, next int, err error)

	// NewWaker watches the releases of permits of the semaphore named
	// name on client: each release wakes one of the client's waiters for
	// it, in turn. A release seen at or after since (zero: none) wakes it
	// at once.
	NewWaker(client C, name string, since time.Time) SlotWaker

	// PermitsKey returns the key that holds the permits of the semaphore
	// named name under prefix.
	PermitsKey(prefix, name string) string
}

// SlotWaker is the Waker of a semaphore's releases. Freed returns the
// slot of the permit whose release woke it last, or -1 for none.
type SlotWaker interface {
	Waker
	Freed() int
}

// semaphores is the Semaphores that RegisterSemaphores stored.
var semaphores any

// RegisterSemaphores stores h; package redlock calls it once, when it
// initializes.
func RegisterSemaphores[C, L any](h Semaphores[C, L]) {
	if semaphores != nil {
		panic("link: Semaphores registered twice")
	}
	semaphores = h
}

// GetSemaphores returns the Semaphores that RegisterSemaphores stored, of
// the same types.
func GetSemaphores[C, L any]() Semaphores[C, L] {
	h, ok := semaphores.(Semaphores[C, L])
	if !ok {
		var c C
		var l L
		panic(fmt.Sprintf("link: no Semaphores[%T, %T] registered", c, l))
	}
	return h
}
