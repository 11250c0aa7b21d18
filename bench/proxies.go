package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxies puts a toxiproxy proxy, run inside this process, in front of each
// master, so that one master can be slowed down. Safe for concurrent use.
type Proxies struct {
	proxies []*toxiproxy.Proxy
}

// StartProxies starts one proxy on a free 127.0.0.1 port per upstream.
func StartProxies(upstreams []string) (*Proxies, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := &Proxies{}
	for i, up := range upstreams {
		px := toxiproxy.NewProxy(srv, fmt.Sprintf("m%d", i), "127.0.0.1:0", up)
		if err := px.Start(); err != nil {
			p.Close()
			return nil, fmt.Errorf("proxy for %s: %w", up, err)
		}
		p.proxies = append(p.proxies, px)
	}
	return p, nil
}

// Addrs returns the proxies' listen addresses, in upstream order.
func (p *Proxies) Addrs() []string {
	addrs := make([]string, len(p.proxies))
	for i, px := range p.proxies {
		addrs[i] = px.Listen
	}
	return addrs
}

// slowToxic names the latency toxic Slow adds.
const slowToxic = "slow"

// Slow delays every reply from master i by d (a downstream latency toxic),
// on open connections too. d = 0 removes the delay.
func (p *Proxies) Slow(i int, d time.Duration) error {
	tc := p.proxies[i].Toxics
	if tc.GetToxic(slowToxic) != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tc.RemoveToxic(ctx, slowToxic); err != nil {
			return err
		}
	}
	if d <= 0 {
		return nil
	}
	_, err := tc.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":%q,"type":"latency","stream":"downstream","attributes":{"latency":%d}}`,
		slowToxic, d.Milliseconds())))
	return err
}

// Close stops every proxy and closes its connections. It always returns
// nil (toxiproxy's Stop reports nothing); it returns an error for the sake
// of io.Closer.
func (p *Proxies) Close() error {
	for _, px := range p.proxies {
		px.Stop()
	}
	return nil
}
