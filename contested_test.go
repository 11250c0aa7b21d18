package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// twoClients returns two clients of the same three masters: two processes.
func twoClients(t *testing.T) (a, b *Client) {
	t.Helper()
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	newClient := func() *Client {
		c, err := New(cl.Clients(), &Options{MasterTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close()) })
		return c
	}
	return newClient(), newClient()
}

// TestReleaseRecordsWhetherAnotherClientWaited: a client's last release of
// a write or exclusive lock records whether another client's acquire,
// write or read, was refused meanwhile, until its next release of the
// lock; its read releases, which cannot tell, leave the record as it is.
func TestReleaseRecordsWhetherAnotherClientWaited(t *testing.T) {
	a, b := twoClients(t)
	ctx := t.Context()
	key := lockKey("rw")
	// hold takes the write lock and releases it, with an acquire of the
	// other client's refused meanwhile, if refused is not nil.
	hold := func(refused func(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error)) {
		t.Helper()
		w, err := a.AcquireWrite(ctx, "rw", NewOwner(), 5*time.Second)
		require.NoError(t, err)
		if refused != nil {
			_, err := refused(ctx, "rw", NewOwner(), 5*time.Second)
			require.ErrorIs(t, err, ErrNotObtained)
		}
		require.NoError(t, w.Release(ctx))
	}
	hold(nil)
	assert.False(t, a.isContested(key), "nobody waited")
	hold(b.AcquireRead)
	assert.True(t, a.isContested(key), "a reader of another client waited")

	r, err := a.AcquireRead(ctx, "rw", NewOwner(), 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx))
	assert.True(t, a.isContested(key), "a read release leaves the record")

	hold(nil)
	assert.False(t, a.isContested(key), "nobody waited this time")
	hold(b.AcquireWrite)
	assert.True(t, a.isContested(key), "a writer of another client waited")
}
