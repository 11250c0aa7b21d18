package quorum

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/internal/pipeline"
)

// exists replies, for each key, 1 where it exists, else 0: an array, or
// an integer for one key.
var exists = redis.NewScript(`
local out = {}
for i = 1, #KEYS do out[i] = redis.call('EXISTS', KEYS[i]) end
if #KEYS == 1 and ARGV[1] == 'one' then return out[1] end
if ARGV[1] == 'short' then out[#out] = nil end
return out`)

// TestDoManyDecidesEachItemOnItsOwn: one call per master answers many
// items, and each item has its own quorum; a call of one item goes
// through the pipeline with an integer reply. A reply that does not
// answer each item counts as an error for all of them.
func TestDoManyDecidesEachItemOnItsOwn(t *testing.T) {
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := context.Background()
	// Key a is on every master, b on master 0 only, c on masters 0 and 1,
	// d on masters 1 and 2.
	on := map[string][]int{"a": {0, 1, 2}, "b": {0}, "c": {0, 1}, "d": {1, 2}}
	for k, ms := range on {
		for _, i := range ms {
			require.NoError(t, cl.Admin(i).Set(ctx, k, "1", 0).Err())
		}
	}
	masters := make([]Master, 3)
	for i := range masters {
		c := redis.NewClient(harness.MasterOptions(cl.Masters[i].Addr()))
		t.Cleanup(func() { _ = c.Close() })
		p := pipeline.New(c, time.Second, 1)
		t.Cleanup(p.Close)
		masters[i] = Master{Client: c, Pipe: p}
	}
	w := newWork()
	e := New(Config{Quorum: 2, MasterTimeout: 2 * time.Second, Work: w}, masters)
	defer e.Stop()

	res, err := e.DoMany(ctx, &Many{Items: 4, Calls: func(int) []Call {
		return []Call{
			{Script: exists, Keys: pipeline.NewKeys("a", "b", "c"), Args: []any{"many"}, First: 0, Items: 3},
			{Script: exists, Keys: pipeline.NewKeys("d"), Args: []any{"one"}, First: 3, Items: 1},
		}
	}})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.Agreed(0), 2, "a")
	assert.Less(t, res.Agreed(1), 2, "b")
	assert.GreaterOrEqual(t, res.Agreed(2), 2, "c")
	assert.GreaterOrEqual(t, res.Agreed(3), 2, "d")
	for item, k := range []string{"a", "b", "c", "d"} {
		for i := range masters {
			if r := res.Master(i, item); r.Heard {
				assert.Equal(t, slices.Contains(on[k], i), r.Agreed, "%s on master %d", k, i)
				assert.NoError(t, r.Err)
			}
		}
	}

	res, err = e.DoMany(ctx, &Many{Items: 2, Calls: func(int) []Call {
		return []Call{{Script: exists, Keys: pipeline.NewKeys("a", "c"), Args: []any{"short"}, First: 0, Items: 2}}
	}})
	require.NoError(t, err)
	assert.Zero(t, res.Agreed(0), "a reply one short answers nothing")
	for i := range masters {
		if r := res.Master(i, 0); r.Heard {
			assert.ErrorIs(t, r.Err, errWrongCount)
		}
	}
	w.Wait()
}

// replicatedID is the Identity of a master whose server has replicas,
// or, unannounced, may have some. Role counts its calls, and returns the
// count it has.
type replicatedID struct {
	replicas int
	roles    atomic.Int32
}

func (*replicatedID) Known() (string, error, bool)          { return "", nil, true }
func (*replicatedID) Admit(context.Context) (string, error) { return "", nil }
func (*replicatedID) Last() string                          { return "" }
func (d *replicatedID) Replicas() int                       { return d.replicas }
func (d *replicatedID) Unannounced() bool                   { return d.replicas == 0 }
func (*replicatedID) Quarantine() error                     { return nil }

func (d *replicatedID) Role(pipeline.Role) (int, error) {
	d.roles.Add(1)
	return d.replicas, nil
}

func (*replicatedID) Unreplicated(acked, replicas int, _ error) error {
	return fmt.Errorf("%d of %d replicas acknowledged", acked, replicas)
}

// DoMany judges an agreement of a master whose server has replicas, or
// may have some, as Do does (judgeDurable): by what the WAIT and ROLE
// behind its call told. A fake master's pipeline sends neither: WAIT
// acknowledges none, so the agreement does not count. Its refusals are
// refusals still. A quorum of one of two masters: the round decides once
// one agreement counts, or after both answers.
func TestDoManyJudgesReplicationAsDo(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 0}}
	masters := make([]Master, len(fakes))
	for i, f := range fakes {
		masters[i] = Master{Client: f, Pipe: pipeline.New(f, time.Hour, 1)}
		t.Cleanup(masters[i].Pipe.Close)
	}
	plain := New(Config{Quorum: 1, MasterTimeout: time.Hour, Work: newWork()}, masters)
	t.Cleanup(plain.Stop)
	// Master 0's server has a replica; master 1's may have one (Sentinel).
	ids := []*replicatedID{{replicas: 1}, {}}
	masters = slices.Clone(masters)
	masters[0].ID, masters[1].ID = ids[0], ids[1]
	e := New(Config{Quorum: 1, MasterTimeout: time.Hour, Work: newWork()}, masters)
	t.Cleanup(e.Stop)

	one := &Many{Items: 1, Calls: func(int) []Call {
		return []Call{{Script: redis.NewScript("return 1"), Keys: pipeline.NewKeys("k"), First: 0, Items: 1}}
	}}
	res, err := plain.DoMany(context.Background(), one)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Agreed(0))
	res, err = e.DoMany(context.Background(), one)
	require.NoError(t, err)
	assert.Zero(t, res.Agreed(0), "an unreplicated agreement counted")
	r := res.Master(0, 0)
	assert.True(t, r.Heard)
	assert.False(t, r.Agreed)
	assert.EqualError(t, r.Verdict, "0 of 1 replicas acknowledged")
	assert.Equal(t, int32(1), ids[0].roles.Load(), "ROLE judged")
	r = res.Master(1, 0)
	assert.True(t, r.Heard)
	assert.NoError(t, r.Verdict, "a refusal is judged as a refusal")
}

