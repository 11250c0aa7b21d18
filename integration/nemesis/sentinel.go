package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/integration"
	"github.com/go-redlock/redlock/internal/harness"
)

// Sentinel settings of every group: a primary is down after 1s of
// silence, and a failover is retried after 2s.
const (
	SentinelDownAfter       = 1000 * time.Millisecond
	SentinelFailoverTimeout = 2 * time.Second
	// sentinelWait bounds each wait of a group: its start, a failover.
	sentinelWait = 20 * time.Second
)

// SentinelGroup is one Sentinel-managed master: a primary, a replica and
// three sentinels, each a local process. The replica first replicates
// through a proxy (Link), so that a test can keep a write from it. Its
// methods are safe for concurrent use; a group's faults run one at a time.
type SentinelGroup struct {
	Name      string               // the master's name in Sentinel
	Servers   *integration.Cluster // [0] the first primary, [1] the first replica
	Sentinels *integration.Cluster // three redis-sentinel processes
	Link      *Proxies             // the first replica's link to the first primary

	mu sync.Mutex // serializes Failover and KillPrimary
}

// StartSentinelGroups starts n groups, named g0, g1..., in parallel. It
// blocks until each replica is in sync and each sentinel knows the
// replica and the other two sentinels, bounded by ctx and 20s per group.
// Close stops them. On failure everything started is stopped.
func StartSentinelGroups(ctx context.Context, n int) ([]*SentinelGroup, error) {
	gs := make([]*SentinelGroup, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { gs[i], errs[i] = startSentinelGroup(ctx, fmt.Sprintf("g%d", i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, g := range gs {
			if g != nil {
				err = errors.Join(err, g.Close())
			}
		}
		return nil, err
	}
	return gs, nil
}

func startSentinelGroup(ctx context.Context, name string) (g *SentinelGroup, err error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	g = &SentinelGroup{Name: name}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("sentinel group %s: %w", name, err), g.Close())
			g = nil
		}
	}()
	// Full syncs start at once instead of waiting 5s for more replicas.
	args := []string{"--repl-diskless-sync-delay", "0"}
	primary, err := integration.StartProcesses(ctx, 1, integration.ProcessOptions{Args: args})
	if err != nil {
		return g, err
	}
	g.Servers = primary
	if g.Link, err = NewProxies([]string{primary.Masters[0].Addr()}); err != nil {
		return g, err
	}
	host, port, err := net.SplitHostPort(g.Link.Addrs()[0])
	if err != nil {
		return g, err
	}
	replica, err := integration.StartProcesses(ctx, 1, integration.ProcessOptions{Args: append(args, "--replicaof", host, port)})
	if err != nil {
		return g, err
	}
	g.Servers = integration.Join(primary, replica)
	if err := awaitInSync(ctx, g.Servers.Admin(1)); err != nil {
		return g, err
	}
	_, pport, err := net.SplitHostPort(primary.Masters[0].Addr())
	if err != nil {
		return g, err
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n",
		name, pport, SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
	if g.Sentinels, err = integration.StartProcesses(ctx, 3, integration.ProcessOptions{Binary: "redis-sentinel", Config: conf}); err != nil {
		return g, err
	}
	// A failover needs a majority of the sentinels that know each other,
	// and a replica they know.
	for i := range g.Sentinels.Masters {
		s := g.Sentinels.Admin(i)
		if err := harness.Poll(ctx, "sentinel "+g.Sentinels.Masters[i].Addr()+" knows the replica and the others", func() (bool, error) {
			reps, err := s.Do(ctx, "SENTINEL", "REPLICAS", name).Slice()
			if err != nil {
				return false, err
			}
			sens, err := s.Do(ctx, "SENTINEL", "SENTINELS", name).Slice()
			return len(reps) == 1 && len(sens) == 2, err
		}); err != nil {
			return g, err
		}
	}
	return g, nil
}

// awaitInSync waits until the replica that admin reaches has its link to
// its primary up.
func awaitInSync(ctx context.Context, admin *redis.Client) error {
	return harness.Poll(ctx, admin.Options().Addr+" is a replica in sync", func() (bool, error) {
		info, err := admin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up"), err
	})
}

// Close stops the sentinels, the servers and the link. It is idempotent.
func (g *SentinelGroup) Close() error {
	var errs []error
	if g.Sentinels != nil {
		errs = append(errs, g.Sentinels.Close())
	}
	if g.Servers != nil {
		errs = append(errs, g.Servers.Close())
	}
	if g.Link != nil {
		errs = append(errs, g.Link.Close())
	}
	return errors.Join(errs...)
}

// SentinelAddrs returns the sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string { return g.Sentinels.Addrs() }

// NewClient returns a Sentinel-managed go-redis client of the group, as
// a Redlock master: context deadlines honoured, no retries. Its reads
// wait up to 2s: WAIT blocks for up to 3/4 of a MasterTimeout. The
// caller closes it.
func (g *SentinelGroup) NewClient() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            g.Name,
		SentinelAddrs:         g.SentinelAddrs(),
		DialTimeout:           ClientTimeout,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          ClientTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
		DisableIdentity:       true,
	})
}

