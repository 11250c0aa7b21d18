// Package redlock implements the Redlock algorithm: a lock held by a quorum of
// independent Redis masters, so that it stays safe when a master fails or
// fails over.
//
// Every operation sends one Lua script to all masters at once, each call
// bounded by Options.NodeTimeout, and is decided as soon as a quorum has
// agreed or can no longer agree. A lock is obtained only if a quorum agreed
// and validity is left:
//
//	validity = TTL - elapsed - (TTL*DriftFactor + 2ms)
//
// The guarantee rests on assumptions: the masters' clocks run at about the
// same rate as the client's (within DriftFactor), the holder does not pause
// for longer than its validity, and a master that lost its data (restart
// without persistence) stays out of service for longer than the longest TTL.
package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// DefaultNodeTimeout is the default bound of every call to one master.
const DefaultNodeTimeout = 50 * time.Millisecond

// Options configure a Client. The zero value of each field selects its
// default.
type Options struct {
	// Quorum is how many masters must agree for an operation to succeed.
	// It must be more than half of the masters and at most all of them.
	// Default: len(masters)/2 + 1.
	Quorum int

	// NodeTimeout bounds every call to one master, so that a dead or paused
	// master cannot hold an operation back. Keep it small compared with the
	// TTLs you use (the Redlock paper suggests 5-50ms for a 10s TTL); a TTL
	// must be longer than it. For the in-flight call itself to stop at the
	// timeout, build the go-redis clients with ContextTimeoutEnabled: true;
	// redlock decides at the timeout either way.
	// Default: 50ms (DefaultNodeTimeout).
	NodeTimeout time.Duration

	// DriftFactor is the share of the TTL set aside for clock drift between
	// the client and the masters; MinDrift (2ms) is always added. It must be
	// in [0, 1). Default: 0.01 (DefaultDriftFactor).
	DriftFactor float64

	// KeyPrefix is prepended to every key sent to the masters.
	// Default: "" (keys are used as given).
	KeyPrefix string

	// NewValue returns the value that identifies one acquisition. It must be
	// unique across all clients and unguessable, and must not return "".
	// Default: 128 random bits from crypto/rand, as base32 text.
	NewValue func() (string, error)
}

// Client acquires locks on a set of independent Redis masters.
// It is safe for concurrent use.
type Client struct {
	nodes       []node
	quorum      int
	nodeTimeout time.Duration
	driftFactor float64
	prefix      string
	newValue    func() (string, error)
	epoch       time.Time // monotonic origin of Lock deadlines

	mu       sync.RWMutex // guards closed against inflight.Add
	closed   bool
	inflight sync.WaitGroup // calls to masters, including background ones
}

// New returns a Client for the given masters, which must be independent
// (no replication between them). Any go-redis client works: *redis.Client
// (standalone or Sentinel-managed), *redis.ClusterClient, *redis.Ring, or a
// redis.UniversalClient. opts may be nil for the defaults.
//
// New does no I/O. It returns an error wrapping ErrInvalidArgument that
// names the first invalid value: an empty or nil master, the same master
// twice, or an option out of range.
func New[C redis.Scripter](masters []C, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	n := len(masters)
	if n == 0 {
		return nil, invalidf("no masters: need at least one")
	}
	c := &Client{
		nodes:       make([]node, n),
		quorum:      opts.Quorum,
		nodeTimeout: opts.NodeTimeout,
		driftFactor: opts.DriftFactor,
		prefix:      opts.KeyPrefix,
		newValue:    opts.NewValue,
		epoch:       time.Now(),
	}
	if c.quorum == 0 {
		c.quorum = n/2 + 1
	}
	if c.quorum <= n/2 || c.quorum > n {
		return nil, invalidf("Quorum %d with %d masters: must be more than half and at most all (%d to %d)", c.quorum, n, n/2+1, n)
	}
	if c.nodeTimeout == 0 {
		c.nodeTimeout = DefaultNodeTimeout
	}
	if c.nodeTimeout < 0 {
		return nil, invalidf("NodeTimeout %v: must be positive", c.nodeTimeout)
	}
	if c.driftFactor == 0 {
		c.driftFactor = DefaultDriftFactor
	}
	if c.driftFactor < 0 || c.driftFactor >= 1 {
		return nil, invalidf("DriftFactor %v: must be in [0, 1)", c.driftFactor)
	}
	if c.newValue == nil {
		c.newValue = randomValue
	}
	seen := make(map[any]int, n)
	for i, m := range masters {
		var client redis.Scripter = m
		if isNil(client) {
			return nil, invalidf("master %d is nil", i)
		}
		name := masterName(client, i)
		for _, id := range []any{name, identity(client)} {
			if j, dup := seen[id]; dup && id != nil {
				return nil, invalidf("masters %d and %d are the same master (%s): Redlock needs independent masters", j, i, name)
			}
			seen[id] = i
		}
		c.nodes[i] = node{name: name, client: client, timeout: c.nodeTimeout}
	}
	return c, nil
}

// isNil reports whether c is nil or a typed nil pointer.
func isNil(c redis.Scripter) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// identity returns a comparable identity for pointer clients, else nil.
func identity(c redis.Scripter) any {
	if reflect.TypeOf(c).Kind() == reflect.Pointer {
		return c
	}
	return nil
}

func randomValue() (string, error) { return rand.Text(), nil }

// Quorum returns how many masters must agree.
func (c *Client) Quorum() int { return c.quorum }

// Masters returns the masters' names, in the order given to New.
func (c *Client) Masters() []string {
	names := make([]string, len(c.nodes))
	for i := range c.nodes {
		names[i] = c.nodes[i].name
	}
	return names
}

