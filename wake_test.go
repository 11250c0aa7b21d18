package redlock

import (
	"fmt"
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

// TestNewWakerCatchesAReleaseSinceTheAttempt: a waiter that registers
// after its failed attempt is woken at once by a release the watch saw
// since that attempt began, so that it may wait without trying again; a
// new watch is not settled (its subscriptions may not be confirmed).
func TestNewWakerCatchesAReleaseSinceTheAttempt(t *testing.T) {
	c := newFakeClient(t, fakes(1), nil)
	first := c.newWaker("k", false, time.Time{})
	defer first.Close()
	assert.False(t, first.Settled(), "no attempt to be settled for")
	before := time.Now()
	pending := c.newWaker("k", false, before)
	assert.False(t, pending.Settled(), "the subscription is not confirmed yet")
	pending.Close()
	w := first.w
	w.mu.Lock()
	w.ready = time.Now() // as follow does once every master confirmed
	w.mu.Unlock()
	early := c.newWaker("k", false, before)
	assert.False(t, early.Settled(), "confirmed after the attempt began")
	early.Close()

	attempt := time.Now()
	w.wake("r1") // a release seen while the late waiter's attempt ran
	assert.True(t, woken(first))
	late := c.newWaker("k", false, attempt)
	defer late.Close()
	assert.True(t, late.Settled())
	assert.True(t, woken(late), "a release seen since the attempt began wakes the waiter at once")

	after := time.Now()
	next := c.newWaker("k", false, after)
	defer next.Close()
	assert.True(t, next.Settled())
	assert.False(t, woken(next), "a release seen before the attempt began does not")
	w.wake("r1") // but a later copy of it does: the attempt may have met it half done
	late2 := c.newWaker("k", false, after)
	defer late2.Close()
	assert.True(t, woken(late2))
}

// TestLateCopyWakesAWaiterThatCameAfterTheFirst: a release that found no
// one-waker wakes, with its later copies, a waiter that came since; the
// waiter may have been refused on the masters the release had not reached.
func TestLateCopyWakesAWaiterThatCameAfterTheFirst(t *testing.T) {
	w := &watch{window: time.Minute}
	w.wake("a") // nobody waits yet
	late := &waker{c: make(chan struct{}, 1)}
	w.wakers = []*waker{late}
	w.wake("a") // a later copy
	assert.True(t, woken(late))
	w.wake("a")
	assert.True(t, woken(late), "and the copies after it, as for any waiter a release woke")
}

// TestGiveUpPassesTheReleaseOn: a waiter that leaves without the lock
// hands its process's turn to the next, which may be refused on the
// masters a release has not reached yet; the release's later copies wake
// that waiter. (After Close, they would not: see
// TestWatchWakesOneWaiterPerRelease.)
func TestGiveUpPassesTheReleaseOn(t *testing.T) {
	c := newFakeClient(t, fakes(1), nil)
	gone := c.newWaker("k", false, time.Time{})
	w := gone.w
	w.wake("r") // its first copy
	assert.True(t, woken(gone))
	gone.GiveUp()
	next := c.newWaker("k", false, time.Now())
	defer next.Close()
	assert.False(t, woken(next), "r was seen before next's attempt")
	w.wake("r") // a later copy
	assert.True(t, woken(next), "a later copy of a release whose waiter gave up")
}

// TestContestedRemembersTheLastRelease: a key is contested from a release
// that found another client waiting to one that found none, and the
// memory is bounded.
func TestContestedRemembersTheLastRelease(t *testing.T) {
	c := &Client{}
	assert.False(t, c.isContested("{a}"))
	c.contest("{a}", false)
	assert.Nil(t, c.contested.set, "nothing recorded until a release was waited for")
	c.contest("{a}", true)
	c.contest("{b}", true)
	assert.True(t, c.isContested("{a}"))
	c.contest("{a}", false)
	assert.False(t, c.isContested("{a}"))
	assert.True(t, c.isContested("{b}"))
	for i := range 2 * maxContested {
		c.contest(fmt.Sprint(i), true)
	}
	assert.LessOrEqual(t, len(c.contested.set), maxContested)
	assert.EqualValues(t, len(c.contested.set), c.contested.n.Load())
}
