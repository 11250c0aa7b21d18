package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/link"
)

// permits is what package semaphore reaches through internal/link.
type permits struct{}

func init() { link.RegisterSemaphores[*Client, *Lock](permits{}) }

// AcquirePermit takes a permit: a Lock of permitMode under a fresh
// random value. Its nonce starts with its slot (see "@permits" in
// scripts.lua). Its round, undo, validity and token are an Acquire's.
// A failed round also tells the slot to try next (see nextSlot).
func (permits) AcquirePermit(ctx context.Context, c *Client, name string, capacity, slot int, ttl time.Duration) (*Lock, int, error) {
	if err := c.check(); err != nil {
		return nil, -1, err
	}
	switch {
	case capacity < 1:
		return nil, -1, invalidf("acquire %s: capacity %d: must be at least 1", quote(name), capacity)
	case slot < 0 || slot >= capacity:
		return nil, -1, invalidf("acquire %s: slot %d: must be below the capacity, %d", quote(name), slot, capacity)
	}
	value, err := c.value()
	if err != nil {
		return nil, -1, err
	}
	nonce := strconv.Itoa(slot) + "/" + c.nonce(value)
	l, err := c.acquire(ctx, permitMode, name, value, nonce, ttl, extras{capacity: capacity})
	return l, nextSlot(err, capacity), err
}

// nextSlot returns the slot below capacity that the masters' refusals in
// err named free most often, or -1. It is -1 unless the masters that
// named a slot, with those that agreed and those the round was decided
// without, could make a quorum. Else no slot can be admitted now: too
// many masters are full, or gave no answer. A round decided by one
// refusal (three masters up of five) hears one name: worth a round.
func nextSlot(err error, capacity int) int {
	var q *QuorumError
	if !errors.As(err, &q) || q.named == nil {
		return -1
	}
	best, most, named := -1, 0, 0
	for _, v := range q.named {
		if v > replyFreeSlot || v < replyFreeSlot-int64(capacity-1) {
			continue
		}
		named++
		if n := countOf(q.named, v); n > most {
			best, most = int(replyFreeSlot-v), n
		}
	}
	unheard := 0
	for _, m := range q.Masters {
		if m.Err == ErrNoReply { // not silent, nor withdrawn: decided without it
			unheard++
		}
	}
	if named+q.Agreed+unheard < q.Quorum {
		return -1
	}
	return best
}

func (permits) NewWaker(c *Client, name string, since time.Time) link.SlotWaker {
	if c.check() != nil {
		return permitWaker{c.newWaker(name, false, since)} // never woken
	}
	return permitWaker{c.wakerOnce(permitsKey(lockKey(c.prefix+name)), since)}
}

// permitWaker is a waker of a semaphore's releases.
type permitWaker struct{ *waker }

// Freed returns the slot of the permit whose release woke k last (its
// nonce starts with it), or -1 if no release woke k since the last call.
func (k permitWaker) Freed() int {
	prefix, _, ok := strings.Cut(k.takeWoken(), "/")
	if !ok {
		return -1
	}
	slot, err := strconv.Atoi(prefix)
	if err != nil || slot < 0 {
		return -1
	}
	return slot
}

func (permits) PermitsKey(prefix, name string) string { return permitsKey(lockKey(prefix + name)) }

// countOf returns how many of vs are v.
func countOf(vs []int64, v int64) int {
	n := 0
	for _, w := range vs {
		if w == v {
			n++
		}
	}
	return n
}
