package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
