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
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// maxMasters bounds the masters of a Client (see Lock.lateAgreement).
const maxMasters = 64

// Defaults of Options.
const (
	DefaultNodeTimeout = 50 * time.Millisecond
	DefaultWriteWait   = time.Second
)

// Options configure a Client. The zero value of each field selects its
// default.
type Options struct {
	// Quorum is how many masters must agree for an operation to succeed.
	// It must be more than half of the masters and at most all of them.
	// Default: len(masters)/2 + 1.
	Quorum int

	// NodeTimeout bounds the wait for every master, so that a dead or paused
	// master cannot hold an operation back: a master that has not answered
	// by then counts as failed. Its call may go on in the background for up
	// to 4*NodeTimeout (a release must still reach it, and a call cut off
	// mid-reply costs its connection). Keep it small compared with the
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

	// NoFencing turns fencing tokens off: Lock.Token returns 0, and no
	// counter key is kept. With fencing (the default) every exclusive or
	// write acquisition increments a counter key {key}:fence on the masters
	// that never expires, one per lock name.
	NoFencing bool

	// WriteWait is how long the write-wait marker of a writer waiting for
	// readers keeps new readers out after its last attempt. Blocking
	// writers retry well within it. Default: 1s.
	WriteWait time.Duration

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
	fencing     bool
	writeWait   time.Duration
	newValue    func() (string, error)
	epoch       time.Time // monotonic origin of Lock deadlines

	watchMu sync.Mutex
	watches map[string]*watch // by channel

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
	if n == 0 || n > maxMasters {
		return nil, invalidf("%d masters: need 1 to %d", n, maxMasters)
	}
	c := &Client{
		nodes:       make([]node, n),
		quorum:      opts.Quorum,
		nodeTimeout: opts.NodeTimeout,
		driftFactor: opts.DriftFactor,
		prefix:      opts.KeyPrefix,
		fencing:     !opts.NoFencing,
		writeWait:   opts.WriteWait,
		newValue:    opts.NewValue,
		epoch:       time.Now(),
		watches:     map[string]*watch{},
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
	if c.writeWait == 0 {
		c.writeWait = DefaultWriteWait
	}
	if c.writeWait < 0 {
		return nil, invalidf("WriteWait %v: must be positive", c.writeWait)
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

// NewOwner returns a new owner identity for reentrant and read-write locks:
// a random (version 4) UUID, from crypto/rand.
func NewOwner() string { return uuid.NewString() }

// WriteWait returns how long a waiting writer's marker keeps readers out.
func (c *Client) WriteWait() time.Duration { return c.writeWait }

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

// Close ends the client's release subscriptions and waits until no call to
// a master is running, including the ones an earlier operation left in the
// background (each bounded by NodeTimeout, or by the go-redis client's own
// timeouts if it ignores contexts). Later operations return ErrClosed.
// Close does not close the go-redis clients. Close Wakers before.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.closeWatches()
	c.inflight.Wait()
	return nil
}

// Acquire tries once to take the exclusive lock on key for ttl, under a
// fresh random value. It returns a *Lock if a quorum of masters granted it
// with validity left. Otherwise it releases whatever it took, on every
// master and with a fresh context bounded by NodeTimeout (never ctx, which
// may have ended), and returns an error wrapping ErrNotObtained; a
// *QuorumError tells each master's part.
//
// Acquire blocks until the quorum is decided, at most NodeTimeout, plus
// the release of a failed attempt and, with fencing, one more round when
// the masters' counters differ. Cancelling ctx ends the attempt early; the
// error then also matches ctx.Err(). ttl is used in whole milliseconds and
// must be longer than NodeTimeout and than its own drift allowance.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	value, err := c.newValue()
	if err != nil {
		return nil, fmt.Errorf("redlock: new value: %w", err)
	}
	if value == "" {
		return nil, invalidf("NewValue returned an empty value")
	}
	return c.acquire(ctx, exclusiveMode, key, value, value, ttl)
}

// AcquireAs is Acquire with a reentrant lock held by owner: while owner
// holds it, Lock.Reenter adds holds and the last Lock.Release frees it.
// owner must be unique to its holder and unguessable (see NewOwner).
func (c *Client) AcquireAs(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, exclusiveMode, key, owner, ttl)
}

// AcquireWrite takes the write side of the read-write lock named key for
// owner: granted when no other owner holds it for writing and no reader
// holds it. If waiting (the caller will retry) and readers hold it, the
// attempt leaves a write-wait marker that keeps new readers out for
// Options.WriteWait, so that writers are not starved. It fails with an
// error matching ErrUpgrade if owner holds a read lock on key. Blocking and
// errors are those of Acquire.
func (c *Client) AcquireWrite(ctx context.Context, key, owner string, ttl time.Duration, waiting bool) (*Lock, error) {
	m := writeMode
	if waiting {
		m = waitingWriteMode
	}
	return c.acquireOwned(ctx, m, key, owner, ttl)
}

// AcquireRead takes the read side of the read-write lock named key for
// owner: granted unless another owner holds it for writing or a writer
// waits (an owner that already reads may re-enter). Readers share the
// lock, and each one's hold expires on its own. An owner holding the write
// lock may also take the read lock, then release the write lock: a
// downgrade. Read locks carry no fencing token. Blocking and errors are
// those of Acquire.
func (c *Client) AcquireRead(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	return c.acquireOwned(ctx, readMode, key, owner, ttl)
}

// acquireOwned acquires for owner under a fresh nonce.
func (c *Client) acquireOwned(ctx context.Context, m *mode, key, owner string, ttl time.Duration) (*Lock, error) {
	nonce, err := c.newValue()
	if err != nil {
		return nil, fmt.Errorf("redlock: new value: %w", err)
	}
	return c.acquire(ctx, m, key, owner, nonce, ttl)
}

func (c *Client) acquire(ctx context.Context, m *mode, key, owner, nonce string, ttl time.Duration) (*Lock, error) {
	if key == "" {
		return nil, invalidf("empty key")
	}
	if owner == "" {
		return nil, invalidf("empty owner")
	}
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return nil, err
	}
	l := &Lock{client: c, mode: m, key: key, value: owner, nonce: nonce, keys: m.keys(c.prefix, key), ttl: ttl}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.take(ctx, 1); err != nil {
		return nil, err
	}
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
