package redlock

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// On one master, a permit whose entry expired loses its slot for good:
// its extend, release and late acquire are refused and leave the slot's
// new holder alone. A slot is taken under any capacity; live permits
// that fill a capacity refuse it; an undo's marker refuses its permit.
// A refusal of a taken slot names the next free one, -2 - slot.
func TestPermitSlotReassignedOnARealMaster(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	rdb := cl.Admin(0)
	ctx := t.Context()
	key := permitsKey(lockKey("sem"))
	const ttl = 60_000
	run := func(s *redis.Script, capacity int, nonce string, mark ...any) int64 {
		t.Helper()
		args := append([]any{"o", ttl, 1, 0, capacity, nonce}, mark...)
		n, err := s.Run(ctx, rdb, []string{key}, args...).Int64()
		require.NoError(t, err, nonce)
		return n
	}
	acquire := func(capacity int, nonce string) int64 { return run(permitMode.acquire, capacity, nonce) }
	slot0 := func() string { return rdb.HGet(ctx, key+":n", "0").Val() }

	require.Equal(t, int64(1), acquire(2, "0/a"))
	require.NoError(t, rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "0/a"}).Err()) // a expired here
	require.Equal(t, int64(1), acquire(2, "0/b"), "a's slot is free once a expired")
	assert.Equal(t, "0/b", slot0())
	assert.Equal(t, int64(0), run(permitMode.extend, 2, "0/a"), "a lost its slot")
	assert.Equal(t, int64(0), run(permitMode.release, 2, "0/a"))
	assert.Equal(t, "0/b", slot0(), "a's release leaves b's slot")
	assert.Equal(t, int64(-3), acquire(2, "0/a"), "a's late acquire: b holds slot 0, slot 1 is free")
	assert.Equal(t, int64(-3), acquire(3, "0/c"), "slot 0 is b's under any capacity, slot 1 is free")
	assert.Equal(t, int64(0), acquire(1, "1/d"), "slot 1 is not below capacity 1")

	require.Equal(t, int64(1), acquire(2, "1/e"))
	assert.Equal(t, int64(-4), acquire(3, "1/j"), "slot 1 is e's, slot 2 the next free")
	assert.Equal(t, int64(-4), acquire(4, "0/k"), "slot 0 is b's, 1 e's: 2 is the next free in turn")
	assert.Equal(t, int64(0), acquire(2, "0/l"), "two live permits fill capacity 2: no slot is named")
	assert.Equal(t, int64(0), acquire(2, "2/f"), "slot 2 is not below capacity 2")
	assert.Equal(t, int64(0), acquire(1, "0/g"), "two live permits fill capacity 1")
	assert.Equal(t, int64(0), run(permitMode.release, 4, "3/h", "1"), "an undo that finds nothing")
	assert.Equal(t, int64(0), acquire(4, "3/h"), "the undo's marker refuses its late acquire")
	assert.Equal(t, int64(1), acquire(4, "3/i"))

	for _, n := range []string{"0/b", "1/e", "3/i"} {
		assert.Equal(t, int64(1), run(permitMode.release, 4, n), n)
	}
	left, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{key + ":gone:3/h"}, left, "only the marker is left")
	for _, k := range left {
		assert.Positive(t, rdb.PTTL(ctx, k).Val(), k)
	}
}
