package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Stages of a Client's life, in order.
const (
	gateOpen    uint32 = iota
	gateClosing        // Close has begun: live locks end, none is tracked or renewed
	gateClosed         // no work enters: operations return ErrClosed
)

// gate is a Client's lifecycle. It is open, then closing, then closed.
// At closing, Close ends the live locks and their renewals. At closed, no
// call to the masters starts, and Close waits for those that did. The
// step to closing is taken under locksMu, which track holds. So no lock
// is tracked after it. The renewer adds no renewal once closing, and
// Close stops it after the step. The step to closed is taken under mu,
// which enter holds. So no call is counted after it.
type gate struct {
	state atomic.Uint32 // gateOpen, gateClosing or gateClosed; only forward

	// locksMu guards locks.
	locksMu  sync.Mutex         // guards locks and the step to closing
	locks    map[*Lock]struct{} // live locks with a lost-lock signal (see Lock.signal)
	renewals sync.WaitGroup     // the renewer's goroutine and its batches

	mu       sync.RWMutex   // guards the step to closed against enter
	inflight sync.WaitGroup // calls to masters, and the work they leave

	shutdown chan struct{}      // closed at closed: pending cleanup retries at once
	abandon  context.Context    // cancelled when Close stops waiting for cleanup
	giveUp   context.CancelFunc // cancels abandon
}

// init readies an open gate.
func (g *gate) init() {
	g.shutdown = make(chan struct{})
	g.abandon, g.giveUp = context.WithCancel(context.Background())
}

// closing reports whether Close has begun.
func (g *gate) closing() bool { return g.state.Load() >= gateClosing }

// closed reports whether work is refused.
func (g *gate) closed() bool { return g.state.Load() == gateClosed }

// enter counts n calls that Close waits for. Once the Client is closed
// it counts nothing and reports false. Each call ends with leave.
func (g *gate) enter(n int) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed() {
		return false
	}
	g.inflight.Add(n)
	return true
}

// enterHeld counts n more calls, whatever the stage. The caller must hold
// a count of its own: Close is then still waiting.
func (g *gate) enterHeld(n int) { g.inflight.Add(n) }

// leave ends n counted calls.
func (g *gate) leave(n int) { g.inflight.Add(-n) }

// beginClosing steps to closing and returns the live locks, which the
// caller ends; none is tracked from then on.
func (g *gate) beginClosing() map[*Lock]struct{} {
	g.locksMu.Lock()
	defer g.locksMu.Unlock()
	g.state.CompareAndSwap(gateOpen, gateClosing)
	locks := g.locks
	g.locks = nil
	return locks
}

// close steps to closed, once closing. No work enters from then on.
// Pending cleanup retries at once.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state.Swap(gateClosed) != gateClosed {
		close(g.shutdown)
	}
}

// drain waits for the counted work, once closed. If grace fires first,
// it gives up. Pending cleanup is then dropped (abandon), and abort drops
// the calls still queued. drain still waits for what is in flight. It
// reports whether the work ended within grace.
func (g *gate) drain(grace <-chan time.Time, abort func()) bool {
	done := make(chan struct{})
	go func() {
		g.inflight.Wait()
		close(done)
	}()
	inTime := true
	select {
	case <-done:
	case <-grace:
		g.giveUp()
		abort()
		<-done
		inTime = false
	}
	g.giveUp() // releases the context; nothing is pending
	return inTime
}

// Enter, EnterHeld, Leave, Shutdown and Abandoned make the gate the
// engine's quorum.Work.
func (g *gate) Enter(n int) bool           { return g.enter(n) }
func (g *gate) EnterHeld(n int)            { g.enterHeld(n) }
func (g *gate) Leave(n int)                { g.leave(n) }
func (g *gate) Shutdown() <-chan struct{}  { return g.shutdown }
func (g *gate) Abandoned() context.Context { return g.abandon }
