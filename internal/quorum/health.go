package quorum

import (
	"context"
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

// Bounds of the wait between two probes of a silent master. It is
// MasterTimeout within them: often enough to bring a master back soon,
// seldom enough to cost nothing.
const (
	minProbeEvery = 5 * time.Millisecond
	maxProbeEvery = time.Second
)

// ErrSilent answers a call not sent to a silent master. Only calls that
// may be shed are kept back. It matches pipeline.ErrNotSent: nothing
// reached the master, so nothing needs undoing.
var ErrSilent = fmt.Errorf("%w: master silent, not waited for", pipeline.ErrNotSent)

// probeSHA is what a probe asks the master about. Any reply, even an
// error reply, shows that the master answers.
const probeSHA = "0000000000000000000000000000000000000000"

// health tells which masters have stopped answering: the silent ones. A
// round does not wait for a silent master, and does not send it the
// calls that may be shed. A silent master still counts if it answers in
// time, and never counts as agreeing without an answer. At most limit
// masters are silent at once. So a round always waits for enough masters
// to make a quorum, even when every master is slow. A probe goroutine per
// silent master asks it until it answers. So does any call's answer. It
// is safe for concurrent use.
type health struct {
	limit int           // most masters silent at once: masters - quorum; set by newHealth
	every time.Duration // between two probes; set by newHealth
	// probe asks master i, bounded by ctx. It returns nil or an error
	// reply if the master answered. Set by newHealth; tests replace it
	// before the first call.
	probe  func(ctx context.Context, i int) error
	ctx    context.Context    // of the probes; set by newHealth
	cancel context.CancelFunc // ends the probes; set by newHealth

	// misses[i] counts master i's calls in a row that got no answer in
	// time. It is written under mu, read without it on the fast path.
	misses []atomic.Int32
	silent atomic.Uint64 // bit i: master i is silent; written under mu

	mu sync.Mutex // guards the fields below, and the writes above
	// lastMiss[i] is when master i's last miss was counted. A round that
	// began before it was in flight during that stall.
	lastMiss []time.Time
	probing  uint64         // bit i: master i's probe goroutine runs
	stopped  bool           // stop was called: no probe starts
	probes   sync.WaitGroup // the probe goroutines; Add under mu
}

// newHealth returns the health of masters, a quorum of which must agree.
// A probe asks master i with ms[i].Client.
func newHealth(ms []Master, quorum int, masterTimeout time.Duration) *health {
	h := &health{
		limit:    max(len(ms)-quorum, 0),
		every:    min(max(masterTimeout, minProbeEvery), maxProbeEvery),
		misses:   make([]atomic.Int32, len(ms)),
		lastMiss: make([]time.Time, len(ms)),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.probe = func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, masterTimeout)
		defer cancel()
		return ms[i].Client.ScriptExists(ctx, probeSHA).Err()
	}
	return h
}

// silentSet returns the silent masters, bit i for master i.
func (h *health) silentSet() uint64 { return h.silent.Load() }

// isSilent reports whether master i is silent.
func (h *health) isSilent(i int) bool { return h.silent.Load()&(1<<i) != 0 }

// heard records that master i answered in time. The master is healthy
// again. It costs one atomic load while the master has missed nothing.
func (h *health) heard(i int) {
	if h.misses[i].Load() == 0 {
		return
	}
	h.mu.Lock()
	h.misses[i].Store(0)
	h.silent.And(^(uint64(1) << i)) // its probe sees it and ends
	h.mu.Unlock()
}

// missed records that a call to master i, of a round that began then,
// got no answer in time. Only the first miss of a stall counts: a round
// that began before the last miss counted was in flight during it. After
// SilentAfter stalls in a row, the master is silent, unless limit
// masters are silent already. A master marked silent gets a probe
// goroutine.
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
	if n < SilentAfter || set&bit != 0 || bits.OnesCount64(set) >= h.limit || h.stopped {
		return
	}
	h.silent.Store(set | bit)
	if h.probing&bit == 0 {
		h.probing |= bit
		h.probes.Add(1)
		go h.probeLoop(i)
	}
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

// probeLoop asks master i every h.every until it answers, or it is no
// longer silent, or stop is called.
func (h *health) probeLoop(i int) {
	defer h.probes.Done()
	t := time.NewTimer(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
		case <-t.C:
			if h.isSilent(i) && answered(h.probe(h.ctx, i)) && h.ctx.Err() == nil {
				h.heard(i)
			}
		}
		h.mu.Lock()
		if h.silent.Load()&(1<<i) == 0 || h.stopped {
			h.probing &^= 1 << i
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		t.Reset(h.every)
	}
}

// stop ends the probes and waits for them. A probe in flight is cut off.
// No probe starts afterwards.
func (h *health) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	h.probes.Wait()
}
