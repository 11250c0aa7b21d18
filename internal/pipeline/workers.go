package pipeline

import (
	"sync"
	"sync/atomic"
)

// workers are the goroutines that send the calls of a client that cannot
// pipeline, one call at a time each. A worker that has sent a call waits
// for the next one instead of exiting, while fewer than maxIdleWorkers
// wait: a goroutine started per call grows its stack through go-redis's
// call path every time. They wait on a plain channel receive, which costs
// less than a select with a timer, so they end only with end.
type workers struct {
	calls   chan *call // unbuffered: a send succeeds only if a worker waits
	send    func(*call)
	maxIdle int32        // the most workers that wait at once
	idle    atomic.Int32 // workers waiting, or about to
	ended   sync.Once    // closes calls
	wg      sync.WaitGroup

	started atomic.Int64 // workers started, for tests
}

// maxIdleWorkers bounds the workers waiting per master: goroutines of a
// few KiB of stack each.
const maxIdleWorkers = 16

func (w *workers) init(send func(*call)) {
	w.calls, w.send, w.maxIdle = make(chan *call), send, maxIdleWorkers
}

// run sends c on a waiting worker, or on a new one.
func (w *workers) run(c *call) {
	select {
	case w.calls <- c:
	default:
		w.wg.Add(1)
		go w.work(c)
	}
}

// work sends c, then each call it is handed, until too many workers wait
// or end.
func (w *workers) work(c *call) {
	defer w.wg.Done()
	w.started.Add(1)
	for {
		w.send(c)
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		var ok bool
		if c, ok = <-w.calls; !ok {
			return
		}
		w.idle.Add(-1)
	}
}

// end ends the workers and waits for them. No call may be under way.
func (w *workers) end() {
	w.ended.Do(func() { close(w.calls) })
	w.wg.Wait()
}
