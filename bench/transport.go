package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/pipeline"
)

// Transport is redlock's transport alone, on one master: the pipeline
// that a redlock client of one master sends its calls through (two lanes,
// calls made while a batch is in flight go in the next), running the two
// scripts of a plain lock, SET NX PX and compare-and-delete, with no quorum,
// no fencing token and no check of the server's identity. Set against
// redislock, which sends the same two scripts one request per call, it
// shows what pipelining a one-master client's calls buys on this machine.
const Transport = "transport"

// The Transport's scripts: redislock's, for one key.
var (
	TransportObtain  = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`)
	TransportRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// errNotHeld is a Transport refusal.
var errNotHeld = errors.New("transport: lock not obtained or not held")

type transportLocker struct{ p *pipeline.Pipeline }

// newTransport returns the Transport on master, as a redlock client of one
// master with the default options builds it: its calls bounded by four
// MasterTimeouts (redlock's lateCallFactor).
func newTransport(master redis.Scripter) *transportLocker {
	return &transportLocker{p: pipeline.New(master, 4*redlock.DefaultMasterTimeout, pipeline.LanesPerMaster(1))}
}

func (t *transportLocker) Worker() Worker { return &transportWorker{p: t.p, prefix: rand.Text()} }

func (t *transportLocker) Contender(string) (Worker, error) {
	return nil, fmt.Errorf("%s has no retries: it is measured uncontended only", Transport)
}

func (t *transportLocker) Close() error {
	t.p.Close()
	return nil
}

// transportWorker locks with a value of its own per lock, as redislock
// does (a random prefix and a count).
type transportWorker struct {
	p      *pipeline.Pipeline
	prefix string
	n      int
	keys   pipeline.Keys
	args   []any
}

func (w *transportWorker) Lock(ctx context.Context, key string) error {
	w.n++
	w.keys = pipeline.NewKeys(key)
	w.args = []any{w.prefix + strconv.Itoa(w.n), TTL.Milliseconds()}
	v, err := w.p.Run(ctx, TransportObtain, w.keys, w.args, false)
	if err == nil && v != 1 {
		err = errNotHeld
	}
	return err
}

func (w *transportWorker) Unlock(ctx context.Context) error {
	v, err := w.p.Run(ctx, TransportRelease, w.keys, w.args[:1], true)
	if err == nil && v != 1 {
		err = errNotHeld
	}
	return err
}
