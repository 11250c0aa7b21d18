package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// maxMasters bounds the masters of a Client: per-master sets are bits of
// a uint64.
const maxMasters = 64

// Defaults of Options.
const (
	DefaultMasterTimeout = 50 * time.Millisecond
	DefaultDriftFactor   = 0.01 // share of a TTL set aside for clock drift
)

// Options configure a Client. A field's zero value selects its default:
// a majority quorum, DefaultMasterTimeout, DefaultDriftFactor, random
// values, the rest off (docs/options.md: bounds).
type Options struct {
	Quorum        int           // masters that must agree: more than half, at most all
	MasterTimeout time.Duration // bounds the wait for each master; keep it well below TTLs
	DriftFactor   float64       // share of the TTL set aside for clock drift, plus 2ms
	KeyPrefix     string        // prepended to every lock name; any string works
	NoFencing     bool          // turns fencing tokens off: Lock.Token returns 0
	NoRepair      bool          // turns off setting the lock again where it was lost
	Observer      Observer      // receives every round and lock event; Observers joins several
	// NewValue makes each acquisition's value: unique, unguessable, no '}'.
	NewValue func() (string, error)
	// Holder describes the locks to people (host, pid) in `redlock inspect`.
	Holder string
}

// Client acquires locks on a set of independent Redis masters; Dial or
// New makes one, Close ends its work. It is safe for concurrent use. A
// zero or nil Client's methods return an error wrapping
// ErrInvalidArgument and do nothing.
type Client struct {
	config              // set by New, then never changed
	nodes     []node    // set by New, then never changed
	epoch     time.Time // monotonic origin of Lock deadlines
	ordered   bool      // every master's pipeline is Ordered (see Lock.release)
	gate      gate      // open, closing, closed; the work Close waits for
	watches   watchSet  // release subscriptions, by channel
	contested contestedSet
	engine    *quorum.Engine  // runs the rounds; set by New
	renew     renewer         // the auto-renewed locks
	owned     []*redis.Client // made by Dial; Close closes them
	ownedOnce sync.Once
	// longest is the longest TTL any call of the Client asked a master
	// for, in nanoseconds. It is how long a master that reached a new
	// server counts toward no new lock. Atomic: Locks raise it.
	longest atomic.Int64
}

// config is a Client's Options, checked and defaulted by New.
type config struct {
	quorum        int
	masterTimeout time.Duration
	driftFactor   float64
	prefix        string
	fencing       bool
	noRepair      bool
	observer      Observer
	newValue      func() (string, error)
	holder        string // appended to each nonce, after a space
}

// New returns a Client of masters, any go-redis clients with no
// replication between them. Give each MaxRetries -1, so that go-redis
// never replays a lock call. opts may be nil. New does no I/O; it
// returns an error wrapping ErrInvalidArgument that names a bad value.
func New[C redis.Scripter](masters []C, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	n := len(masters)
	if n == 0 || n > maxMasters {
		return nil, invalidf("%d masters: need 1 to %d", n, maxMasters)
	}
	c := &Client{
		config: config{
			quorum:        opts.Quorum,
			masterTimeout: opts.MasterTimeout,
			driftFactor:   opts.DriftFactor,
			prefix:        opts.KeyPrefix,
			fencing:       !opts.NoFencing,
			noRepair:      opts.NoRepair,
			observer:      opts.Observer,
			newValue:      opts.NewValue,
			holder:        opts.Holder,
		},
		nodes:   make([]node, n),
		epoch:   time.Now(),
		watches: watchSet{byChannel: map[string]*watch{}},
	}
	c.gate.init()
	if c.quorum == 0 {
		c.quorum = n/2 + 1
	}
	if c.quorum <= n/2 || c.quorum > n {
		return nil, invalidf("Quorum %d with %d masters: must be more than half and at most all (%d to %d)", c.quorum, n, n/2+1, n)
	}
	if c.masterTimeout == 0 {
		c.masterTimeout = DefaultMasterTimeout
	}
	switch {
	case c.masterTimeout < time.Millisecond:
		return nil, invalidf("MasterTimeout %v: must be at least 1ms (shorter times out healthy masters; is a unit missing?)", c.masterTimeout)
	case c.masterTimeout > maxMasterTimeout:
		return nil, invalidf("MasterTimeout %v: must be at most %v (multiples of it bound late calls, and would overflow)", c.masterTimeout, maxMasterTimeout)
	}
	switch {
	case c.driftFactor == 0:
		c.driftFactor = DefaultDriftFactor
	case c.driftFactor == -1:
		c.driftFactor = 0
	case !(c.driftFactor > 0 && c.driftFactor < 1): // NaN too
		return nil, invalidf("DriftFactor %v: must be in (0, 1), or -1 for none", c.driftFactor)
	}
	if c.newValue == nil {
		c.newValue = randomValue
	}
	if err := checkHolder(c.holder); err != nil {
		return nil, err
	}
	seen := make(map[any]int, n)
	for i, m := range masters {
		var client redis.Scripter = m
		if isNil(client) {
			return nil, invalidf("master %d is nil", i)
		}
		name := masterName(client, i)
		ids := []any{name, identity(client)}
		if rc, ok := client.(*redis.Client); ok {
			if addr := sameAddr(rc.Options()); addr != "" {
				ids = append(ids, addrKey(addr))
			}
		}
		for _, id := range ids {
			if j, dup := seen[id]; dup && id != nil {
				return nil, invalidf("masters %d (%s) and %d (%s) are the same master: Redlock needs independent masters", j, c.nodes[j].name, i, name)
			}
			seen[id] = i
		}
		pipe := pipeline.New(client, lateCallFactor*c.masterTimeout, pipeline.LanesPerMaster(n))
		pipe.UseFunctions(functions)
		c.nodes[i] = node{name: name, client: client, timeout: c.masterTimeout, id: newIDCache(client, &c.longest), pipe: pipe, prep: &preparation{}}
		if cc, ok := client.(*redis.ClusterClient); ok {
			c.nodes[i].shards = newShards(cc, lateCallFactor*c.masterTimeout, pipeline.LanesPerMaster(n), &c.longest)
		}
	}
	c.ordered = !slices.ContainsFunc(c.nodes, func(n node) bool { return !n.pipe.Ordered() })
	qm := make([]quorum.Master, n)
	for i := range c.nodes {
		qm[i] = quorum.Master{Client: c.nodes[i].client, Pipe: c.nodes[i].pipe}
		if id := c.nodes[i].id; id != nil { // a nil *idCache would be a non-nil Identity
			qm[i].ID = id
		}
		if sh := c.nodes[i].shards; sh != nil {
			qm[i].Route = sh
		}
	}
	c.engine = quorum.New(quorum.Config{
		Quorum:        c.quorum,
		MasterTimeout: c.masterTimeout,
		DriftFactor:   c.driftFactor,
		Timed:         c.observer != nil,
		SameServer: func(first, second int, runID string) error {
			return c.sameServer(first, second, runID)
		},
		Work: &c.gate,
	}, qm)
	return c, nil
}

