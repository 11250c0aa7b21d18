package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/link"
)

// Packages mutex and rwmutex reach these through internal/link.
func init() {
	link.NewWaker = func(c any, key string, all bool, since time.Time) link.Waker {
		return c.(*Client).newWaker(key, all, since)
	}
	link.AcquireWaitingWrite = func(ctx context.Context, c any, key, owner string, ttl, writeWait time.Duration) (any, error) {
		return c.(*Client).acquireOwned(ctx, writeMode, key, owner, ttl, writeWait)
	}
	link.Release = func(ctx context.Context, l any, queued func()) error {
		return l.(*Lock).release(ctx, queued)
	}
	link.LockKeys = func(prefix, name string, rw bool) []string {
		return (&mode{rw: rw}).keys(prefix, name)
	}
	link.ParseHolder, link.FormatHolder = parseHolder, formatHolder
	link.ObserveWait = func(ctx context.Context, c any, key string, waited time.Duration, l any, err error) {
		o := c.(*Client).observer
		if o == nil {
			return
		}
		e := Event{Kind: EventWaited, Key: key, Wait: waited, Err: err}
		if l, ok := l.(*Lock); ok && l != nil {
			e.Read, e.Token, e.Until = l.mode == readMode, l.token, l.Until()
		}
		o.ObserveEvent(ctx, e)
	}
	link.CheckTTL = func(c any, name string, ttl time.Duration) error {
		cl := c.(*Client)
		if err := cl.check(); err != nil {
			return err
		}
		_, err := cl.checkTTL(name, ttl)
		return err
	}
}
