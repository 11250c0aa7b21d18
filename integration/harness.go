// Package integration starts and controls independent Redis masters for the
// integration tests, the nemesis suite and the benchmarks of redlock: local
// redis-server processes (the default) or Docker containers through
// testcontainers-go (REDLOCK_BACKEND=container). It is a module of its own,
// so that none of its dependencies reach the users of redlock.
//
// The process backend lives in redlock's internal/harness, which the root
// module's own tests and the demo share; the names below are that package's.
package integration

import (
	"context"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/redis/go-redis/v9"
)

type (
	// Master is one Redis master under test control.
	Master = harness.Master
	// Cluster is a set of independent masters plus clients for them.
	Cluster = harness.Cluster
	// ProcessOptions configures StartProcesses.
	ProcessOptions = harness.ProcessOptions
	// RedisCluster is a Redis Cluster of local processes, one Redlock
	// master with shards.
	RedisCluster = harness.RedisCluster
	// RedisClusterOptions configures StartRedisCluster.
	RedisClusterOptions = harness.RedisClusterOptions
)

var (
	// ErrNotRunning is returned (wrapped) by Pause and Resume on a master
	// that is not running.
	ErrNotRunning = harness.ErrNotRunning
	// ErrNoRedisServer is returned (wrapped) by StartProcesses when the
	// redis-server binary cannot be found.
	ErrNoRedisServer = harness.ErrNoRedisServer
)

// StartProcesses starts n redis-server processes; see harness.StartProcesses.
func StartProcesses(ctx context.Context, n int, opts ProcessOptions) (*Cluster, error) {
	return harness.StartProcesses(ctx, n, opts)
}

// StartRedisCluster starts a Redis Cluster; see harness.StartRedisCluster.
func StartRedisCluster(ctx context.Context, opts RedisClusterOptions) (*RedisCluster, error) {
	return harness.StartRedisCluster(ctx, opts)
}

// MasterOptions returns go-redis options for a Redlock master at addr; see
// harness.MasterOptions.
func MasterOptions(addr string) *redis.Options { return harness.MasterOptions(addr) }

// Join returns one Cluster of the masters of cs, in order. Its Close
// closes each of cs, after killing the masters.
func Join(cs ...*Cluster) *Cluster {
	var masters []Master
	var closes []func() error
	for _, c := range cs {
		masters = append(masters, c.Masters...)
		closes = append(closes, c.Close)
	}
	return harness.New(masters, closes...)
}
