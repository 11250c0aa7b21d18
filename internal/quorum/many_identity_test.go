package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/internal/pipeline"
)

// flipID is an Identity whose server becomes a replica once flipped,
// where the pool opened a new connection: Known then says ask again.
type flipID struct {
	mu      sync.Mutex
	flipped bool
	admits  int
}

var errIsReplica = errors.New("the server is a replica")

func (f *flipID) Known() (string, error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flipped {
		return "", nil, false
	}
	return "A", nil, true
}
func (f *flipID) Admit(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admits++
	if f.flipped {
		return "R", errIsReplica
	}
	return "A", nil
}
func (f *flipID) Last() string { return "A" }

// A master whose server became a replica (its pool reconnected) counts
// nowhere in Do; DoMany must not count it from its stale identity either.
func TestDoManyStaleIdentity(t *testing.T) {
	ctx := context.Background()
	id := &flipID{}
	e, w := flipEngine(t, id, "a", "b")
	defer e.Stop()
	many := &Many{Items: 2, Calls: func(int) []Call {
		return []Call{{Script: exists, Keys: pipeline.NewKeys("a", "b"), Args: []any{"many"}, First: 0, Items: 2}}
	}}
	res, err := e.DoMany(ctx, many)
	require.NoError(t, err)
	require.True(t, res.Master(0, 0).Agreed)

	id.mu.Lock()
	id.flipped = true
	id.mu.Unlock()

	// Do in the same state: master 0 is asked, is a replica, and does not count.
	out, err := e.Do(ctx, &Spec{Script: exists, Keys: pipeline.NewKeys("a"), Args: []any{"one"}})
	require.NoError(t, err)
	require.True(t, out.Master(0).Heard)
	assert.False(t, out.Master(0).Agreed, "Do: a replica's agreement")

	id.mu.Lock()
	id.flipped, id.admits = true, 0
	id.mu.Unlock()
	// DoMany in the same state must ask too.
	res, err = e.DoMany(ctx, many)
	require.NoError(t, err)
	require.True(t, res.Master(0, 0).Heard)
	assert.False(t, res.Master(0, 0).Agreed, "DoMany: a replica's agreement counted from the stale identity")
	w.Wait()
}

// A single-item call (a batch of one lock) asks the server again where
// its pool reconnected: it answers on the pipeline, but is held until asked.
func TestDoManySingleAsks(t *testing.T) {
	ctx := context.Background()
	id := &flipID{flipped: true}
	e, w := flipEngine(t, id, "a")
	defer e.Stop()
	one := &Many{Items: 1, Calls: func(int) []Call {
		return []Call{{Script: exists, Keys: pipeline.NewKeys("a"), Args: []any{"one"}, First: 0, Items: 1}}
	}}
	counted := 0
	for range 3 {
		res, err := e.DoMany(ctx, one)
		require.NoError(t, err)
		require.True(t, res.Master(0, 0).Heard)
		if res.Master(0, 0).Agreed {
			counted++
		}
	}
	w.Wait()
	id.mu.Lock()
	admits := id.admits
	id.mu.Unlock()
	t.Logf("admits=%d counted=%d of 3", admits, counted)
	assert.Zero(t, counted, "a replica's agreement counted")
	assert.Equal(t, 3, admits, "one ask per round")
}

// flipEngine starts three real masters holding keys, and an Engine over
// them whose master 0 is identified by id. Quorum 3: no item is decided
// before master 0's answer is read.
func flipEngine(t *testing.T, id *flipID, keys ...string) (*Engine, *work) {
	t.Helper()
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := context.Background()
	masters := make([]Master, 3)
	for i := range masters {
		for _, k := range keys {
			require.NoError(t, cl.Admin(i).Set(ctx, k, "1", 0).Err())
		}
		c := redis.NewClient(harness.MasterOptions(cl.Masters[i].Addr()))
		t.Cleanup(func() { _ = c.Close() })
		p := pipeline.New(c, time.Second, 1)
		t.Cleanup(p.Close)
		masters[i] = Master{Client: c, Pipe: p}
	}
	masters[0].ID = id
	w := newWork()
	return New(Config{Quorum: 3, MasterTimeout: 2 * time.Second, Work: w,
		SameServer: func(int, int, string) error { return errors.New("same") }}, masters), w
}
