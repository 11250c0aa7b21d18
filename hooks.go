package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/link"
)

// linked is what packages mutex and rwmutex, and the command redlock,
// reach through internal/link.
type linked struct{}

func init() { link.Register[*Client, *Lock](linked{}) }

func (linked) NewWaker(c *Client, key string, all bool, since time.Time) link.Waker {
	return c.newWaker(key, all, since)
}

func (linked) AcquireWaitingWrite(ctx context.Context, c *Client, key, owner string, ttl, writeWait time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, writeMode, key, owner, ttl, writeWait)
}

func (linked) Release(ctx context.Context, l *Lock, queued func()) error {
	return l.release(ctx, queued)
}

func (linked) CheckTTL(c *Client, name string, ttl time.Duration) error {
	if err := c.check(); err != nil {
		return err
	}
	ttl, err := c.checkTTL(name, ttl)
	if err != nil {
		return err
	}
	return c.checkFencedTTL(name, ttl) // their locks are fenced, or share a TTL with fenced ones
}

func (linked) LockKeys(prefix, name string, rw bool) []string {
	return (&mode{rw: rw}).keys(prefix, name)
}

func (linked) ObserveWait(ctx context.Context, c *Client, key string, waited time.Duration, l *Lock, err error) {
	o := c.observer
	if o == nil {
		return
	}
	e := Event{Kind: EventWaited, Key: key, Wait: waited, Err: err}
	if l != nil {
		e.Read, e.Token, e.Until = l.mode == readMode, l.token, l.Until()
	}
	o.ObserveEvent(ctx, e)
}

func (linked) ObserveAttempt(ctx context.Context, c *Client, key string, err error, stalled bool) bool {
	o := c.observer
	if o == nil { // nobody to tell: Outcome allocates for an error
		return false
	}
	switch Outcome(err) {
	case outcomeNoQuorum:
		if !stalled {
			o.ObserveEvent(ctx, Event{Kind: EventNoQuorum, Key: key, Err: err})
		}
		return true
	case outcomeOK, outcomeContended:
		return false
	}
	return stalled
}
