package nemesis

import (
	"context"
	"errors"

	"github.com/go-redlock/redlock/integration"
)

// RedisCluster is a Redis Cluster of local processes (three shards, a
// master and a replica each) as one Redlock master. Every node announces
// a proxy (Link) to the cluster: replicas replicate through their
// master's proxy, so that a test can keep a write from them. Clients made
// by NewClient dial the nodes themselves, and the cluster bus is direct:
// a proxy's faults touch replication alone.
type RedisCluster struct {
	*integration.RedisCluster
	Link *Proxies // Link's proxy i is server i's
}

// StartRedisCluster starts the cluster and its proxies. It blocks until
// the cluster is assembled and every replica is in sync, bounded by ctx
// and 30s. Close stops it. On failure everything started is stopped.
func StartRedisCluster(ctx context.Context) (*RedisCluster, error) {
	c := &RedisCluster{}
	rc, err := integration.StartRedisCluster(ctx, integration.RedisClusterOptions{
		Announce: func(addrs []string) ([]string, error) {
			p, err := NewProxies(addrs)
			if err != nil {
				return nil, err
			}
			c.Link = p
			return p.Addrs(), nil
		},
	})
	if err != nil {
		if c.Link != nil {
			err = errors.Join(err, c.Link.Close())
		}
		return nil, err
	}
	c.RedisCluster = rc
	return c, nil
}

// Close stops the servers, then the proxies. It is idempotent.
func (c *RedisCluster) Close() error {
	return errors.Join(c.RedisCluster.Close(), c.Link.Close())
}