// addrKey is a master's address in the form of sameAddr, kept apart from
// names in New's map of masters seen.
type addrKey string

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

// NewOwner returns a random owner for reentrant and read-write locks.
func NewOwner() string { return uuid.NewString() }

// check returns an error if c was not made by New.
func (c *Client) check() error {
	switch {
	case c == nil:
		return invalidf("nil Client: use redlock.New")
	case len(c.nodes) == 0:
		return invalidf("zero Client: use redlock.New")
	}
	return nil
}

// Quorum returns how many masters must agree (0 for a zero or nil Client).
func (c *Client) Quorum() int {
	if c == nil {
		return 0
	}
	return c.quorum
}

// Masters returns the masters' names, in the order given to New.
func (c *Client) Masters() []string {
	if c == nil {
		return nil
	}
	names := make([]string, len(c.nodes))
	for i := range c.nodes {
		names[i] = c.nodes[i].name
	}
	return names
}

// LoadScripts loads the scripts on every master, so that first calls need
// no fallback; it is optional. It blocks until each master answered
// (within 4*MasterTimeout), ctx ended, or Close gave up.
func (c *Client) LoadScripts(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkContext(ctx, "load scripts"); err != nil {
		return err
	}
	if !c.gate.enter(1) {
		return ErrClosed
	}
	defer c.gate.leave(1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.gate.abandon, cancel)() // Close gave up
	var g errgroup.Group
	errs := make([]error, len(c.nodes))
	for i := range c.nodes {
		nd := &c.nodes[i]
		g.Go(func() error {
			load := func(f func(context.Context) error) bool {
				loadCtx, cancel := context.WithTimeout(ctx, lateCallFactor*c.masterTimeout)
				defer cancel()
				if err := f(loadCtx); err != nil {
					errs[i] = fmt.Errorf("%s: %w", nd.name, err)
					return false
				}
				return true
			}
			if !load(nd.pipe.LoadFunctions) {
				return nil
			}
			for _, s := range scripts {
				if !load(func(ctx context.Context) error { return s.Load(ctx, nd.client).Err() }) {
					return nil
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// Close ends the live locks (Done closes with ErrClosed; the keys expire),
// retries pending cleanups at once, and blocks until they and calls in
// flight end, about 8*MasterTimeout at most (docs/api.md: exceptions).
// Later operations return ErrClosed. It closes clients Dial made.
func (c *Client) Close() error {
	if err := c.check(); err != nil {
		return err
	}
	c.shutDown()
	return c.closeOwned() // last: nothing uses them any more
}

// shutDown is Close but for the go-redis clients.
func (c *Client) shutDown() {
	defer c.engine.Stop() // last: once the pipelines are closed, no round is pending

	c.closeLocks()   // closing: live locks end, renewals stop
	c.gate.close()   // closed: no call starts, pending cleanup retries at once
	c.closeWatches() // no waiter is woken any more
	grace := time.NewTimer(lateCallFactor * c.masterTimeout)
	defer grace.Stop()
	// Calls still queued to a master that does not answer would each
	// wait for a batch ahead of them. Past the grace, they are dropped.
	inTime := c.gate.drain(grace.C, c.abortPipes)
	// The pipelines may still send undos whose callers stopped waiting.
	// They send them within the grace, or not at all.
	pipes := make(chan struct{})
	go func() {
		defer close(pipes)
		var wg sync.WaitGroup
		for i := range c.nodes {
			wg.Go(func() { c.nodes[i].close(false) })
		}
		wg.Wait()
	}()
	if inTime {
		select {
		case <-pipes:
			return
		case <-grace.C:
		}
	}
	c.abortPipes()
	<-pipes
}

// abortPipes aborts every master's pipeline and waits for what they have
// in flight.
func (c *Client) abortPipes() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { c.nodes[i].close(true) })
	}
	wg.Wait()
}

// Upper bounds of durations, where the arithmetic on them would overflow.
const (
	maxMasterTimeout = time.Duration(math.MaxInt64 / 16)
	maxTTL           = time.Duration(math.MaxInt64/2) / time.Millisecond * time.Millisecond // 2*TTL in renewal
)

// checkTTL truncates ttl to whole milliseconds, as Redis stores it. It
// rejects a TTL that no round could ever meet. name names it in errors.
func (c *Client) checkTTL(name string, ttl time.Duration) (time.Duration, error) {
	ms := ttl.Truncate(time.Millisecond)
	switch {
	case ms <= c.masterTimeout:
		return 0, invalidf("%s %v: must be longer than MasterTimeout (%v)", name, ttl, c.masterTimeout)
	case ms <= quorum.Drift(ms, c.driftFactor):
		return 0, invalidf("%s %v: must be longer than its drift allowance (%v)", name, ttl, quorum.Drift(ms, c.driftFactor))
	case ms > maxTTL:
		return 0, invalidf("%s %v: must be at most %v (auto-renewal's arithmetic would overflow)", name, ttl, maxTTL)
	}
	return ms, nil
}

// fencingTTLFactor is how many MasterTimeouts a fenced TTL must span at
// least: a fenced acquire counts only if decided within a quarter of its
// TTL, and a round may take a whole MasterTimeout.
const fencingTTLFactor = 4

// checkFencedTTL refuses a TTL, already checked by checkTTL, whose
// quarter is shorter than MasterTimeout, where locks take fencing
// tokens: one slow master could then make every acquisition fail. name
// names it in errors.
func (c *Client) checkFencedTTL(name string, ttl time.Duration) error {
	if least := fencingTTLFactor * c.masterTimeout; c.fencing && ttl < least {
		return invalidf("%s %v: must be at least 4*MasterTimeout (%v) with fencing: a fenced acquire counts only if decided within a quarter of its TTL, and a slow master takes MasterTimeout (or set Options.NoFencing)", name, ttl, least)
	}
	return nil
}

// deadline is when a lock stops being safe, if a round starting at start
// set it for ttl: start + ttl - drift. The validity at the decision,
// ttl - elapsed - drift, counts down to the same instant.
func (c *Client) deadline(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - quorum.Drift(ttl, c.driftFactor))
}

// track registers l, which has a lost-lock signal, so that Close ends it.
// Once Close has begun, it registers nothing and reports false.
func (c *Client) track(l *Lock) bool {
	g := &c.gate
	g.locksMu.Lock()
	defer g.locksMu.Unlock()
	if g.closing() {
		return false
	}
	if g.locks == nil {
		g.locks = map[*Lock]struct{}{}
	}
	g.locks[l] = struct{}{}
	return true
}

// untrack forgets l once it is lost.
func (c *Client) untrack(l *Lock) {
	g := &c.gate
	g.locksMu.Lock()
	delete(g.locks, l)
	g.locksMu.Unlock()
}

// closeLocks steps to closing, ends every live lock with ErrClosed, and
// waits for the renewals to stop. Locks without a signal need nothing:
// Held and Err check closing.
func (c *Client) closeLocks() {
	for l := range c.gate.beginClosing() {
		l.lose(ErrClosed)
		l.report()
	}
	c.renew.close()
	c.gate.renewals.Wait()
}

// maxHolder bounds Options.Holder: it goes with every call of a Lock.
const maxHolder = 200

// checkHolder refuses an Options.Holder that would break a key name
// ('}') or the one line `redlock inspect` gives it.
func checkHolder(h string) error {
	switch {
	case len(h) > maxHolder:
		return invalidf("Holder %s: %d bytes, more than %d", quote(h), len(h), maxHolder)
	case strings.Contains(h, "}"):
		return invalidf("Holder %s: must not hold '}'", quote(h))
	case strings.ContainsFunc(h, unicode.IsControl):
		return invalidf("Holder %s: must not hold a control character", quote(h))
	}
	return nil
}
