package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/quorum"
)

// preparation is the setup of one master that the calls of a round must
// not wait for. Setup opens its connections, loads the functions' library
// and identifies the server. At most one is under way per master.
type preparation struct {
	// mu guards done and ended.
	mu    sync.Mutex
	done  chan struct{} // closed when the one under way ends; nil if none
	ended time.Time     // when the last one ended
}

// retryPreparation is how often a master's setup is tried again in the
// background while a quorum is ready without it (a dead master, say).
const retryPreparation = time.Second

// unprepared reports whether master i has setup to do before an acquire.
// Its library's load may be due. Or its server was never identified,
// which also opens the connections it lacks. It costs two atomic loads in
// the steady state. It never calls PoolStats, which allocates.
func (c *Client) unprepared(i int) bool {
	nd := &c.nodes[i]
	return nd.id != nil && !nd.id.known() || nd.pipe.ProbeDue() || nd.shards != nil && !nd.shards.prepared()
}

// prepare does the masters' setup before an acquire's round starts. So
// setup does not count toward the round's MasterTimeout, and a fresh
// client's first acquire is decided like any other. A round after a pool
// opened a connection still identifies that master within the round.
//
// While fewer than a quorum of masters are ready, it waits for their
// setup. It then waits for the others twice as long as that took, at
// least quorum.MinStragglerWait. It waits lateCallFactor*MasterTimeout in
// all at most, or until ctx ends. Setup still under way then goes on in
// the background, under the same bound, and Close waits for it. Where a
// quorum is ready, prepare waits for nothing. It then starts a master's
// setup in the background at most once per retryPreparation.
func (c *Client) prepare(ctx context.Context) {
	var todo uint64 // masters with setup to do
	ready := len(c.nodes)
	for i := range c.nodes {
		if c.unprepared(i) {
			todo |= 1 << i
			ready--
		}
	}
	if todo == 0 {
		return
	}
	wait := ready < c.quorum
	if !c.gate.enter(1) { // held while it starts setups, so that Close waits for them
		return
	}
	var dones []<-chan struct{}
	for i := range c.nodes {
		if todo&(1<<i) == 0 {
			continue
		}
		if done := c.startPreparation(i, wait); wait {
			dones = append(dones, done)
		}
	}
	c.gate.leave(1)
	if wait {
		c.awaitPreparation(ctx, dones, ready)
	}
}

// awaitPreparation waits for the setups whose ends are dones. ready
// masters are ready already. It waits as prepare says.
func (c *Client) awaitPreparation(ctx context.Context, dones []<-chan struct{}, ready int) {
	stop := make(chan struct{})
	defer close(stop)
	prepared := make(chan struct{}, len(dones))
	for _, done := range dones {
		go func() {
			select {
			case <-done:
				prepared <- struct{}{}
			case <-stop:
			}
		}()
	}
	start := time.Now()
	bound := time.NewTimer(lateCallFactor * c.masterTimeout)
	defer bound.Stop()
	var grace <-chan time.Time
	for range dones {
		select {
		case <-prepared:
			if ready++; ready == c.quorum {
				t := time.NewTimer(max(2*time.Since(start), quorum.MinStragglerWait))
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			return
		case <-bound.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// startPreparation starts the setup of master i, unless one is under
// way. It returns a channel closed when the setup ends. Unless needed, it
// starts none within retryPreparation of the last one's end. It may then
// return nil. The caller must hold a count in c.gate.
func (c *Client) startPreparation(i int, needed bool) <-chan struct{} {
	nd := &c.nodes[i]
	p := nd.prep
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return p.done
	}
	if !needed && time.Since(p.ended) < retryPreparation {
		return nil
	}
	done := make(chan struct{})
	p.done = done
	c.gate.enterHeld(1)
	go func() {
		defer c.gate.leave(1)
		// Shared by the rounds that wait for it. So no caller's context
		// ends it; only its bound or Close giving up does.
		ctx, cancel := context.WithTimeout(context.Background(), lateCallFactor*c.masterTimeout)
		defer cancel()
		defer context.AfterFunc(c.gate.abandon, cancel)()
		// The load first: a connection it opens is then identified too.
		nd.pipe.Probe(ctx)
		if nd.id != nil {
			_, _ = nd.id.get(ctx) // an error is left to the round's admit
		}
		if nd.shards != nil {
			nd.shards.prepare(ctx)
		}
		p.mu.Lock()
		p.done, p.ended = nil, time.Now()
		p.mu.Unlock()
		close(done)
	}()
	return done
}
