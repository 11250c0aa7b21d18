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

// fixedID is an Identity that always knows its server.
type fixedID struct {
	server  string
	verdict error
}

func (f fixedID) Known() (string, error, bool)          { return f.server, f.verdict, true }
func (f fixedID) Admit(context.Context) (string, error) { return f.server, f.verdict }
func (f fixedID) Last() string                          { return f.server }

// keyRouter sends each key to a target of its own; a key it lacks is
// unknown. It records what Answered learned.
type keyRouter struct {
	targets map[string]Target
	mu      sync.Mutex
	heard   []error
}

var errNoRoute = errors.New("no route")

func (k *keyRouter) Route(keys pipeline.Keys) (Target, error) {
	if t, ok := k.targets[keys.Names[0]]; ok {
		return t, nil
	}
	return Target{}, errNoRoute
}

func (k *keyRouter) Answered(_ Target, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.heard = append(k.heard, err)
}

// TestRouterSendsEachCallToItsServer: a master with a Router sends each
// call where its keys live, and each call's server judges it, in Do and
// in DoMany: key a's server is a master, key b's a replica, key c has no
// route (the call is not sent, and counts as unsent).
func TestRouterSendsEachCallToItsServer(t *testing.T) {
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := context.Background()
	pipes := make([]*pipeline.Pipeline, 3)
	masters := make([]Master, 3)
	for i := range masters {
		for _, k := range []string{"a", "b", "c"} {
			require.NoError(t, cl.Admin(i).Set(ctx, k, "1", 0).Err())
		}
		c := redis.NewClient(harness.MasterOptions(cl.Masters[i].Addr()))
		t.Cleanup(func() { _ = c.Close() })
		pipes[i] = pipeline.New(c, time.Second, 1)
		t.Cleanup(pipes[i].Close)
		masters[i] = Master{Client: c, Pipe: pipes[i]}
	}
	errIsReplica := errors.New("a replica")
	router := &keyRouter{targets: map[string]Target{
		"a": {Pipe: pipes[1], ID: fixedID{server: "A"}},
		"b": {Pipe: pipes[2], ID: fixedID{server: "B", verdict: errIsReplica}},
	}}
	masters[0].Route = router
	w := newWork()
	e := New(Config{Quorum: 3, MasterTimeout: 2 * time.Second, Work: w,
		SameServer: func(int, int, string) error { return errors.New("same") }}, masters)
	defer e.Stop()

	out, err := e.Do(ctx, &Spec{Script: exists, Keys: pipeline.NewKeys("a"), Args: []any{"one"}})
	require.NoError(t, err)
	assert.True(t, out.OK, "key a: its server is a master")
	out, err = e.Do(ctx, &Spec{Script: exists, Keys: pipeline.NewKeys("b"), Args: []any{"one"}})
	require.NoError(t, err)
	assert.False(t, out.Master(0).Agreed)
	assert.ErrorIs(t, out.Master(0).Verdict, errIsReplica, "key b: its server is a replica")
	out, err = e.Do(ctx, &Spec{Script: exists, Keys: pipeline.NewKeys("c"), Args: []any{"one"}})
	require.NoError(t, err)
	assert.False(t, out.Master(0).Agreed)
	assert.ErrorIs(t, out.Master(0).Err, errNoRoute)
	assert.ErrorIs(t, out.Master(0).Err, pipeline.ErrNotSent, "key c: not sent")

	many := &Many{Items: 3, Calls: func(int) []Call {
		return []Call{
			{Script: exists, Keys: pipeline.NewKeys("a"), Args: []any{"one"}, First: 0, Items: 1},
			{Script: exists, Keys: pipeline.NewKeys("b"), Args: []any{"one"}, First: 1, Items: 1},
			{Script: exists, Keys: pipeline.NewKeys("c"), Args: []any{"one"}, First: 2, Items: 1},
		}
	}}
	res, err := e.DoMany(ctx, many)
	require.NoError(t, err)
	assert.True(t, res.Master(0, 0).Agreed, "key a")
	assert.ErrorIs(t, res.Master(0, 1).Verdict, errIsReplica, "key b")
	assert.False(t, res.Master(0, 1).Agreed, "key b")
	assert.ErrorIs(t, res.Master(0, 2).Err, pipeline.ErrNotSent, "key c")
	w.Wait()

	router.mu.Lock()
	defer router.mu.Unlock()
	assert.Equal(t, []error{nil, nil, nil, nil}, router.heard, "each call sent is answered to the router")
}
