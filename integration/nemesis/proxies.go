package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
)

// ClientTimeout is the dial, read and write timeout of the go-redis clients
// made by Proxies.NewClients, like integration.Cluster.Clients.
const ClientTimeout = 200 * time.Millisecond

// Proxies runs a toxiproxy server inside the test process with one TCP proxy
// per upstream (a Redis master), listening on 127.0.0.1. Clients that dial
// the proxies instead of the masters can be slowed down, black-holed, reset
// or cut off from one master at a time, without touching the master.
//
// Methods are safe for concurrent use; faults on one proxy are applied one
// at a time.
type Proxies struct {
	server  *toxiproxy.ApiServer
	proxies []*toxiproxy.Proxy
	addrs   []string // listen addresses, fixed at start (kept across Cut/Heal)

	mu      sync.Mutex
	clients []*redis.Client
	closed  bool
}

// NewProxies starts one proxy per upstream address, in order, each on a free
// 127.0.0.1 port. It does no I/O towards the upstreams: a proxy dials its
// upstream when a client connects. Close stops them.
func NewProxies(upstreams []string) (*Proxies, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := &Proxies{server: srv}
	for i, up := range upstreams {
		px := toxiproxy.NewProxy(srv, fmt.Sprintf("master%d", i), "127.0.0.1:0", up)
		if err := srv.Collection.Add(px, true); err != nil {
			return nil, errors.Join(fmt.Errorf("nemesis: proxy for %s: %w", up, err), p.Close())
		}
		p.proxies = append(p.proxies, px)
		p.addrs = append(p.addrs, px.Listen) // the bound address once started
	}
	return p, nil
}

// Addrs returns the proxies' listen addresses, in upstream order. They do
// not change across Cut and Heal.
func (p *Proxies) Addrs() []string { return append([]string(nil), p.addrs...) }

// Len returns the number of proxies.
func (p *Proxies) Len() int { return len(p.proxies) }

// NewClients returns new go-redis clients, one per proxy, configured like
// integration.Cluster.Clients (context deadlines honoured, 200ms timeouts,
// no retries). Each call returns clients with their own connection pools.
// Close closes them; callers must not.
func (p *Proxies) NewClients() []*redis.Client {
	out := make([]*redis.Client, len(p.addrs))
	for i, a := range p.addrs {
		out[i] = NewClient(a)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range out {
			_ = c.Close()
		}
	}
	p.clients = append(p.clients, out...)
	return out
}

// NewClient returns a go-redis client for addr configured for Redlock like
// integration.Cluster.Clients: context deadlines honoured, 200ms dial, read
// and write timeouts, no retries of commands or dials. The caller closes it.
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		DialTimeout:              ClientTimeout,
		ReadTimeout:              ClientTimeout,
		WriteTimeout:             ClientTimeout,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
		DialerRetries:            1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Toxic names; one of each kind per proxy at a time.
const (
	toxicLatency   = "latency"
	toxicBlackUp   = "blackhole_up"
	toxicBlackDown = "blackhole_down"
	toxicReset     = "reset"
)

// Latency delays every reply from master i by d (requests pass at once),
// replacing an earlier latency on it. It applies to open connections too.
func (p *Proxies) Latency(i int, d time.Duration) error {
	_ = p.removeToxic(i, toxicLatency)
	return p.addToxic(i, toxicLatency, "latency", "downstream", map[string]any{"latency": d.Milliseconds()})
}

// BlackHole drops all traffic to and from master i without closing any
// connection: requests never arrive, callers wait for their timeouts. Data
// dropped meanwhile is gone for good, so Heal does not replay it.
func (p *Proxies) BlackHole(i int) error {
	if err := p.addToxic(i, toxicBlackUp, dropToxicType, "upstream", nil); err != nil {
		return err
	}
	return p.addToxic(i, toxicBlackDown, dropToxicType, "downstream", nil)
}

// DropReplies delivers requests to master i but drops its replies: writes
// land, callers see timeouts.
func (p *Proxies) DropReplies(i int) error {
	return p.addToxic(i, toxicBlackDown, dropToxicType, "downstream", nil)
}

// ResetPeer makes the proxy of master i close every connection as soon as
// the client sends data, dropping that data (with a TCP RST on connections
// opened from now on). New connections are accepted and reset the same way
// until Heal.
func (p *Proxies) ResetPeer(i int) error {
	return p.addToxic(i, toxicReset, "reset_peer", "upstream", map[string]any{"timeout": 0})
}

// Cut stops the proxy of master i: open connections are closed and new
// ones refused, as if the master's host were unreachable. Heal restores it.
func (p *Proxies) Cut(i int) error {
	p.proxies[i].Stop()
	return nil
}

// Heal removes every toxic from the proxy of master i and restarts it if it
// was cut, on the same address.
func (p *Proxies) Heal(i int) error {
	px := p.proxies[i]
	px.Toxics.ResetToxics(context.Background())
	px.Lock()
	enabled := px.Enabled
	px.Unlock()
	if enabled {
		return nil
	}
	if err := px.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		return fmt.Errorf("nemesis: heal proxy %d: %w", i, err)
	}
	return nil
}

// HealAll heals every proxy and returns the errors joined.
func (p *Proxies) HealAll() error {
	var errs []error
	for i := range p.proxies {
		errs = append(errs, p.Heal(i))
	}
	return errors.Join(errs...)
}

// Close closes the clients made by NewClients and stops every proxy,
// closing their connections. The proxies' goroutines end shortly after.
// It is idempotent.
func (p *Proxies) Close() error {
	p.mu.Lock()
	clients := p.clients
	p.clients = nil
	p.closed = true
	p.mu.Unlock()
	for _, c := range clients {
		_ = c.Close() // "client is closed" on a second close is harmless
	}
	// Toxics stay in place: with their connections closed, every link
	// drains through them and ends.
	return p.server.Collection.Clear()
}

// dropToxicType names a toxic that drops all data and never closes the
// connection. toxiproxy's own "timeout" toxic with timeout 0 does the same
// but closes its stream when removed, which leaves the link's goroutines
// blocked for good; this one can be removed from a live link.
const dropToxicType = "nemesis_drop"

type dropToxic struct{}

func (dropToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
		}
	}
}

func init() { toxics.Register(dropToxicType, new(dropToxic)) }

func (p *Proxies) addToxic(i int, name, typ, stream string, attrs map[string]any) error {
	if attrs == nil {
		attrs = map[string]any{}
	}
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		return err
	}
	if _, err := p.proxies[i].Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
		return fmt.Errorf("nemesis: proxy %d: add %s toxic: %w", i, typ, err)
	}
	return nil
}

func (p *Proxies) removeToxic(i int, name string) error {
	return p.proxies[i].Toxics.RemoveToxic(context.Background(), name)
}