// PrimaryAddr returns the primary's address as the first sentinel tells it.
func (g *SentinelGroup) PrimaryAddr(ctx context.Context) (string, error) {
	addr, err := g.Sentinels.Admin(0).Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name).StringSlice()
	if err != nil {
		return "", err
	}
	if len(addr) != 2 {
		return "", fmt.Errorf("sentinel group %s: GET-MASTER-ADDR-BY-NAME: %q", g.Name, addr)
	}
	return net.JoinHostPort(addr[0], addr[1]), nil
}

// primary returns the index in Servers of the primary, as the sentinels
// tell it.
func (g *SentinelGroup) primary(ctx context.Context) (int, error) {
	addr, err := g.PrimaryAddr(ctx)
	if err != nil {
		return 0, err
	}
	for i, m := range g.Servers.Masters {
		if m.Addr() == addr {
			return i, nil
		}
	}
	return 0, fmt.Errorf("sentinel group %s: primary %s is none of its servers", g.Name, addr)
}

// Primary returns the admin client of the primary, as the sentinels tell it.
func (g *SentinelGroup) Primary(ctx context.Context) (*redis.Client, error) {
	i, err := g.primary(ctx)
	if err != nil {
		return nil, err
	}
	return g.Servers.Admin(i), nil
}

// Replica returns the admin client of the server that is not the primary.
func (g *SentinelGroup) Replica(ctx context.Context) (*redis.Client, error) {
	i, err := g.primary(ctx)
	if err != nil {
		return nil, err
	}
	return g.Servers.Admin(1 - i), nil
}

// Failover has the sentinels promote the replica (SENTINEL FAILOVER). It
// blocks until every sentinel names the new primary, which says it is
// one, and the old primary replicates from it. Bounded by ctx and 20s.
func (g *SentinelGroup) Failover(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	old, err := g.primary(ctx)
	if err != nil {
		return err
	}
	// Sentinel may refuse or abort a failover while it has not yet seen
	// the replica in sync (NOGOODSLAVE), or while it rewires the replica
	// to its primary (+fix-slave-config): it is asked again.
	for {
		err := g.Sentinels.Admin(0).Do(ctx, "SENTINEL", "FAILOVER", g.Name).Err()
		if err != nil {
			if !Sleep(ctx, 250*time.Millisecond) {
				return fmt.Errorf("sentinel group %s: SENTINEL FAILOVER: %w", g.Name, err)
			}
			continue
		}
		try, cancel := context.WithTimeout(ctx, 3*SentinelFailoverTimeout/2)
		err = g.awaitPromoted(try, 1-old)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return awaitInSync(ctx, g.Servers.Admin(old))
}

// KillPrimary kills the primary (SIGKILL), waits for the sentinels to
// promote the replica, then restarts the old primary empty. It blocks
// until the old primary replicates from the new one. Bounded by ctx and
// 20s.
func (g *SentinelGroup) KillPrimary(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	old, err := g.primary(ctx)
	if err != nil {
		return err
	}
	if err := g.Servers.Masters[old].Kill(ctx); err != nil {
		return err
	}
	if err := g.awaitPromoted(ctx, 1-old); err != nil {
		return err
	}
	// Restarted as a master, the empty server could be promoted back
	// before Sentinel makes it a replica: every write would be lost.
	host, port, err := net.SplitHostPort(g.Servers.Masters[1-old].Addr())
	if err != nil {
		return err
	}
	rw, ok := g.Servers.Masters[old].(interface {
		RestartWith(ctx context.Context, args ...string) error
	})
	if !ok {
		return fmt.Errorf("sentinel group %s: a %T cannot restart as a replica", g.Name, g.Servers.Masters[old])
	}
	if err := rw.RestartWith(ctx, "--replicaof", host, port); err != nil {
		return err
	}
	return awaitInSync(ctx, g.Servers.Admin(old))
}

// awaitPromoted waits until every sentinel names server i the primary,
// and it says it is one.
func (g *SentinelGroup) awaitPromoted(ctx context.Context, i int) error {
	want := g.Servers.Masters[i].Addr()
	return harness.Poll(ctx, fmt.Sprintf("group %s promotes %s", g.Name, want), func() (bool, error) {
		for s := range g.Sentinels.Masters {
			addr, err := g.Sentinels.Admin(s).Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name).StringSlice()
			if err != nil {
				return false, err
			}
			if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != want {
				return false, fmt.Errorf("sentinel %d names %v", s, addr)
			}
		}
		info, err := g.Servers.Admin(i).Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "role:master") {
			err = fmt.Errorf("%s is no master yet", want)
		}
		return err == nil, err
	})
}