// arrayMaster is a fakeMaster that replies to a call of several keys
// with its reply once per key: an answer to each item.
type arrayMaster struct{ *fakeMaster }

func (f arrayMaster) reply(ctx context.Context, keys []string) *redis.Cmd {
	cmd := f.run(ctx)
	if cmd.Err() == nil && len(keys) > 1 {
		out := make([]any, len(keys))
		for k := range out {
			out[k] = f.fakeMaster.reply
		}
		cmd.SetVal(out)
	}
	return cmd
}

func (f arrayMaster) Eval(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.reply(ctx, keys)
}

func (f arrayMaster) EvalSha(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.reply(ctx, keys)
}

// manyEngine is testEngine (a quorum of three, an hour's master timeout)
// of arrayMasters.
func manyEngine(t *testing.T, fakes []*fakeMaster) *Engine {
	masters := make([]Master, len(fakes))
	for i, f := range fakes {
		masters[i] = Master{Client: arrayMaster{f}, Pipe: pipeline.New(arrayMaster{f}, time.Hour, 1)}
		t.Cleanup(masters[i].Pipe.Close)
	}
	e := New(Config{Quorum: 3, MasterTimeout: time.Hour, Work: newWork()}, masters)
	t.Cleanup(e.Stop)
	return e
}

// splitMany is a Many round of three items: item 0 in a call of one key,
// items 1 and 2 in a call of two.
func splitMany() *Many {
	s := redis.NewScript("return 1")
	return &Many{Items: 3, Calls: func(int) []Call {
		return []Call{
			{Script: s, Keys: pipeline.NewKeys("a"), First: 0, Items: 1},
			{Script: s, Keys: pipeline.NewKeys("b", "c"), First: 1, Items: 2},
		}
	}}
}

// A DoMany round whose deadline decides without a stalled master counts
// a miss of it, as Do does. Two agree and two refuse: each item waits
// for the stalled master. The deadline is 10ms; the test times nothing:
// the stalled master misses it however slow the machine.
func TestDoManyCountsAMiss(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := manyEngine(t, fakes)
	fakes[0].stall()
	defer fakes[0].resume()
	m := splitMany()
	m.Timeout = 10 * time.Millisecond
	res, err := e.DoMany(context.Background(), m)
	require.NoError(t, err)
	assert.True(t, res.TimedOut)
	assert.Equal(t, int32(1), e.health.misses[0].Load())
}

// A DoMany round does not wait for a silent master: it counts as unable
// to agree until it answers, and never as agreeing without an answer. Its
// call of one item is sent (it may be a renewal that must reach it); its
// call of several is kept back (ErrSilent), as Do keeps back the calls
// that may be shed. The master timeout is an hour, and no canary is due
// within it: a round that waited for the stalled master would last until
// the caller's context ends it. Once its answer comes, in time, the
// master counts again.
func TestDoManyDoesNotWaitForSilentMaster(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}, {reply: 0}, {reply: 0}}
	e := manyEngine(t, fakes)
	e.health.every = time.Hour
	resume := stall(t, fakes[0])
	silence(t, e, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.DoMany(ctx, splitMany())
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "the round waited for the silent master")
	assert.False(t, res.TimedOut)
	for item := range 3 {
		assert.LessOrEqual(t, res.Agreed(item), 2, "item %d", item)
		r := res.Master(0, item)
		assert.True(t, r.Silent, "item %d", item)
		assert.False(t, r.Agreed, "item %d", item)
	}
	assert.False(t, res.Master(0, 0).Heard, "the call of one item is under way")
	r := res.Master(0, 1)
	assert.True(t, r.Heard)
	assert.ErrorIs(t, r.Err, ErrSilent, "the call of two items was sent")
	assert.ErrorIs(t, r.Err, pipeline.ErrNotSent)

	resume()
	// The call of one item is answered now, before its deadline.
	for start := time.Now(); e.health.isSilent(0); time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 10*time.Second, "no answer brought the master back")
	}
	res, err = e.DoMany(context.Background(), splitMany())
	require.NoError(t, err)
	for item := range 3 {
		assert.Equal(t, 3, res.Agreed(item), "item %d: the master is back and agrees", item)
	}
}
