package quorum

import (
	"context"
	"fmt"
	"slices"
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

// replicatedID is the Identity of a master whose server has replicas.
type replicatedID struct{}

func (replicatedID) Known() (string, error, bool)          { return "", nil, true }
func (replicatedID) Admit(context.Context) (string, error) { return "", nil }
func (replicatedID) Last() string                          { return "" }
func (replicatedID) Replicas() int                         { return 1 }
func (replicatedID) Quarantine() error                     { return nil }
func (replicatedID) Unreplicated(acked, replicas int) error {
	return fmt.Errorf("%d of %d replicas acknowledged", acked, replicas)
}

// A master whose server has replicas does not count toward DoMany's
// items: no WAIT went with its calls, so a failover could lose them. It
// is judged as Do judges a call that no replica acknowledged. Its
// refusals are refusals still. The caller knows beforehand by
// MayReplicate. A quorum of one of two masters: the round decides once
// one agreement counts, or after both answers.
func TestDoManyCountsNoUnreplicatedAgreement(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 0}}
	masters := make([]Master, len(fakes))
	for i, f := range fakes {
		masters[i] = Master{Client: f, Pipe: pipeline.New(f, time.Hour, 1)}
		t.Cleanup(masters[i].Pipe.Close)
	}
	plain := New(Config{Quorum: 1, MasterTimeout: time.Hour, Work: newWork()}, masters)
	t.Cleanup(plain.Stop)
	assert.False(t, plain.MayReplicate())
	masters[0].ID, masters[1].ID = replicatedID{}, replicatedID{}
	e := New(Config{Quorum: 1, MasterTimeout: time.Hour, Work: newWork()}, masters)
	t.Cleanup(e.Stop)
	require.True(t, e.MayReplicate())

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
	r = res.Master(1, 0)
	assert.True(t, r.Heard)
	assert.NoError(t, r.Verdict, "a refusal is judged as a refusal")
}
