package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// slots is how many hash slots a Redis Cluster has.
const slots = 16384

// shards sends the rounds' calls of a *redis.ClusterClient master to the
// node that serves the lock's slot, through a pipeline of its own. That
// node is the server of the call: an identity per node (run_id, role,
// replicas), WAIT and ROLE on the node's connection after a durable
// write. A node that takes over a slot this client used is quarantined,
// as a new run_id would be. A call a node redirects (MOVED, ASK) or
// refuses (CLUSTERDOWN, TRYAGAIN) is an error, never an agreement. It
// makes the client reload its slot map. Safe for concurrent use.
type shards struct {
	cc      *redis.ClusterClient
	limit   time.Duration // of each node's pipeline
	lanes   int
	longest *atomic.Int64

	// loaded: the client has its slot map, so MasterForKey never blocks.
	loaded atomic.Bool
	// owners is the node each slot was last routed to, if any.
	owners [slots]atomic.Pointer[shard]

	mu     sync.Mutex // guards nodes and closed
	nodes  map[*redis.Client]*shard
	closed bool
}

// shard is one node of a cluster master. Its fields never change.
type shard struct {
	pipe *pipeline.Pipeline
	id   *idCache
}

var _ quorum.Router = (*shards)(nil)

// errNoSlotMap answers a call before the cluster's slot map is loaded.
var errNoSlotMap = fmt.Errorf("%w: the cluster's slot map is not loaded yet", pipeline.ErrNotSent)

func newShards(cc *redis.ClusterClient, limit time.Duration, lanes int, longest *atomic.Int64) *shards {
	return &shards{cc: cc, limit: limit, lanes: lanes, longest: longest, nodes: map[*redis.Client]*shard{}}
}

// Route returns the pipeline and identity of the node that serves the
// slot of keys, as the client's slot map says. It never blocks: before
// the map is loaded (see prepare), it answers errNoSlotMap.
func (s *shards) Route(keys pipeline.Keys) (quorum.Target, error) {
	if !s.loaded.Load() {
		return quorum.Target{}, errNoSlotMap
	}
	if len(keys.Names) == 0 {
		return quorum.Target{}, fmt.Errorf("%w: a call without keys has no slot", pipeline.ErrNotSent)
	}
	key := keys.Names[0]
	rc, err := s.cc.MasterForKey(context.Background(), key)
	if err != nil {
		return quorum.Target{}, fmt.Errorf("%w: the node of slot %d: %w", pipeline.ErrNotSent, keySlot(key), err)
	}
	sh, err := s.shard(rc)
	if err != nil {
		return quorum.Target{}, err
	}
	// A slot that moved may lack writes its old node took: a failover
	// this client saw, as a new run_id would be.
	if old := s.owners[keySlot(key)].Swap(sh); old != nil && old != sh {
		sh.id.tookOver()
	}
	return quorum.Target{Pipe: sh.pipe, ID: sh.id}, nil
}

// Answered reloads the slot map where err says a node no longer serves
// the slot, or is down: a redirect, a cluster error, a network error, a
// client closed. The reload runs in the background; go-redis runs at most
// one at a time, and none within 200ms of the last.
func (s *shards) Answered(_ quorum.Target, err error) {
	if stale(err) {
		s.cc.ReloadState(context.Background())
	}
}

// stale reports whether a call's error says the slot map may be stale.
// A script's own error does not.
func stale(err error) bool {
	if err == nil || errors.Is(err, pipeline.ErrNotSent) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	msg := re.Error()
	for _, p := range []string{"MOVED ", "ASK ", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// shard returns node rc's shard, made on first use.
func (s *shards) shard(rc *redis.Client) (*shard, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.nodes[rc]; sh != nil {
		return sh, nil
	}
	if s.closed {
		return nil, pipeline.ErrClosed
	}
	pipe := pipeline.New(rc, s.limit, s.lanes)
	pipe.UseFunctions(functions)
	id := newIDCache(rc, s.longest)
	// A node may gain replicas, or become one, with no new connection.
	id.unannounced = true
	sh := &shard{pipe: pipe, id: id}
	s.nodes[rc] = sh
	return sh, nil
}

// prepared reports whether the slot map is loaded.
func (s *shards) prepared() bool { return s.loaded.Load() }

// prepare loads the slot map, then identifies every master node and loads
// the scripts' library there. So a round's first call to a node waits for
// the replicas it has. It blocks until ctx ends or each node has
// answered. Errors are left to the rounds.
func (s *shards) prepare(ctx context.Context) {
	err := s.cc.ForEachMaster(ctx, func(ctx context.Context, rc *redis.Client) error {
		if sh, err := s.shard(rc); err == nil {
			sh.pipe.Probe(ctx)
			_, _ = sh.id.get(ctx)
		}
		return nil
	})
	if err == nil { // the slot map is loaded
		s.loaded.Store(true)
	}
}

// nodeID is what a master node of a cluster said about itself.
type nodeID struct {
	addr string
	s    *serverID // nil where INFO failed
	err  error
}

// identify loads the slot map afresh, then asks each master node who it
// is (INFO), whatever was cached. Later rounds use what it learned. It
// blocks until every node answered, or until ctx ends. It returns the
// nodes by address, or why the slot map could not be loaded.
func (s *shards) identify(ctx context.Context) ([]nodeID, error) {
	var mu sync.Mutex
	var nodes []nodeID
	err := s.cc.ForEachMaster(ctx, func(ctx context.Context, rc *redis.Client) error {
		n := nodeID{addr: rc.Options().Addr}
		sh, err := s.shard(rc)
		if err == nil {
			sh.id.refresh()
			n.s, n.err = sh.id.get(ctx)
		} else {
			n.err = err
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.loaded.Store(true)
	slices.SortFunc(nodes, func(a, b nodeID) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// closePipes closes every node's pipeline at once, or aborts it, and
// waits. No node is added after that.
func (s *shards) closePipes(abort bool) {
	s.mu.Lock()
	s.closed = true
	pipes := make([]*pipeline.Pipeline, 0, len(s.nodes))
	for _, sh := range s.nodes {
		pipes = append(pipes, sh.pipe)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range pipes {
		if abort {
			wg.Go(p.Abort)
		} else {
			wg.Go(p.Close)
		}
	}
	wg.Wait()
}

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag, the text between its first '{' and the next '}' if not
// empty, else of the whole key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slots
}
