package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// SameServerError means two masters are one redis-server (same run_id):
// only one counts in a round. It matches ErrSameServer.
type SameServerError struct {
	First, Second         int    // positions in the masters given to New; First < Second
	FirstName, SecondName string // their names, as in MasterResult.Master
	RunID                 string // the server's run_id

	firstRefused bool // the error is master First's: Second counted
}

func (e *SameServerError) Error() string {
	counted, name := e.First, e.FirstName
	if e.firstRefused {
		counted, name = e.Second, e.SecondName
	}
	return fmt.Sprintf("redlock: same server as master %d (%s, run_id %s)", counted, name, e.RunID)
}

func (e *SameServerError) Is(target error) bool { return target == ErrSameServer }

// serverID is what a master said about itself.
type serverID struct {
	runID    string // INFO server's run_id; "" when unknown
	role     string // INFO replication's role: "master", "slave"; "" when unknown
	replicas int    // INFO replication's connected_slaves; 0 when unknown
	// opened and asked are idCache.opened and idCache.asked when the INFO
	// was sent.
	opened, asked uint64
	// unknown is why the server could not be identified although it
	// answered: INFO not allowed, say. It then counts, unchecked.
	unknown error
}

// idCache tracks which server a *redis.Client master reaches. The server
// is asked on first use. It is asked again once the client's connection
// pool has opened a connection since, as that may reach another server.
// So identifying costs no round trip in the steady state. A role change
// without a new connection goes unseen until then, or until Verify. Safe
// for concurrent use: current, asked and changed are atomic.
//
// It is also the engine's quorum.Durability. A master with replicas has
// its writes followed by WAIT, and by ROLE, whose replica count updates
// the cache. So does a master reached through Sentinel, which may gain
// replicas unseen. A new run_id puts the master in quarantine for the
// longest TTL the Client asked for.
type idCache struct {
	client *redis.Client
	// unannounced: the server may change, or gain replicas, without a
	// new run_id being seen at once. The client is a Sentinel
	// FailoverClient, or a Redis Cluster node's.
	unannounced bool
	asked       atomic.Uint64 // bumped by refresh
	current     atomic.Pointer[serverID]
	// changed is when a new run_id was seen, on the monotonic clock; nil
	// if never. longest is the Client's longest TTL asked for.
	changed atomic.Pointer[time.Time]
	longest *atomic.Int64
	// roleRefused: the server refused ROLE (an ACL). The replica count
	// then comes from INFO alone.
	roleRefused atomic.Bool

	// mu guards pending.
	mu      sync.Mutex
	pending chan struct{} // closed when the INFO in flight is answered
}

var _ quorum.Durability = (*idCache)(nil)

// newIDCache returns the cache of a master whose server can be asked, or
// nil. Only a *redis.Client reaches one server; a Cluster or Ring client
// reaches several. It installs nothing on the client.
func newIDCache(c redis.Scripter, longest *atomic.Int64) *idCache {
	rc, ok := c.(*redis.Client)
	if !ok {
		return nil
	}
	// go-redis names the address of a Sentinel client so.
	return &idCache{client: rc, longest: longest, unannounced: rc.Options().Addr == "FailoverClient"}
}

// opened returns how many connections the client's main and pipeline
// pools have opened. Scripts run on both. It counts those they hold plus
// those they removed: go-redis counts every removal in StaleConns. That
// covers connections dialed on demand and in advance (MinIdleConns).
// Subscriptions have a pool of their own, which does not count. A clone of
// the client (WithTimeout) shares the pools. A removal racing with the
// read may count one too many, which only costs one more INFO.
func (id *idCache) opened() uint64 {
	s := id.client.PoolStats()
	n := uint64(s.TotalConns) + uint64(s.StaleConns)
	if p := s.PipelineStats; p != nil {
		n += uint64(p.TotalConns) + uint64(p.StaleConns)
	}
	return n
}

