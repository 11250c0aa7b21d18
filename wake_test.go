package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// woken reports whether k has a wake-up pending, and takes it.
func woken(k *waker) bool {
	select {
	case <-k.c:
		return true
	default:
		return false
	}
}

// TestWatchWakesOneWaiterPerRelease: a release wakes every all-waker and
// the next one-waker in turn; its copies from other masters wake the same
// ones again (a waiter that retried between two copies met a master the
// release had not reached yet), never another one-waker.
func TestWatchWakesOneWaiterPerRelease(t *testing.T) {
	w := &watch{window: time.Minute}
	one1, one2 := &waker{c: make(chan struct{}, 1)}, &waker{c: make(chan struct{}, 1)}
	all := &waker{c: make(chan struct{}, 1), all: true}
	w.wakers = []*waker{one1, all, one2}

	w.wake("a")
	assert.True(t, woken(one1))
	assert.True(t, woken(all))
	assert.False(t, woken(one2))

	w.wake("a") // a copy
	assert.True(t, woken(one1), "a copy wakes the same waiter again")
	assert.True(t, woken(all))
	assert.False(t, woken(one2), "a copy wakes no other waiter")

	w.wake("b") // another release
	assert.False(t, woken(one1))
	assert.True(t, woken(one2), "the next release wakes the next waiter")
	assert.True(t, woken(all))

	w.wakers = []*waker{all, one2} // one1 stopped waiting
	w.wake("a")
	assert.True(t, woken(all))
	assert.False(t, woken(one2), "a copy of a release whose waiter left wakes no other")

	w.window = 0 // the copies' window has passed: a release of its own
	w.wake("a")
	assert.True(t, woken(one2))
}
