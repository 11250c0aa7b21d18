package quorum

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/redis/go-redis/v9"
)

// Cleanup is a script that removes what this client may have left on a
// master. It is the undo of a failed acquire, the last release, or the
// drop of a late agreement. Each one only deletes a key that holds this
// Lock's value and nonce. Or it leaves a marker for this Lock's nonce
// that expires with its TTL. So sending it again, or late, is harmless.
type Cleanup struct {
	Script *redis.Script
	Keys   pipeline.Keys
	Args   []any
}

// Bounds of the cleanup retries of one master.
const (
	maxPendingCleanups = 10_000 // queued; more are dropped (their keys expire with their TTL)
	MaxErrorReplies    = 32     // error replies to one cleanup; more drop it
	cleanupBatch       = 16     // retries run at once on a master that answers
)

// MaxCleanupDelay is the longest wait after a failed retry, unless
// MasterTimeout is longer. It is a variable for tests.
var MaxCleanupDelay = time.Second

// cleaner holds the cleanups that got no answer from one master. While
// any is pending, one goroutine (runCleaner) retries them there, oldest
// first. So a master that is down gets one try at a time. One that comes
// back is cleaned up at once.
type cleaner struct {
	// mu guards queue and running.
	mu      sync.Mutex
	queue   []pendingCleanup
	running bool // runCleaner is running
}

type pendingCleanup struct {
	Cleanup
	ctx   context.Context // the caller's values, without its cancellation
	until time.Time       // a key set before it was queued has expired by then
	// errorReplies counts the error replies it got. One that will not
	// change (WRONGTYPE, READONLY) would otherwise be retried until then.
	errorReplies int
}

// CleanUp runs cu on master i once, with a fresh context bounded by
// MasterTimeout. It queues cu for retries if the master gave no answer. A
// key it removes expires at most keyTTL after now. It blocks for the try.
func (e *Engine) CleanUp(ctx context.Context, i int, cu Cleanup, keyTTL time.Duration) {
	if e.tryCleanup(ctx, i, cu, true) != nil {
		e.RetryLater(ctx, i, cu, keyTTL)
	}
}

// tryCleanup runs cu on master i once, with a fresh context. It never
// takes ctx's cancellation, as the caller may have gone; only its values
// are kept. The first try goes through the master's pipeline, which sends
// it whatever happens. It waits MasterTimeout for it. A retry goes
// straight to the client, bounded by LateCallFactor times that. Both stop
// waiting when Close gives up. The first try sends EVALSHA or FCALL, with
// their fallbacks. A retry sends EVAL: the master may have lost its
// scripts, and answered too late for the fallback. tryCleanup returns nil
// if the script ran and replied. Else it returns the error, an error
// reply included: a script error, or a proxy's reply.
func (e *Engine) tryCleanup(ctx context.Context, i int, cu Cleanup, first bool) error {
	abandon := e.cfg.Work.Abandoned()
	if err := abandon.Err(); err != nil {
		return err
	}
	m := &e.masters[i]
	timeout := e.cfg.MasterTimeout
	if !first {
		timeout *= LateCallFactor
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	stop := context.AfterFunc(abandon, cancel)
	defer stop()
	if first {
		_, err := m.Pipe.Run(ctx, cu.Script, cu.Keys, cu.Args, true)
		return err
	}
	return cu.Script.Eval(ctx, m.Client, cu.Keys.Names, cu.Args...).Err()
}

// RetryLater queues cu for retries on master i, which gave no answer: an
// error, a timeout. Retries go on until the master answers, or until a
// key cu removes has expired. Such a key expires at most keyTTL after
// now. RetryLater does not block. The caller must hold a count of the
// Work, such as a call of a round. So closing waits for the retries too.
func (e *Engine) RetryLater(ctx context.Context, i int, cu Cleanup, keyTTL time.Duration) {
	if e.cfg.Work.Abandoned().Err() != nil {
		return
	}
	cl := &e.cleaners[i]
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.queue) >= maxPendingCleanups {
		return
	}
	cl.queue = append(cl.queue, pendingCleanup{cu, context.WithoutCancel(ctx), time.Now().Add(keyTTL), 0})
	if !cl.running {
		cl.running = true
		e.cfg.Work.EnterHeld(1)
		go e.runCleaner(i)
	}
}

// runCleaner retries the queued cleanups of master i until none is left.
// It tries the oldest one alone. Once that succeeds it goes on at once
// with up to cleanupBatch at a time, in parallel. A master that was
// stalled may have thousands waiting. After a failure it moves the failed
// ones to the back and waits. The wait starts at MasterTimeout and
// doubles up to MaxCleanupDelay, with jitter. Then it tries one again. A
// cleanup is dropped once its key would have expired, however many tries
// that takes. It is also dropped after MaxErrorReplies error replies.
// Once closing has started, runCleaner stops waiting once. When closing
// gives up, it drops the queue and returns.
func (e *Engine) runCleaner(i int) {
	w := e.cfg.Work
	defer w.Leave(1)
	cl := &e.cleaners[i]
	delay, maxDelay := e.cfg.MasterTimeout, max(e.cfg.MasterTimeout, MaxCleanupDelay)
	closing, abandon := w.Shutdown(), w.Abandoned()
	errs := make([]error, cleanupBatch)
	for n := 1; ; { // the cleanup that started it has just failed
		if n == 1 {
			t := time.NewTimer(delay/2 + rand.N(delay/2+1))
			select {
			case <-t.C:
			case <-closing:
				t.Stop()
				closing = nil
			case <-abandon.Done():
				t.Stop()
				cl.clear()
				return
			}
			delay = min(2*delay, maxDelay)
		}
		batch := cl.pop(n)
		if len(batch) == 0 {
			return
		}
		var wg sync.WaitGroup
		for j := range batch {
			wg.Go(func() { errs[j] = e.tryCleanup(batch[j].ctx, i, batch[j].Cleanup, false) })
		}
		wg.Wait()
		n = cleanupBatch
		for j, p := range batch {
			if errs[j] == nil {
				continue
			}
			n = 1
			if isReply(errs[j]) {
				p.errorReplies++
			}
			if p.errorReplies < MaxErrorReplies {
				cl.push(p)
			}
		}
		if n > 1 {
			delay = e.cfg.MasterTimeout
		}
	}
}

// pop returns up to n of the oldest cleanups whose keys may still exist.
// It drops the others. If none is left, it marks the cleaner as stopped.
func (cl *cleaner) pop(n int) []pendingCleanup {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	now := time.Now()
	var batch []pendingCleanup
	for len(cl.queue) > 0 && len(batch) < n {
		p := cl.queue[0]
		cl.queue[0] = pendingCleanup{} // no reference kept from the array
		cl.queue = cl.queue[1:]
		if now.Before(p.until) {
			batch = append(batch, p)
		}
	}
	if len(batch) == 0 {
		cl.queue, cl.running = nil, false
	}
	return batch
}

func (cl *cleaner) push(p pendingCleanup) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.queue = append(cl.queue, p)
}

// clear drops every queued cleanup and marks the cleaner as stopped.
func (cl *cleaner) clear() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.queue, cl.running = nil, false
}

// isReply reports whether err is an error reply of the server.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// Retrying reports whether cleanups are queued for retries on master i.
func (e *Engine) Retrying(i int) bool {
	cl := &e.cleaners[i]
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.running
}
