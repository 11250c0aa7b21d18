package quorum

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

// receive returns the next expiry, or fails the test if none comes within
// 10s: the entries of these tests wait milliseconds.
func receive(t *testing.T, out <-chan expired) expired {
	t.Helper()
	select {
	case e := <-out:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no entry expired within 10s")
		return expired{}
	}
}

// ended fails the test unless ctx ends within 10s.
func ended(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end within 10s")
	}
}

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
	if q.first < len(q.queue) {
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
		e := receive(t, out)
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

// Cancelled entries at the head of the queue are dropped at once, not when
// the timer fires (all but the last: only fire empties the queue, so that
// add never arms the timer while a fire is due): rounds that end in time
// leave about as many entries queued as are pending, however long the
// wait (four MasterTimeouts of a client with a long one).
func TestTimeoutsDropCancelledEntriesAtOnce(t *testing.T) {
	q := &timeouts{after: time.Hour}
	t.Cleanup(func() {
		q.mu.Lock()
		q.timer.Stop()
		q.mu.Unlock()
	})
	out := make(chan expired, 1)
	queued := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.queue) - q.first
	}
	ns := make([]uint64, 1000)
	for i := range ns {
		_, ns[i] = q.add(&expiry{name: fmt.Sprint(i), out: out})
	}
	for _, n := range ns[1:] {
		q.cancel(n)
	}
	assert.Equal(t, len(ns), queued(), "cancelled entries behind a pending one wait for it")
	q.cancel(ns[0])
	assert.Equal(t, 1, queued(), "the head and the cancelled entries behind it are dropped, but for the last (only fire empties the queue)")
	for range 10000 {
		_, n := q.add(&expiry{out: out})
		q.cancel(n)
	}
	assert.Equal(t, 1, queued(), "rounds that end in time leave one entry queued")

	// An entry still pending expires in time after those before it were dropped.
	q2 := &timeouts{after: 5 * time.Millisecond}
	_, a := q2.add(&expiry{name: "a", out: out})
	at, _ := q2.add(&expiry{name: "b", out: out})
	q2.cancel(a)
	e := receive(t, out)
	assert.Equal(t, "b", e.name)
	assert.False(t, e.at.Before(at), "b expired before its deadline")
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
		e := receive(t, out)
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
// children with it (as cancelled, with the deadline as cause).
func TestCallContextEndsAtItsDeadline(t *testing.T) {
	q := &timeouts{after: 10 * time.Millisecond}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	start := time.Now()
	hold(q) // until what must come before the deadline is checked
	c := newCallContext(parent, q)
	cancelParent()
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()

	d, ok := c.Deadline()
	assert.True(t, ok)
	assert.False(t, d.Before(start.Add(q.after)), "deadline %v before its time", d)
	assert.Equal(t, "v", c.Value(ctxKey{}))
	assert.NoError(t, c.Err(), "the parent's cancellation ended it")
	release(q)

	ended(t, c)
	assert.False(t, time.Now().Before(d), "ended before its deadline")
	assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	assert.Equal(t, context.DeadlineExceeded, context.Cause(c))
	ended(t, child)
	assert.ErrorIs(t, child.Err(), context.Canceled, "a derived context ends as cancelled")
	assert.Equal(t, context.DeadlineExceeded, context.Cause(child))
}

// Ended before its deadline, a call context is cancelled and leaves no
// entry to expire.
func TestCallContextEnd(t *testing.T) {
	q := &timeouts{after: time.Hour}
	c := newCallContext(context.Background(), q)
	c.end()
	ended(t, c)
	assert.ErrorIs(t, c.Err(), context.Canceled)
	q.mu.Lock()
	defer q.mu.Unlock()
	require.Len(t, q.queue[q.first:], 1)
	assert.Nil(t, q.queue[q.first].e, "an entry left to expire")
	q.timer.Stop()
}

// Entries added and cancelled without pause, as rounds are, never hold
// back the expiry of one still pending: the timer stays armed for it.
func TestTimeoutsExpireWhileEntriesKeepComing(t *testing.T) {
	q := &timeouts{after: 20 * time.Millisecond}
	out := make(chan expired, 1)
	q.add(&expiry{name: "pending", out: out})
	stop := time.After(5 * time.Second)
	for i := 0; ; i++ {
		select {
		case <-out:
			return
		case <-stop:
			t.Fatalf("the pending entry did not expire in 5s while %d others came and went", i)
		case <-time.After(time.Millisecond):
			_, n := q.add(&expiry{name: "ended", out: out})
			q.cancel(n)
		}
	}
}

// With the timer live, entries added, cancelled and expiring all at once
// expire at most once, and exactly once where not cancelled.
func TestTimeoutsWhileFiring(t *testing.T) {
	q := &timeouts{after: 200 * time.Microsecond}
	const adds = 3000
	out := make(chan expired, adds)
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := map[string]bool{}
	for g := range 3 {
		wg.Go(func() {
			for i := range adds / 3 {
				name := fmt.Sprint(g, "/", i)
				_, n := q.add(&expiry{name: name, out: out})
				if i%3 == 0 {
					q.cancel(n) // may be too late: then it expires
					continue
				}
				mu.Lock()
				kept[name] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for left := len(kept); left > 0; {
		e := receive(t, out)
		require.False(t, seen[e.name], "%s expired twice", e.name)
		seen[e.name] = true
		if kept[e.name] {
			left--
		}
	}
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.first == len(q.queue) && !q.firing
	}, 10*time.Second, time.Millisecond, "entries left behind")
	for len(out) > 0 {
		e := <-out
		require.False(t, seen[e.name], "%s expired twice", e.name)
		seen[e.name] = true
	}
}

// TestStopKeepsPendingEntries: stop leaves the timer armed for an entry
// still pending, and an add after stop arms it again.
func TestStopKeepsPendingEntries(t *testing.T) {
	out := make(chan expired, 2)
	q := &timeouts{after: 10 * time.Millisecond}
	q.add(&expiry{"pending", out})
	q.stop()
	assert.Equal(t, "pending", receive(t, out).name)
	_, n := q.add(&expiry{"cancelled", out})
	q.cancel(n)
	q.stop()
	q.add(&expiry{"after stop", out})
	assert.Equal(t, "after stop", receive(t, out).name)
}
