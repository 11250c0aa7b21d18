package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settings of every Redis Cluster node: a master is failed after 1s of
// silence. StartRedisCluster and each failover wait at most clusterWait.
const (
	ClusterNodeTimeout = time.Second
	clusterWait        = 30 * time.Second
	busPortOffset      = 10000 // Redis's default: a node's bus port is its port + 10000
)

// RedisClusterOptions configures StartRedisCluster. The zero value is
// ready to use.
type RedisClusterOptions struct {
	// Shards is how many shards, each a master and one replica; default 3.
	Shards int
	// Announce, if not nil, returns the address each node announces to
	// the cluster, given the addresses it listens on: its replicas and
	// the clients dial that one (a proxy, say). NewClient's clients dial
	// the node itself. The cluster bus is never proxied.
	Announce func(addrs []string) ([]string, error)
}

// RedisCluster is a Redis Cluster of local redis-server processes in
// cluster mode. Shard i's first master is Servers.Masters[i], its first
// replica Servers.Masters[Shards+i]. The slots are split evenly, in
// order. Its methods are safe for concurrent use; failovers run one at a
// time.
type RedisCluster struct {
	Servers *Cluster
	Shards  int

	announced []string          // each server's address in the cluster
	listening map[string]string // announced address -> the one it listens on

	fail sync.Mutex // serializes failovers
	mu   sync.Mutex // guards down
	down []bool     // servers killed
}

// StartRedisCluster starts a cluster of 2*Shards nodes and assembles it:
// slots to the masters (CLUSTER ADDSLOTSRANGE), MEET, REPLICATE. It
// blocks until every node has every other node, each replica is in sync,
// and each node maps every slot to its master and replica, bounded by ctx
// and 30s. Close stops it. On failure everything started is stopped.
func StartRedisCluster(ctx context.Context, opts RedisClusterOptions) (rc *RedisCluster, err error) {
	ctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	shards := opts.Shards
	if shards == 0 {
		shards = 3
	}
	servers, err := StartProcesses(ctx, 2*shards, ProcessOptions{Args: []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
		"--cluster-announce-ip", "127.0.0.1",
		// Full syncs start at once instead of waiting for more replicas.
		"--repl-diskless-sync-delay", "0",
		// CLUSTER SLOTS lists a replica once it has an offset: once its
		// master pinged it through the stream (every 10s by default).
		"--repl-ping-replica-period", "1",
	}})
	if err != nil {
		return nil, err
	}
	rc = &RedisCluster{Servers: servers, Shards: shards, listening: map[string]string{}, down: make([]bool, 2*shards)}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("redis cluster: %w", err), rc.Close())
			rc = nil
		}
	}()
	addrs := servers.Addrs()
	rc.announced = addrs
	if opts.Announce != nil {
		if rc.announced, err = opts.Announce(addrs); err != nil {
			return rc, err
		}
	}
	ids := make([]string, len(addrs))
	for i, addr := range addrs {
		rc.listening[rc.announced[i]] = addr
		a := servers.Admin(i)
		if rc.announced[i] != addr {
			_, port, _ := net.SplitHostPort(rc.announced[i])
			_, own, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(own)
			if err := a.ConfigSet(ctx, "cluster-announce-port", port).Err(); err != nil {
				return rc, err
			}
			// The bus stays on the node's own port.
			if err := a.ConfigSet(ctx, "cluster-announce-bus-port", strconv.Itoa(p+busPortOffset)).Err(); err != nil {
				return rc, err
			}
		}
		if ids[i], err = a.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			return rc, err
		}
	}
	for i := range shards {
		first, last := i*16384/shards, (i+1)*16384/shards-1
		if err := servers.Admin(i).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return rc, err
		}
	}
	for i := 1; i < len(addrs); i++ {
		host, port, _ := net.SplitHostPort(addrs[i])
		if err := servers.Admin(0).ClusterMeet(ctx, host, port).Err(); err != nil {
			return rc, err
		}
	}
	for i := shards; i < len(addrs); i++ {
		// A node must know the master before it can replicate it.
		if err := Poll(ctx, fmt.Sprintf("%s replicates %s", addrs[i], addrs[i-shards]), func() (bool, error) {
			err := servers.Admin(i).Do(ctx, "CLUSTER", "REPLICATE", ids[i-shards]).Err()
			return err == nil, err
		}); err != nil {
			return rc, err
		}
	}
	for i := range shards {
		if err := rc.awaitShard(ctx, i*16384/shards, i, shards+i); err != nil {
			return rc, err
		}
	}
	return rc, nil
}

// Close stops every node. It is idempotent.
func (rc *RedisCluster) Close() error { return rc.Servers.Close() }

// Announced returns the address server i announces to the cluster.
func (rc *RedisCluster) Announced(i int) string { return rc.announced[i] }

// NewClient returns a cluster client of rc, as a Redlock master: context
// deadlines honoured, no retries, 200ms dial and write timeouts, reads
// that wait up to 2s (WAIT blocks for up to 3/4 of a MasterTimeout). It
// dials each node where it listens, whatever the node announces. The
// caller closes it.
func (rc *RedisCluster) NewClient() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: append([]string(nil), rc.announced...),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if own, ok := rc.listening[addr]; ok {
				addr = own
			}
			d := net.Dialer{Timeout: clientTimeout}
			return d.DialContext(ctx, network, addr)
		},
		DialTimeout:           clientTimeout,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          clientTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
		DisableIdentity:       true,
	})
}

