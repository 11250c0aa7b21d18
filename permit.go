package redlock

import (
	"context"
	"strconv"
	"time"

	"github.com/go-redlock/redlock/internal/link"
)

// permits is what package semaphore reaches through internal/link.
type permits struct{}

func init() { link.RegisterSemaphores[*Client, *Lock](permits{}) }

// AcquirePermit takes a permit: a Lock of permitMode under a fresh
// random value. Its nonce starts with its slot (see "@permits" in
// scripts.lua). Its round, undo, validity and token are an Acquire's.
func (permits) AcquirePermit(ctx context.Context, c *Client, name string, capacity, slot int, ttl time.Duration) (*Lock, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	switch {
	case capacity < 1:
		return nil, invalidf("acquire %s: capacity %d: must be at least 1", quote(name), capacity)
	case slot < 0 || slot >= capacity:
		return nil, invalidf("acquire %s: slot %d: must be below the capacity, %d", quote(name), slot, capacity)
	}
	value, err := c.value()
	if err != nil {
		return nil, err
	}
	nonce := strconv.Itoa(slot) + "/" + c.nonce(value)
	return c.acquire(ctx, permitMode, name, value, nonce, ttl, extras{capacity: capacity})
}

func (permits) NewWaker(c *Client, name string, since time.Time) link.Waker {
	if c.check() != nil {
		return c.newWaker(name, false, since) // never woken
	}
	return c.wakerOn(permitsKey(lockKey(c.prefix+name)), false, since)
}

func (permits) PermitsKey(prefix, name string) string { return permitsKey(lockKey(prefix + name)) }
