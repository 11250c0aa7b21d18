package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/pipeline"
)

// multiMode is a multi-resource lock: several names taken together, on
// the keys of each name's exclusive lock (see "@multi" in scripts.lua).
// It is renewed one call per Lock: its keys vary in number, so it has no
// extendMany. It repairs nothing.
var multiMode = &mode{acquire: scripts.get("multi_acquire"), extend: scripts.get("multi_extend"), release: scripts.get("multi_release"),
	fence: scripts.get("multi_fence"), rank: 3, fenced: true, multi: true}

// channels returns where the last release of a Lock of mode m with keys
// publishes: its main key, or each key of a multi-resource lock.
func (m *mode) channels(keys []string) []string {
	if m.multi {
		return keys
	}
	return keys[:1]
}

// multiLocks is what package multi reaches through internal/link.
type multiLocks struct{}

func init() { link.RegisterMulti[*Client, *Lock](multiLocks{}) }

// CheckNames returns names sorted, or an error wrapping
// ErrInvalidArgument (see link.Multi).
func (multiLocks) CheckNames(c *Client, names []string) ([]string, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.checkNames(names)
}

// AcquireMulti takes every name at once, under a fresh random value:
// one round, undone everywhere where it fails, as Acquire's.
func (multiLocks) AcquireMulti(ctx context.Context, c *Client, names []string, ttl time.Duration) (*Lock, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx, "acquire"); err != nil {
		return nil, err
	}
	sorted, err := c.checkNames(names)
	if err != nil {
		return nil, err
	}
	if ttl, err = c.checkTTL("TTL", ttl); err != nil {
		return nil, err
	}
	if err := c.checkFencedTTL("TTL", ttl); err != nil {
		return nil, err
	}
	value, err := c.value()
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(sorted))
	for i, n := range sorted {
		keys[i] = lockKey(c.prefix + n)
	}
	l := &Lock{lockID: lockID{client: c, mode: multiMode, key: link.MultiKey(sorted), value: value, nonce: c.nonce(value),
		keys: pipeline.NewKeys(keys...), names: sorted}, ttl: ttl}
	return c.takeNew(ctx, l)
}

func (multiLocks) Names(l *Lock) []string {
	if l.check() != nil || l.mode != multiMode {
		return nil
	}
	return slices.Clone(l.names)
}

// Held returns the names that err's masters refused as held (see
// heldError), sorted, each once.
func (multiLocks) Held(err error) []string {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return nil
	}
	var names []string
	for _, m := range qe.Masters {
		if h, ok := m.Err.(heldError); ok && !slices.Contains(names, h.name) {
			names = append(names, h.name)
		}
	}
	slices.Sort(names)
	return names
}

// NewWaker watches the releases of every name: each wakes it.
func (multiLocks) NewWaker(c *Client, names []string, since time.Time) link.Waker {
	w := &multiWaker{c: make(chan struct{}, 1)}
	if c.check() != nil {
		return w // never woken
	}
	for _, n := range names {
		w.ws = append(w.ws, c.wakerInto(w.c, lockKey(c.prefix+n), true, since))
	}
	return w
}

// multiWaker is the wakers of several names, which share one channel.
type multiWaker struct {
	c  chan struct{}
	ws []*waker
}

func (w *multiWaker) Wake() <-chan struct{} { return w.c }

func (w *multiWaker) Close() {
	for _, k := range w.ws {
		k.Close()
	}
}

func (w *multiWaker) GiveUp() {
	for _, k := range w.ws {
		k.GiveUp()
	}
}

func (w *multiWaker) Settled() bool {
	for _, k := range w.ws {
		if !k.Settled() {
			return false
		}
	}
	return len(w.ws) > 0
}

// checkNames returns names sorted, or an error wrapping
// ErrInvalidArgument: no name, an empty name, a name given twice, or
// names whose keys a master cannot take in one call. A Redis Cluster
// master takes only keys of one slot. A master that may shard keys
// otherwise (a ring, a client of another kind) takes only keys of one
// hash tag: it routes a call by its first key.
func (c *Client) checkNames(names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, invalidf("multi-resource lock: no name")
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, n := range sorted {
		switch {
		case n == "":
			return nil, invalidf("multi-resource lock: empty name")
		case i > 0 && n == sorted[i-1]:
			return nil, invalidf("multi-resource lock: name %s given twice", quote(n))
		}
	}
	bySlot, byTag := false, false
	for i := range c.nodes {
		switch n := &c.nodes[i]; {
		case n.shards != nil:
			bySlot = true
		case !n.batches():
			if _, ok := n.client.(*redis.Client); !ok {
				byTag = true
			}
		}
	}
	if !bySlot && !byTag {
		return sorted, nil
	}
	first := lockKey(c.prefix + sorted[0])
	for _, n := range sorted[1:] {
		k := lockKey(c.prefix + n)
		switch {
		case byTag && hashTag(k) != hashTag(first):
			return nil, invalidf("multi-resource lock: names %s and %s hash to different tags (%s, %s): a master that shards keys routes a call by its first key; give the names one prefix that ends in '}', such as \"{tag}name\"",
				quote(sorted[0]), quote(n), quote(hashTag(first)), quote(hashTag(k)))
		case keySlot(k) != keySlot(first):
			return nil, invalidf("multi-resource lock: names %s (slot %d) and %s (slot %d) are in different Redis Cluster slots: give them one prefix that ends in '}', such as \"{tag}name\"",
				quote(sorted[0]), keySlot(first), quote(n), keySlot(k))
		}
	}
	return sorted, nil
}

// hashTag returns the part of key that Redis Cluster hashes (see
// keySlot).
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
