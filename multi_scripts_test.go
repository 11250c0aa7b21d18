package redlock

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// The multi-resource scripts on one real master: an acquire that meets
// any other kind of hold on one name (a reentrant hold, a reader, a key
// of another type or form) writes none of the others; a marker on the
// first name refuses a late acquire; an extend where one name was lost
// lengthens and re-creates nothing; a release leaves a name another
// owner took; the token exceeds every name's counter, and each keeps it.
func TestMultiScriptsOnARealMaster(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	rdb := cl.Admin(0)
	ctx := t.Context()
	keys := []string{lockKey("a"), lockKey("b"), lockKey("c")}
	const ttl = 10_000 // ms
	run := func(name string, args ...any) string {
		t.Helper()
		v, err := scripts.get(name).Run(ctx, rdb, keys, args...).Result()
		require.NoError(t, err, name)
		return fmt.Sprint(v) // an integer, or a token as text
	}
	absent := func(why string, ks ...string) {
		t.Helper()
		n, err := rdb.Exists(ctx, ks...).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: %v written", why, ks)
	}
	others := map[string]func(){
		"reentrant": func() {
			for holds := 1; holds <= 2; holds++ {
				_, err := exclusiveMode.acquire.Run(ctx, rdb, []string{keys[1]}, "o2", ttl, holds, 0, 0, "n2").Result()
				require.NoError(t, err)
			}
		},
		"reader": func() {
			_, err := readMode.acquire.Run(ctx, rdb, readMode.keys("", "b"), "o2", ttl, 1, 0, 0, "n2").Result()
			require.NoError(t, err)
		},
		"hash":  func() { require.NoError(t, rdb.HSet(ctx, keys[1], "f", "v").Err()) },
		"junk":  func() { require.NoError(t, rdb.Set(ctx, keys[1], "f:x", 0).Err()) },
		"write": func() { require.NoError(t, rdb.Set(ctx, keys[1], "1:0:0:2:n2o2", 0).Err()) },
	}
	// A name held (by another Lock, or by readers) is named in the reply:
	// b, the second, as replyHeld-1. A key that is not a lock names none.
	held := map[string]bool{"reentrant": true, "reader": true, "write": true}
	for why, hold := range others {
		require.NoError(t, rdb.FlushAll(ctx).Err())
		hold()
		want := "0"
		if held[why] {
			want = fmt.Sprint(replyHeld - 1)
		}
		assert.Equal(t, want, run("multi_acquire", "o", ttl, 1, 0, 0, "n"), why)
		absent(why, keys[0], keys[2], keys[0]+":gone:n")
	}
	// The first name held is named, past a key that is not a lock, and
	// past a name held by readers only.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.NoError(t, rdb.HSet(ctx, keys[0], "f", "v").Err())
	others["reader"]()
	require.NoError(t, rdb.Set(ctx, keys[2], "1:0:0:2:n3o3", 0).Err())
	assert.Equal(t, fmt.Sprint(replyHeld-1), run("multi_acquire", "o", ttl, 1, 0, 0, "n"), "b's readers, after a's hash")
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.NoError(t, rdb.HSet(ctx, keys[0], "f", "v").Err())
	require.NoError(t, rdb.Set(ctx, keys[2], "1:0:0:2:n3o3", 0).Err())
	assert.Equal(t, fmt.Sprint(replyHeld-2), run("multi_acquire", "o", ttl, 1, 0, 0, "n"), "c, after a's hash")
	absent("held after a hash", keys[1], keys[0]+":gone:n")

	// A late acquire after an undo that found nothing.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	assert.Equal(t, "0", run("multi_release", "o", ttl, 0, 0, 0, "n", markMissing))
	assert.Equal(t, "0", run("multi_acquire", "o", ttl, 1, 0, 0, "n"), "refused by the marker")
	absent("late acquire", keys...)

	// An extend where b was lost lengthens none and re-creates nothing.
	require.Equal(t, "1", run("multi_acquire", "o", 2_000, 1, 0, 0, "n2"))
	require.NoError(t, rdb.Del(ctx, keys[1]).Err())
	assert.Equal(t, "0", run("multi_extend", "o", 60_000, 1, 0, 0, "n2"))
	absent("extend", keys[1])
	left, err := rdb.PTTL(ctx, keys[0]).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, left.Milliseconds(), int64(2_000), "a lengthened without b")

	// A release leaves b, which another owner took meanwhile.
	other := "1:0:0:2:n3o3"
	require.NoError(t, rdb.Set(ctx, keys[1], other, 0).Err())
	assert.Equal(t, "1", run("multi_release", "o", ttl, 0, 0, 0, "n2", markMissing))
	absent("release", keys[0], keys[2])
	v, err := rdb.Get(ctx, keys[1]).Result()
	require.NoError(t, err)
	assert.Equal(t, other, v, "b is the other owner's")

	// Tokens: the largest next token of any name, kept by each.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.NoError(t, rdb.Set(ctx, keys[0], "f:8999999999999999999", 0).Err())
	require.NoError(t, rdb.Set(ctx, keys[2], "f:100", 0).Err())
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	token := run("multi_acquire", "o", ttl, 1, now.UnixMicro(), 0, "n4")
	assert.Equal(t, "9000000000000000000", token)
	assert.Equal(t, "1", run("multi_release", "o", ttl, 0, token, 0, "n4", markMissing))
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, "f:"+token, v, k)
	}
	next, err := exclusiveMode.acquire.Run(ctx, rdb, []string{keys[1]}, "o5", ttl, 1, now.UnixMicro(), 0, "n5").Result()
	require.NoError(t, err)
	assert.Equal(t, "9000000000000000001", fmt.Sprint(next), "b's next token")
}
