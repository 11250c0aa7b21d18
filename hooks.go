package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/link"
)

// Packages mutex and rwmutex reach these through internal/link.
func init() {
	link.NewWaker = func(c any, key string, all bool) link.Waker {
		return c.(*Client).newWaker(key, all)
	}
	link.AcquireWaitingWrite = func(ctx context.Context, c any, key, owner string, ttl, writeWait time.Duration) (any, error) {
		return c.(*Client).acquireOwned(ctx, writeMode, key, owner, ttl, writeWait)
	}
	link.LockKeys = func(prefix, name string, rw bool) []string {
		return (&mode{rw: rw}).keys(prefix, name)
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
