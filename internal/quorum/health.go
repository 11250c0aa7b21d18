package quorum

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// SilentAfter is how many stalls in a row make a master silent. A stall
// is a miss: a call that got no answer in time. The rounds in flight
// when a miss is counted ended in the same stall: it counts once. One
// stall is a hiccup; three are a master that stopped answering.
const SilentAfter = 3

// Bounds of the wait between two canaries of a silent master. It is
// MasterTimeout within them: often enough to bring a master back soon,
// seldom enough to cost nothing.
const (
	minCanaryEvery = 5 * time.Millisecond
	maxCanaryEvery = time.Second
)

// ErrSilent answers a call kept back from a silent master. Only calls
// that may be shed are kept back. It matches pipeline.ErrNotSent: nothing
// reached the master, so nothing needs undoing.
var ErrSilent = fmt.Errorf("%w: master silent", pipeline.ErrNotSent)

// health tells which masters have stopped answering: the silent ones. A
// round does not wait for a silent master. A silent master still counts
// if it answers in time, and never counts as agreeing without an answer.
// At most limit masters are silent at once. So a round always waits for
// enough masters to make a quorum, even when every master is slow.
//
// A silent master is sent the calls that must be sent. Of the calls that
// may be shed, it gets one per interval: a canary, an ordinary call the
// round does not wait for. Any answer in time, a canary's or another
// call's, makes it healthy again. Nothing runs in the background: a
// master that nobody calls stays silent until its next call. It is safe
// for concurrent use.
type health struct {
	limit int           // most masters silent at once: masters - quorum; set by newHealth
	every time.Duration // between two canaries of a master; set by newHealth
	epoch time.Time     // what next counts from; set by newHealth

	// misses[i] counts master i's stalls in a row. It is written under
	// mu, read without it on the fast path.
	misses []atomic.Int32
	silent atomic.Uint64 // bit i: master i is silent; written under mu
	// next[i] is when silent master i may get its next canary, as the
	// time since epoch. It is set under mu as the master turns silent.
	// The round that sends a canary claims the next one by CAS.
	next []atomic.Int64

	mu sync.Mutex // guards lastMiss, and the writes above
	// lastMiss[i] is when master i's last miss was counted. A round that
	// began before it was in flight during that stall.
	lastMiss []time.Time
}

// newHealth returns the health of n masters, a quorum of which must
// agree. A silent master gets a canary every masterTimeout, within
// bounds.
func newHealth(n, quorum int, masterTimeout time.Duration) *health {
	return &health{
		limit:    max(n-quorum, 0),
		every:    min(max(masterTimeout, minCanaryEvery), maxCanaryEvery),
		epoch:    time.Now(),
		misses:   make([]atomic.Int32, n),
		next:     make([]atomic.Int64, n),
		lastMiss: make([]time.Time, n),
	}
}

// silentSet returns the silent masters, bit i for master i.
func (h *health) silentSet() uint64 { return h.silent.Load() }

// isSilent reports whether master i is silent.
func (h *health) isSilent(i int) bool { return h.silent.Load()&(1<<i) != 0 }

// mayShed reports whether a call that may be shed can go to master i. It
// can unless the master is silent. A silent master's canary can go once
// its time came: the first caller then claims it, and the next one is
// due an interval later. It costs one atomic load for a healthy master.
func (h *health) mayShed(i int) bool {
	if !h.isSilent(i) {
		return true
	}
	next := h.next[i].Load()
	now := int64(time.Since(h.epoch))
	return now >= next && h.next[i].CompareAndSwap(next, now+int64(h.every))
}

// heard records that master i answered in time. The master is healthy
// again. It costs one atomic load while the master has missed nothing.
func (h *health) heard(i int) {
	if h.misses[i].Load() == 0 {
		return
	}
	h.mu.Lock()
	h.misses[i].Store(0)
	h.silent.And(^(uint64(1) << i))
	h.mu.Unlock()
}

// missed records that a call to master i, of a round that began then,
// got no answer in time. Only the first miss of a stall counts: a round
// that began before the last miss counted was in flight during it. After
// SilentAfter stalls in a row, the master is silent, unless limit
// masters are silent already. Its first canary is due an interval later.
func (h *health) missed(i int, began time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if began.Before(h.lastMiss[i]) {
		return // the stall counted already
	}
	h.lastMiss[i] = time.Now()
	n := h.misses[i].Load()
	if n < SilentAfter { // the count stops there: it only marks
		n = h.misses[i].Add(1)
	}
	set := h.silent.Load()
	bit := uint64(1) << i
	if n < SilentAfter || set&bit != 0 || bits.OnesCount64(set) >= h.limit {
		return
	}
	h.next[i].Store(int64(time.Since(h.epoch) + h.every))
	h.silent.Store(set | bit) // after next: a round that sees it sees next
}

// answered reports whether err, a call's outcome, came from the master.
// A reply did, even an error reply.
func answered(err error) bool {
	if err == nil {
		return true // before the As: its target escapes to the heap
	}
	var reply redis.Error
	return errors.As(err, &reply)
}