// LoadScripts loads every script on every master, so that the first
// operations need no EVAL fallback. It is optional: a master that lacks a
// script (it restarted, say) gets it on first use. It blocks until every
// master answered or ctx ends and returns the masters' errors joined.
func (c *Client) LoadScripts(ctx context.Context) error {
	var g errgroup.Group
	errs := make([]error, len(c.nodes))
	for i := range c.nodes {
		nd := &c.nodes[i]
		g.Go(func() error {
			for _, s := range scripts {
				if err := s.Load(ctx, nd.client).Err(); err != nil {
					errs[i] = fmt.Errorf("%s: %w", nd.name, err)
					return nil
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// Close waits until no call to a master is running, including the ones an
// earlier operation left in the background (each bounded by NodeTimeout,
// or by the go-redis client's own timeouts if it ignores contexts). Later
// operations return ErrClosed. Close does not close the go-redis clients.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.inflight.Wait()
	return nil
}

// Acquire tries once to take the lock on key for ttl. It returns a *Lock if
// a quorum of masters granted it with validity left. Otherwise it releases
// whatever it took, on every master and with a fresh context bounded by
// NodeTimeout (never ctx, which may have ended), and returns an error
// wrapping ErrNotObtained; a *QuorumError tells each master's part.
//
// Acquire blocks until the quorum is decided, at most NodeTimeout, plus one
// release round trip on failure. Cancelling ctx ends the attempt early; the
// error then also matches ctx.Err(). ttl is used in whole milliseconds and
// must be longer than NodeTimeout and than its own drift allowance.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if key == "" {
		return nil, invalidf("empty key")
	}
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return nil, err
	}
	value, err := c.newValue()
	if err != nil {
		return nil, fmt.Errorf("redlock: new value: %w", err)
	}
	if value == "" {
		return nil, invalidf("NewValue returned an empty value")
	}
	l := &Lock{client: c, key: key, value: value, keys: []string{c.prefix + key}}
	start, err := c.do(ctx, &op{
		name:     "acquire",
		key:      key,
		script:   acquireScript,
		undo:     releaseScript,
		keys:     l.keys,
		args:     []any{value, ttl.Milliseconds()},
		ttl:      ttl,
		sentinel: ErrNotObtained,
	})
	if err != nil {
		return nil, err
	}
	l.setUntil(c.deadline(start, ttl))
	return l, nil
}

// checkTTL truncates ttl to whole milliseconds, as Redis stores it, and
// rejects a TTL that no round could ever meet.
func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	ms := ttl.Truncate(time.Millisecond)
	switch {
	case ms <= c.nodeTimeout:
		return 0, invalidf("TTL %v: must be longer than NodeTimeout (%v)", ttl, c.nodeTimeout)
	case ms <= Drift(ms, c.driftFactor):
		return 0, invalidf("TTL %v: must be longer than its drift allowance (%v)", ttl, Drift(ms, c.driftFactor))
	}
	return ms, nil
}

// deadline is when a lock that a round starting at start set for ttl stops
// being safe: start + ttl - drift. (The validity at the decision, ttl -
// elapsed - drift, counts down to the same instant.)
func (c *Client) deadline(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - Drift(ttl, c.driftFactor))
}

// Lock is one acquisition of a key. It is safe for concurrent use; Extend
// and Release on the same Lock run one at a time.
type Lock struct {
	client *Client
	key    string
	value  string
	keys   []string

	mu    sync.Mutex   // serializes Extend and Release
	until atomic.Int64 // deadline, in nanoseconds since client.epoch
}

// Key returns the lock's key, without the client's prefix.
func (l *Lock) Key() string { return l.key }

// Value returns the random value that identifies this acquisition.
func (l *Lock) Value() string { return l.value }

// Until returns the time until which the lock is safely held: a deadline on
// the monotonic clock. After a Release, or once it has passed, the lock is
// not held.
func (l *Lock) Until() time.Time {
	return l.client.epoch.Add(time.Duration(l.until.Load()))
}

// Held reports whether the lock's validity has not yet run out.
func (l *Lock) Held() bool { return time.Now().Before(l.Until()) }

func (l *Lock) setUntil(t time.Time) { l.until.Store(int64(t.Sub(l.client.epoch))) }

// Extend sets the lock's TTL to ttl from now on every master that still
// holds it with this value; a master where the key has gone is left alone.
// It succeeds only if a quorum did so with validity left, and then moves
// Until forward. If the lock's validity has already run out, Extend writes
// nothing and returns ErrNotHeld. Otherwise it fails with a *QuorumError
// wrapping ErrNotHeld, and Until is unchanged.
//
// Extend blocks until the quorum is decided, at most NodeTimeout.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.client
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Held() {
		return fmt.Errorf("%w: extend %q: validity ran out at %v", ErrNotHeld, l.key, l.Until().Round(0))
	}
	start, err := c.do(ctx, &op{
		name:     "extend",
		key:      l.key,
		script:   extendScript,
		keys:     l.keys,
		args:     []any{l.value, ttl.Milliseconds()},
		ttl:      ttl,
		sentinel: ErrNotHeld,
	})
	if err != nil {
		return err
	}
	l.setUntil(c.deadline(start, ttl))
	return nil
}

// Release deletes the lock on every master where it still holds this
// value. It returns nil if a quorum held it (it was still ours), and a
// *QuorumError wrapping ErrNotHeld if not: it had expired, was already
// released, or too few masters answered. Either way the Lock is no longer
// held afterwards, and calling Release again is harmless.
//
// Release blocks until the quorum is decided, at most NodeTimeout; the
// delete still reaches slower masters in the background.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until.Store(0)
	_, err := l.client.do(ctx, &op{
		name:     "release",
		key:      l.key,
		script:   releaseScript,
		keys:     l.keys,
		args:     []any{l.value},
		sentinel: ErrNotHeld,
	})
	return err
}
