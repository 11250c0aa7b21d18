package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// holderValue is a held lock's value on a master (see "Lock values" in
// scripts.lua): holds, token, waited, then the nonce's length, the nonce
// and the owner.
func holderValue(token, nonce, owner string) string {
	return "1:" + token + ":0:" + strconv.Itoa(len(nonce)) + ":" + nonce + owner
}

// TestInspectTokenNumeric: tokens are numbers, not text ("999" > "1000"
// as text), and a value that is not a uint64 is never the token.
func TestInspectTokenNumeric(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	ctx := t.Context()
	set := func(tokens ...string) {
		t.Helper()
		for i, tok := range tokens {
			require.NoError(t, cluster.Admin(i).Set(ctx, "{job}", holderValue(tok, "n1", "alice"), time.Minute).Err())
		}
	}

	set("999", "1000", "1000")
	w := mustView(t, cluster, "job").Writer
	require.NotNil(t, w)
	assert.True(t, w.Held)
	assert.Equal(t, "1000", w.Token, "two of three masters hold 1000")
	assert.Empty(t, w.Tokens)

	set("999", "1000", "01000") // a leading zero: no script writes that
	w = mustView(t, cluster, "job").Writer
	require.NotNil(t, w)
	assert.Empty(t, w.Token, "no majority of valid tokens")
	assert.Equal(t, []string{"999", "1000", "01000"}, w.Tokens, "in numeric order, the invalid last")
	_, out, _ := ops(t, cluster, "inspect", "job")
	assert.Contains(t, out, "no token agreed (its masters hold 999, 1000, 01000)")
}

// TestInspectTokenAfterRepair: a master where an extend set the lock again
// keeps its larger counter as the lock's token there; inspect reports the
// Lock's token, which the other masters agree on, not that counter.
func TestInspectTokenAfterRepair(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c := newLockClient(t, cluster)
	ctx := t.Context()
	require.NoError(t, cluster.Masters[0].Kill(ctx))
	l, err := c.AcquireAs(ctx, "job", "alice", time.Minute)
	require.NoError(t, err, "two of three masters")
	token := strconv.FormatUint(l.Token(), 10)

	// Back empty but for a counter past the token (another owner's
	// acquire that failed there, say): the repair keeps it.
	require.NoError(t, cluster.Masters[0].Restart(ctx))
	counter := strconv.FormatUint(l.Token()+1_000_000, 10) // as many digits: larger as text too
	require.NoError(t, cluster.Admin(0).Set(ctx, "{job}", "f:"+counter, time.Minute).Err())
	require.Eventually(t, func() bool {
		_ = l.Extend(ctx, time.Minute) // the first may find the old connection broken
		w := mustView(t, cluster, "job").Writer
		return w != nil && w.Masters == 3
	}, 10*time.Second, 50*time.Millisecond, "repaired on the restarted master")

	v := mustView(t, cluster, "job")
	assert.Equal(t, counter, v.Masters[0].Token, "the repaired master keeps its counter")
	assert.Equal(t, token, v.Masters[1].Token)
	require.NotNil(t, v.Writer)
	assert.Equal(t, token, v.Writer.Token, "the Lock's token, not the repaired master's counter")
	_, out, _ := ops(t, cluster, "inspect", "job")
	assert.Contains(t, out, ", token "+token+"\n")
	require.NoError(t, l.Release(ctx))
}

// TestInspectHolderDescription: a client's Options.Holder shows with its
// locks, writer and reader, and nothing of it stays after the release.
func TestInspectHolderDescription(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond, Holder: "web-3 pid 42"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	ctx := t.Context()
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	r, err := c.AcquireRead(ctx, "doc", "reader-1", time.Minute)
	require.NoError(t, err)

	v := mustView(t, cluster, "job")
	require.NotNil(t, v.Writer)
	assert.Equal(t, "web-3 pid 42", v.Writer.Description)
	assert.Equal(t, l.Value(), v.Writer.Nonce, "the nonce without the description")
	_, out, _ := ops(t, cluster, "inspect", "job")
	assert.Contains(t, out, "(Lock "+l.Value()+", web-3 pid 42)")
	require.Eventually(t, func() bool {
		v := mustView(t, cluster, "doc")
		return len(v.Readers) == 1 && v.Readers[0].Masters == 3
	}, 5*time.Second, 10*time.Millisecond)
	_, out, _ = ops(t, cluster, "inspect", "doc")
	assert.Contains(t, out, "quorum: read by reader-1 (web-3 pid 42) on 3 of 3 masters")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, r.Release(ctx))
	require.NoError(t, c.Close())
	for i := range cluster.Masters {
		keys, err := cluster.Admin(i).Keys(ctx, "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			assert.NotContains(t, k, "pid 42", "master %d", i)
			if typ := cluster.Admin(i).Type(ctx, k).Val(); typ == "string" {
				assert.NotContains(t, cluster.Admin(i).Get(ctx, k).Val(), "pid 42", "master %d, key %s", i, k)
			} else {
				t.Errorf("master %d keeps %s (a %s) after the release", i, k, typ)
			}
		}
	}
}