// Shard returns the servers that are the master and the replica of key's
// slot, as the first live server's CLUSTER SLOTS tells.
func (rc *RedisCluster) Shard(ctx context.Context, key string) (master, replica int, err error) {
	s, err := rc.live(0)
	if err != nil {
		return 0, 0, err
	}
	slot, err := rc.Servers.Admin(s).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, 0, err
	}
	nodes, err := rc.slotNodes(ctx, s, int(slot))
	if err != nil {
		return 0, 0, err
	}
	if len(nodes) != 2 {
		return 0, 0, fmt.Errorf("slot %d has %d nodes, not a master and a replica: %v", slot, len(nodes), nodes)
	}
	return nodes[0], nodes[1], nil
}

// live returns the first server from i on that was not killed.
func (rc *RedisCluster) live(i int) (int, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for ; i < len(rc.down); i++ {
		if !rc.down[i] {
			return i, nil
		}
	}
	return 0, errors.New("every node is down")
}

// slotNodes returns the servers that serve slot as server s tells them,
// the master first. A node it does not know is an error.
func (rc *RedisCluster) slotNodes(ctx context.Context, s, slot int) ([]int, error) {
	//lint:ignore SA1019 go-redis routes by CLUSTER SLOTS: wait for what its clients see.
	ranges, err := rc.Servers.Admin(s).ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if slot < r.Start || slot > r.End {
			continue
		}
		var out []int
		for _, n := range r.Nodes {
			i := rc.index(n.Addr)
			if i < 0 {
				return nil, fmt.Errorf("slot %d: node %s is none of the servers", slot, n.Addr)
			}
			out = append(out, i)
		}
		return out, nil
	}
	return nil, fmt.Errorf("slot %d is served by no node", slot)
}

// index returns the server that announces addr, or -1.
func (rc *RedisCluster) index(addr string) int {
	for i, a := range rc.announced {
		if a == addr {
			return i
		}
	}
	return -1
}

// awaitShard waits until every live server maps slot to master, and to
// replica where replica >= 0, and until that replica is in sync.
func (rc *RedisCluster) awaitShard(ctx context.Context, slot, master, replica int) error {
	want := []int{master}
	if replica >= 0 {
		want = append(want, replica)
	}
	return Poll(ctx, fmt.Sprintf("every node maps slot %d to servers %v", slot, want), func() (bool, error) {
		for s := range rc.down {
			if rc.isDown(s) {
				continue
			}
			got, err := rc.slotNodes(ctx, s, slot)
			if err != nil {
				return false, err
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return false, fmt.Errorf("server %d maps slot %d to %v", s, slot, got)
			}
			info, err := rc.Servers.Admin(s).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, fmt.Errorf("server %d: cluster state not ok (%v)", s, err)
			}
		}
		if replica < 0 {
			return true, nil
		}
		info, err := rc.Servers.Admin(replica).Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = fmt.Errorf("server %d is no replica in sync", replica)
		}
		return err == nil, err
	})
}

func (rc *RedisCluster) isDown(i int) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.down[i]
}

// KillMaster kills the master of key's slot (SIGKILL), and has its
// replica take over at once (CLUSTER FAILOVER TAKEOVER). It blocks until
// every live node maps the slot to the former replica alone. The killed
// node stays down: the shard has no replica after that. It returns the
// servers killed and promoted. Bounded by ctx and 30s.
func (rc *RedisCluster) KillMaster(ctx context.Context, key string) (killed, promoted int, err error) {
	rc.fail.Lock()
	defer rc.fail.Unlock()
	ctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	m, r, err := rc.Shard(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	slot, err := rc.Servers.Admin(r).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return m, r, err
	}
	if err := rc.Servers.Masters[m].Kill(ctx); err != nil {
		return m, r, err
	}
	rc.mu.Lock()
	rc.down[m] = true
	rc.mu.Unlock()
	if err := rc.promote(ctx, r, "TAKEOVER"); err != nil {
		return m, r, err
	}
	return m, r, rc.awaitShard(ctx, int(slot), r, -1)
}

// Failover has the replica of key's slot take over from its live master
// (CLUSTER FAILOVER FORCE: without waiting for the master to agree). It
// blocks until every node maps the slot to the former replica, with the
// former master as its replica, in sync. It returns the servers demoted
// and promoted. Bounded by ctx and 30s.
func (rc *RedisCluster) Failover(ctx context.Context, key string) (demoted, promoted int, err error) {
	rc.fail.Lock()
	defer rc.fail.Unlock()
	ctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	m, r, err := rc.Shard(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	slot, err := rc.Servers.Admin(r).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return m, r, err
	}
	if err := rc.promote(ctx, r, "FORCE"); err != nil {
		return m, r, err
	}
	return m, r, rc.awaitShard(ctx, int(slot), r, m)
}

// promote sends CLUSTER FAILOVER with how to replica r until it says it
// is a master.
func (rc *RedisCluster) promote(ctx context.Context, r int, how string) error {
	admin := rc.Servers.Admin(r)
	sent := false
	return Poll(ctx, fmt.Sprintf("server %d becomes a master (CLUSTER FAILOVER %s)", r, how), func() (bool, error) {
		role, err := admin.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return true, nil
		}
		if !sent {
			if err := admin.Do(ctx, "CLUSTER", "FAILOVER", how).Err(); err != nil {
				return false, err
			}
			sent = true
		}
		return false, err
	})
}

// ReadKey returns key's value on server i, a master or a replica (which
// READONLY lets answer), or redis.Nil.
func (rc *RedisCluster) ReadKey(ctx context.Context, i int, key string) (string, error) {
	var get *redis.StringCmd
	_, err := rc.Servers.Admin(i).Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ReadOnly(ctx)
		get = p.Get(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return "", redis.Nil
	}
	if err != nil {
		return "", err
	}
	return get.Val(), nil
}
