package redlock

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
)

// callers are the goroutines that run the rounds' calls to masters. A
// caller that has run a call waits for the next one instead of exiting,
// while fewer than maxIdleCallers per master wait: a goroutine started per
// call grows its stack through go-redis's call path every time
// (runtime.copystack was a tenth of the client's CPU from one goroutine on
// five masters). They wait on a plain channel receive, which costs less
// than a select with a timer, so they end only with Close.
type callers struct {
	calls   chan callTask // unbuffered: a send succeeds only if a caller waits
	closed  sync.Once     // closes calls
	maxIdle int32         // the most callers that wait at once
	idle    atomic.Int32  // callers waiting, or about to
	wg      sync.WaitGroup

	started atomic.Int64 // callers started, for tests
	alive   atomic.Int32 // callers not ended, for tests
}

type callTask struct {
	ctx context.Context
	r   *round
	i   int
}

// maxIdleCallers bounds the callers waiting per master: 16 goroutines, of
// a few KiB of stack each.
const maxIdleCallers = 16

func newCallers(masters int) callers {
	return callers{calls: make(chan callTask), maxIdle: int32(maxIdleCallers * masters)}
}

// goCall runs c.call(ctx, r, i) on a waiting caller, or on a new one. The
// call must be counted in c.inflight, which Close waits for before it
// ends the callers.
func (c *Client) goCall(ctx context.Context, r *round, i int) {
	t := callTask{ctx, r, i}
	select {
	case c.callers.calls <- t:
	default:
		c.callers.wg.Add(1)
		go c.caller(t)
	}
}

// caller runs t, then each call it is handed, until too many callers wait
// or endCallers.
func (c *Client) caller(t callTask) {
	cs := &c.callers
	defer cs.wg.Done()
	cs.started.Add(1)
	cs.alive.Add(1)
	defer cs.alive.Add(-1)
	for {
		c.call(t.ctx, t.r, t.i)
		if cs.idle.Add(1) > cs.maxIdle {
			cs.idle.Add(-1)
			return
		}
		var ok bool
		if t, ok = <-cs.calls; !ok {
			return
		}
		cs.idle.Add(-1)
		// As a goroutine started for t would have: its caller's labels,
		// none where it has none.
		pprof.SetGoroutineLabels(t.ctx)
	}
}

// endCallers ends the callers and waits for them. No round may be under
// way: Close calls it once no call is in flight and none can start.
func (c *Client) endCallers() {
	c.callers.closed.Do(func() { close(c.callers.calls) })
	c.callers.wg.Wait()
}