// get returns the server's identity. It returns the cached one, unless
// the pool opened a connection since it was asked, or refresh was called.
// Else it asks for a fresh one. Concurrent callers share one INFO. It
// blocks for at most two INFO round trips, one in flight and then its
// own, or until ctx ends.
func (id *idCache) get(ctx context.Context) (*serverID, error) {
	for {
		if s := id.fresh(); s != nil {
			return s, nil
		}
		id.mu.Lock()
		if ch := id.pending; ch != nil {
			id.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		id.pending = ch
		id.mu.Unlock()

		s, err := id.ask(ctx)
		id.mu.Lock()
		if err == nil {
			id.seen(s)
			id.current.Store(s)
		}
		id.pending = nil
		close(ch)
		id.mu.Unlock()
		return s, err
	}
}

// seen starts the quarantine where s is another server than the one last
// identified. id.mu must be held.
func (id *idCache) seen(s *serverID) {
	if old := id.current.Load(); old != nil && old.runID != "" && s.runID != "" && old.runID != s.runID {
		now := time.Now()
		id.changed.Store(&now)
	}
}

// Replicas returns how many replicas the server had when last seen, by
// INFO or by ROLE. It does not ask.
func (id *idCache) Replicas() int {
	if s := id.current.Load(); s != nil {
		return s.replicas
	}
	return 0
}

// Unannounced reports whether the master is reached through Sentinel,
// or is a Redis Cluster node.
func (id *idCache) Unannounced() bool { return id.unannounced }

// tookOver starts the quarantine, as a new run_id would: the server took
// over keys that another server held, and may lack writes to them.
func (id *idCache) tookOver() {
	now := time.Now()
	id.changed.Store(&now)
}

// Role learns what ROLE told right after a write, on its connection. A
// master's replica count replaces the cached one. A refused ROLE (an
// ACL) leaves the count INFO gave.
func (id *idCache) Role(r pipeline.Role) (int, error) {
	switch {
	case r.Err != nil && refused(r.Err):
		id.roleRefused.Store(true)
		return id.Replicas(), nil
	case r.Err != nil:
		return 0, fmt.Errorf("%w (ROLE after the write: %v)", ErrNotReplicated, r.Err)
	case r.Name != "master":
		id.refresh() // the cached identity says master
		return 0, replicaError(r.Name)
	}
	id.setReplicas(r.Replicas)
	return r.Replicas, nil
}

// setReplicas makes n the cached replica count, where a server was
// identified.
func (id *idCache) setReplicas(n int) {
	for {
		s := id.current.Load()
		if s == nil || s.replicas == n {
			return
		}
		c := *s
		c.replicas = n
		if id.current.CompareAndSwap(s, &c) {
			return
		}
	}
}

// Unreplicated returns the verdict on an agreement that only acked of
// replicas acknowledged. cause is WAIT's error, if any. Where the server
// refuses ROLE, the count may be stale: a replica that left would hold
// every agreement back. So the server is asked again before the next
// round's agreement counts.
func (id *idCache) Unreplicated(acked, replicas int, cause error) error {
	if id.roleRefused.Load() {
		id.refresh()
	}
	if cause != nil {
		return fmt.Errorf("%w (%d of %d replicas acknowledged; WAIT: %v)", ErrNotReplicated, acked, replicas, cause)
	}
	return fmt.Errorf("%w (%d of %d replicas acknowledged)", ErrNotReplicated, acked, replicas)
}

// Quarantine returns why an agreement to a new lock must not count: the
// master reached a new server less than the longest TTL ago. Else nil.
// It measures on the monotonic clock: a step of the wall clock does not
// end it early.
func (id *idCache) Quarantine() error {
	changed := id.changed.Load()
	if changed == nil {
		return nil
	}
	since := time.Since(*changed)
	ttl := time.Duration(id.longest.Load())
	if since >= ttl {
		return nil
	}
	return fmt.Errorf("%w (run_id %s, seen %v ago; counts again in %v)", ErrQuarantined,
		id.Last(), since.Round(time.Millisecond), (ttl - since).Round(time.Millisecond))
}

// fresh returns the cached identity, or nil if get would ask the server.
func (id *idCache) fresh() *serverID {
	if s := id.current.Load(); s != nil && s.asked == id.asked.Load() && s.opened == id.opened() {
		return s
	}
	return nil
}

// known reports whether the server was ever identified, or found to be
// unidentifiable. It does not read the pool's statistics.
func (id *idCache) known() bool { return id.current.Load() != nil }

// refresh makes the next get ask the server again.
func (id *idCache) refresh() { id.asked.Add(1) }

// ask sends INFO through both pools where the scripts run. Its default
// sections include server and replication, in every Redis version. The
// main pool sends calls alone; the pipeline pool sends batches. Both must
// reach one server. The pools' count is taken first. A connection opened
// meanwhile makes it ask again, such as the one its own INFO may open. It
// asks up to three times. After that, the next get asks again.
func (id *idCache) ask(ctx context.Context) (*serverID, error) {
	for try := 1; ; try++ {
		s, err := id.askOnce(ctx)
		if err != nil || try == 3 || s.opened == id.opened() {
			return s, err
		}
	}
}

func (id *idCache) askOnce(ctx context.Context) (*serverID, error) {
	s := &serverID{asked: id.asked.Load(), opened: id.opened()}
	info, err := id.client.Info(ctx).Result()
	if err == nil {
		var cmds []redis.Cmder
		cmds, err = id.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Info(ctx)
			return nil
		})
		if err == nil {
			piped := cmds[0].(*redis.StringCmd).Val()
			if a, b := infoField(info, "run_id"), infoField(piped, "run_id"); a != b {
				return nil, fmt.Errorf("its connections reach two servers (run_id %s and %s)", a, b)
			}
		}
	}
	if err != nil {
		if refused(err) {
			s.unknown = err
			return s, nil
		}
		return nil, err
	}
	s.runID = infoField(info, "run_id")
	s.role = infoField(info, "role")
	s.replicas, _ = strconv.Atoi(infoField(info, "connected_slaves"))
	return s, nil
}

