package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// The scripts of a fair lock's queue (see "@queue" in scripts.lua).
var (
	fairEnqueueScript = scripts.get("fair_enqueue")
	fairRenewScript   = scripts.get("fair_renew")
	fairLeaveScript   = scripts.get("fair_leave")
)

// queues is what package mutex's fair lock reaches through internal/link.
type queues struct{}

func init() { link.RegisterQueues[*Client, *Lock](queues{}) }

// queueKey is the waiters of the fair lock whose main key is k, and the
// channel its next waiter is published on.
func queueKey(k string) string { return k + ":q" }

func (queues) QueueKeys(prefix, name string) []string {
	q := queueKey(lockKey(prefix + name))
	return []string{q, q + "e", q + "c"}
}

func (queues) Deadline(c *Client, start time.Time, ttl time.Duration) time.Time {
	return c.deadline(start, ttl)
}

// queueRound runs one of the queue's scripts on every master, for the
// waiter id. Its agreements count only with validity of ttl left.
func (c *Client) queueRound(ctx context.Context, name, opName string, s *quorum.Spec) (quorum.Outcome, error) {
	if err := c.check(); err != nil {
		return quorum.Outcome{}, err
	}
	if err := checkContext(ctx, opName); err != nil {
		return quorum.Outcome{}, err
	}
	if name == "" {
		return quorum.Outcome{}, invalidf("%s: empty key", opName)
	}
	s.Keys = pipeline.NewKeys(lockKey(c.prefix + name))
	return c.do(ctx, &op{name: opName, key: name, sentinel: ErrNotObtained, Spec: *s})
}

func (queues) Enqueue(ctx context.Context, c *Client, name, id string, ttl time.Duration) (uint64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	ttl, err := c.checkTTL("waiter TTL", ttl)
	if err != nil {
		return 0, err
	}
	c.prepare(ctx) // as an acquire's: the round's validity starts after setup
	// A master that restarted empty stays out for the longest TTL asked
	// for, the waiters' too: its counter restarted.
	for old := c.longest.Load(); int64(ttl) > old && !c.longest.CompareAndSwap(old, int64(ttl)); old = c.longest.Load() {
	}
	leave := []any{id, ttl.Milliseconds()}
	res, err := c.queueRound(ctx, name, "enqueue", &quorum.Spec{
		Script: fairEnqueueScript,
		Args:   []any{id, ttl.Milliseconds()},
		TTL:    ttl,
		Undo:   &quorum.Undo{Script: fairLeaveScript, Args: leave, Mark: leave, KeyTTL: ttl},
		Policy: enqueuePolicy{},
	})
	if err != nil {
		return 0, err
	}
	ticket := uint64(res.Max)
	if res.Mixed {
		// Every later enqueue then meets a counter at least the ticket.
		if _, _, err := (queues{}).Renew(ctx, c, name, id, ticket, ttl); err != nil {
			_ = (queues{}).Leave(ctx, c, name, id, ttl)
			return 0, err
		}
	}
	return ticket, nil
}

func (queues) Renew(ctx context.Context, c *Client, name, id string, ticket uint64, ttl time.Duration) (int, time.Time, error) {
	res, err := c.queueRound(ctx, name, "queue", &quorum.Spec{
		Script: fairRenewScript,
		Args:   []any{id, ttl.Milliseconds(), strconv.FormatUint(ticket, 10)},
		TTL:    ttl,
	})
	if err != nil {
		return 0, res.Start, err
	}
	return int(res.Max - 1), res.Start, nil
}

func (queues) Leave(ctx context.Context, c *Client, name, id string, ttl time.Duration) error {
	_, err := c.queueRound(context.WithoutCancel(ctx), name, "leave", &quorum.Spec{
		Script: fairLeaveScript,
		Args:   []any{id, ttl.Milliseconds()},
		Send:   quorum.Send{Must: true},
		Lossy:  true, // a lost leave leaves the waiter until its TTL
	})
	return err
}

func (queues) Acquire(ctx context.Context, c *Client, name, id string, ticket uint64, wait, ttl time.Duration) (*Lock, int, error) {
	if err := c.check(); err != nil {
		return nil, -1, err
	}
	value, err := c.value()
	if err != nil {
		return nil, -1, err
	}
	queued := strconv.FormatUint(ticket, 10) + ":" + strconv.FormatInt(wait.Milliseconds(), 10)
	l, err := c.acquire(ctx, fairMode, name, id, c.nonce(value), ttl, extras{queued: queued})
	return l, queuedAhead(err), err
}

// queuedAhead returns 1 where the refusals in err that found a live
// waiter ahead (replyQueued) leave too few masters for a quorum, else 0;
// -1 where err is no round's. Such a master refuses until its first
// waiter changes, and each script that changes it publishes the new one,
// or holds the lock, whose release does.
func queuedAhead(err error) int {
	var q *QuorumError
	if !errors.As(err, &q) {
		return -1
	}
	if countOf(q.named, replyQueued) > len(q.Masters)-q.Quorum {
		return 1
	}
	return 0
}

func (queues) NewWaker(c *Client, name, id string) link.QueueWaker {
	if c.check() != nil {
		never := c.newWaker(name, false, time.Time{})
		return &queueWaker{next: never, freed: never}
	}
	k := lockKey(c.prefix + name)
	// Every release of an exclusive hold of the name publishes on its main
	// key, a Mutex's too. The waiter, not the release, tells whether it
	// is the one to try.
	return &queueWaker{next: c.wakerFor(queueKey(k), id), freed: c.wakerOn(k, true, time.Time{})}
}

// queueWaker is a fair lock's waiter's two wakers: its own id published
// on the queue's channel, and any release published on the lock's.
type queueWaker struct {
	next, freed *waker
	mu          sync.Mutex    // guards the fields below
	live        chan struct{} // made on first use: see Live
	stop        chan struct{} // closed by Close: ends Live's goroutine
	closed      bool
}

func (w *queueWaker) Next() <-chan struct{}  { return w.next.Wake() }
func (w *queueWaker) Freed() <-chan struct{} { return w.freed.Wake() }

// Live is closed once both watches are. Where one is not yet, a goroutine
// waits for both, until Close.
func (w *queueWaker) Live() <-chan struct{} {
	a, b := w.next.Live(), w.freed.Live()
	if a == nil || b == nil {
		return nil // never live
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live != nil {
		return w.live
	}
	w.live = make(chan struct{})
	select {
	case <-a:
		select {
		case <-b:
			close(w.live)
			return w.live
		default:
		}
	default:
	}
	if !w.closed {
		live, stop := w.live, make(chan struct{})
		w.stop = stop
		go func() {
			for _, c := range []<-chan struct{}{a, b} {
				select {
				case <-c:
				case <-stop:
					return
				}
			}
			close(live)
		}()
	}
	return w.live
}

func (w *queueWaker) Close() {
	w.mu.Lock()
	if !w.closed && w.stop != nil {
		close(w.stop)
	}
	w.closed = true
	w.mu.Unlock()
	w.next.Close()
	w.freed.Close()
}

// enqueuePolicy counts no agreement of a master in quarantine: it reaches
// a new server, whose counter may have restarted below earlier tickets.
type enqueuePolicy struct{ quorum.NoHooks }

func (enqueuePolicy) Counts(_ int, _ quorum.Answer, m quorum.MasterState) error {
	return m.Quarantine()
}
