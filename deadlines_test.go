package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expiry sends its name and the time when its timeouts entry expired.
type expiry struct {
	name string
	out  chan<- expired
}

type expired struct {
	name string
	at   time.Time
}

func (e *expiry) expire() { e.out <- expired{e.name, time.Now()} }

// hold keeps q's timer from firing until release, as if it were firing:
// what the test does meanwhile cannot race with it however slow the
// machine.
func hold(q *timeouts) {
	q.mu.Lock()
	q.firing = true
	q.mu.Unlock()
}

func release(q *timeouts) {
	q.mu.Lock()
	q.firing = false
	if len(q.queue) > 0 {
		q.arm(0)
	}
	q.mu.Unlock()
}

// Entries expire once each, in the order they were added, never before
// their deadline; a cancelled one never does, wherever it is in the queue.
func TestTimeoutsExpireInOrderExceptCancelled(t *testing.T) {
	q := &timeouts{after: 5 * time.Millisecond}
	out := make(chan expired, 16)
	deadlines := map[string]time.Time{}
	add := func(name string) uint64 {
		at, n := q.add(&expiry{name: name, out: out})
		deadlines[name] = at
		return n
	}
	hold(q)
	first := add("first")
	add("a")
	b := add("b")
	add("c")
	q.cancel(first)
	q.cancel(b)
	release(q)
	var got []string
	check := func() {
		e := <-out
		got = append(got, e.name)
		assert.False(t, e.at.Before(deadlines[e.name]), "%s expired before its deadline", e.name)
	}
	check()
	check()
	add("d") // the queue may have run empty: the timer is armed again
	check()
	assert.Equal(t, []string{"a", "c", "d"}, got)
	select {
	case e := <-out:
		t.Fatalf("%s expired again or after being cancelled", e.name)
	case <-time.After(20 * time.Millisecond):
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	assert.Empty(t, q.queue, "entries left behind")
}

// Entries added from many goroutines at once, half of them cancelled,
// expire exactly where not cancelled, and leave nothing queued.
func TestTimeoutsUnderConcurrentUse(t *testing.T) {
	q := &timeouts{after: time.Millisecond}
	out := make(chan expired, 1000)
	var mu sync.Mutex
	deadlines := map[string]time.Time{}
	hold(q)
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			for i := range 100 {
				name := fmt.Sprint(g, "/", i)
				at, n := q.add(&expiry{name: name, out: out})
				mu.Lock()
				deadlines[name] = at
				mu.Unlock()
				if (g+i)%2 == 0 {
					q.cancel(n)
				}
			}
		})
	}
	wg.Wait()
	release(q)
	seen := map[string]bool{}
	for range 500 {
		e := <-out
		require.False(t, e.at.Before(deadlines[e.name]), "%s expired before its deadline", e.name)
		require.False(t, seen[e.name], "%s expired twice", e.name)
		seen[e.name] = true
	}
	select {
	case <-out:
		t.Fatal("a cancelled entry expired")
	case <-time.After(20 * time.Millisecond):
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	assert.Empty(t, q.queue)
}

type ctxKey struct{}

// A round's call context keeps its parent's values, not its cancellation,
// reports its deadline, and ends at it as context.WithTimeout does, its
// children with it.
func TestCallContextEndsAtItsDeadline(t *testing.T) {
	q := &timeouts{after: 10 * time.Millisecond}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	start := time.Now()
	c := newCallContext(parent, q)
	cancelParent()
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()

	d, ok := c.Deadline()
	assert.True(t, ok)
	assert.False(t, d.Before(start.Add(q.after)), "deadline %v before its time", d)
	assert.Equal(t, "v", c.Value(ctxKey{}))
	assert.NoError(t, c.Err(), "the parent's cancellation ended it")

	<-c.Done()
	assert.False(t, time.Now().Before(d), "ended before its deadline")
	assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	assert.Equal(t, context.DeadlineExceeded, context.Cause(c))
	<-child.Done()
	assert.Equal(t, context.DeadlineExceeded, context.Cause(child))
}

// Ended before its deadline, a call context is cancelled and leaves no
// entry to expire.
func TestCallContextEnd(t *testing.T) {
	q := &timeouts{after: time.Hour}
	c := newCallContext(context.Background(), q)
	c.end()
	<-c.Done()
	assert.ErrorIs(t, c.Err(), context.Canceled)
	q.mu.Lock()
	defer q.mu.Unlock()
	require.Len(t, q.queue, 1)
	assert.Nil(t, q.queue[0].e)
}