// refused reports whether the server answered INFO with an error that
// will not go away by asking again. That is no permission (an ACL), or no
// such command (a proxy).
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command")
}

// infoField returns the value of field in INFO text, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Admit identifies the server after its master answered. Only then is a
// connection opened for the call itself seen. It returns the run_id (""
// if unknown). It also returns why the answer must not count: the server
// is a replica, or could not be identified. Of two masters that are one
// server, the round counts one. Admit blocks while it asks the server.
func (id *idCache) Admit(ctx context.Context) (string, error) {
	s, err := id.get(ctx)
	if err != nil {
		return "", fmt.Errorf("identifying the server: %w", err)
	}
	return judge(s)
}

// Known is Admit without asking the server. known is false where Admit
// would ask it.
func (id *idCache) Known() (runID string, err error, known bool) {
	s := id.fresh()
	if s == nil {
		return "", nil, false
	}
	runID, err = judge(s)
	return runID, err, true
}

// Last returns the run_id as last learned, without asking. It returns ""
// where it is unknown.
func (id *idCache) Last() string {
	if s := id.current.Load(); s != nil {
		return s.runID
	}
	return ""
}

// judge returns the run_id of server s, and why its answer must not
// count.
func judge(s *serverID) (string, error) {
	if s.role != "" && s.role != "master" {
		return s.runID, replicaError(s.role)
	}
	return s.runID, nil
}

func replicaError(role string) error { return fmt.Errorf("%w (role %s)", ErrReplica, role) }

// sameServer returns the error of master refused. It is the same server
// as master counted, which counts.
func (c *Client) sameServer(counted, refused int, runID string) *SameServerError {
	first, second := min(counted, refused), max(counted, refused)
	return &SameServerError{First: first, Second: second, FirstName: c.nodes[first].name,
		SecondName: c.nodes[second].name, RunID: runID, firstRefused: refused == first}
}

// masterProblem is a problem Verify found with one master.
type masterProblem struct {
	i    int
	name string
	msg  string // what is wrong; "" for err's text
	err  error  // wrapped; may be nil
}

func (e *masterProblem) Error() string {
	msg := e.msg
	if msg == "" { // every sentinel says "redlock:" already
		msg = strings.TrimPrefix(e.err.Error(), "redlock: ")
	}
	return fmt.Sprintf("redlock: master %d (%s): %s", e.i, e.name, msg)
}

func (e *masterProblem) Unwrap() error { return e.err }

// Verify asks each master, in parallel, who it is (INFO) and joins an
// error per one that may not count: a replica (ErrReplica), a server
// twice (ErrSameServer), one unidentified or silent, or one whose client
// retries calls (ErrReplayingClient); a cluster's nodes each. Safe for
// concurrent use, it blocks until all answered or ctx ended, at most
// 4*MasterTimeout.
func (c *Client) Verify(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkContext(ctx, "verify"); err != nil {
		return err
	}
	type answer struct {
		i     int
		s     *serverID
		err   error
		nodes []nodeID // a cluster master's
	}
	asked := 0
	for i := range c.nodes {
		if c.nodes[i].id != nil || c.nodes[i].shards != nil {
			asked++
		}
	}
	if !c.gate.enter(asked) {
		return ErrClosed
	}

	bound := lateCallFactor * c.masterTimeout
	infoCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	answers := make(chan answer, asked)
	for i := range c.nodes {
		if id := c.nodes[i].id; id != nil {
			go func() {
				defer c.gate.leave(1)
				id.refresh()
				s, err := id.get(infoCtx)
				answers <- answer{i: i, s: s, err: err}
			}()
		}
		if sh := c.nodes[i].shards; sh != nil {
			go func() {
				defer c.gate.leave(1)
				nodes, err := sh.identify(infoCtx)
				answers <- answer{i: i, nodes: nodes, err: err}
			}()
		}
	}
	ids := make([]*serverID, len(c.nodes))
	errs := make([]error, len(c.nodes))
	nodes := make([][]nodeID, len(c.nodes))
	heard := make([]bool, len(c.nodes))
	record := func(a answer) { ids[a.i], errs[a.i], nodes[a.i], heard[a.i] = a.s, a.err, a.nodes, true }
wait:
	for range asked {
		select {
		case a := <-answers:
			record(a)
		case <-infoCtx.Done():
			for { // count what already arrived; the rest are late
				select {
				case a := <-answers:
					record(a)
				default:
					break wait
				}
			}
		}
	}

	var problems []error
	problem := func(i int, msg string, err error) {
		problems = append(problems, &masterProblem{i: i, name: c.nodes[i].name, msg: msg, err: err})
	}
	first := map[string]int{} // run_id -> the first master with it
	// check reports what is wrong with server s of master i, which INFO
	// answered with err. A cluster's node is named by node.
	check := func(i int, node string, s *serverID, err error) {
		report := func(msg string, err error) {
			if node != "" {
				if msg == "" {
					msg = strings.TrimPrefix(err.Error(), "redlock: ")
				}
				msg = "node " + node + ": " + msg
			}
			problem(i, msg, err)
		}
		switch {
		case s == nil && (err == nil || infoCtx.Err() != nil && timeout(err)): // late
			if err := ctx.Err(); err != nil {
				report("", err)
			} else {
				report(fmt.Sprintf("no reply within %v (4*MasterTimeout)", bound), ErrMasterTimeout)
			}
		case s == nil:
			report("", err)
		case s.unknown != nil:
			report("cannot be identified: "+s.unknown.Error(), s.unknown)
		case s.runID == "" || s.role == "":
			report("cannot be identified: INFO has no "+missing(s), nil)
		case s.role != "master":
			report("", replicaError(s.role))
		default:
			if j, dup := first[s.runID]; dup && j != i {
				report("", c.sameServer(j, i, s.runID))
			} else {
				first[s.runID] = i
			}
		}
	}
	for i, s := range ids {
		if setting, n := replaySetting(c.nodes[i].client); setting != "" {
			problem(i, replayProblem(setting, n), ErrReplayingClient)
		}
		switch {
		case c.nodes[i].shards != nil && heard[i] && errs[i] == nil:
			for _, n := range nodes[i] {
				check(i, n.addr, n.s, n.err)
			}
		case c.nodes[i].shards != nil:
			check(i, "", nil, errs[i])
		case c.nodes[i].id == nil:
			problem(i, fmt.Sprintf("cannot be identified: a %T, not a *redis.Client", c.nodes[i].client), nil)
		default:
			check(i, "", s, errs[i])
		}
	}
	return errors.Join(problems...)
}

// timeout reports whether err says that a context or a deadline ended.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &ne) && ne.Timeout()
}

// missing names the fields s lacks.
func missing(s *serverID) string {
	switch {
	case s.runID == "" && s.role == "":
		return "run_id nor role"
	case s.runID == "":
		return "run_id"
	}
	return "role"
}

// sameAddr returns a key under which two *redis.Client masters that
// certainly reach the same server (and database) are equal. It does no
// I/O. The key is the address with loopback host names made one:
// "localhost", "127.0.0.1", "::1" and "". IP addresses are in canonical
// form, and the port is a number. It returns "" when there is no fixed
// TCP address.
func sameAddr(o *redis.Options) string {
	if o.Network == "unix" || o.Addr == "FailoverClient" {
		return ""
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return ""
	}
	if p, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(p, 10)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ip.IsLoopback() && (ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()) {
			host = "localhost"
		} else {
			host = ip.String()
		}
	} else if host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%s/%d", host, port, o.DB)
}
