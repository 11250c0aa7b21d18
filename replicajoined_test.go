package redlock

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// replicaOf starts a replica of master, which reaches it through a proxy
// the test may cut, and waits until it is in sync and the master's ROLE
// lists it: on a busy machine the master may list it only later.
func replicaOf(t *testing.T, master string) (*harness.Cluster, *atomic.Bool) {
	t.Helper()
	admin := redis.NewClient(harness.MasterOptions(master))
	t.Cleanup(func() { _ = admin.Close() })
	before := listedReplicas(t, admin)
	px, cut := blackHoleProxy(t, master)
	_, port, err := net.SplitHostPort(px)
	require.NoError(t, err)
	rs := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--replicaof", "127.0.0.1", port}})
	require.Eventually(t, func() bool {
		info, err := rs.Admin(0).Info(t.Context(), "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up" && listedReplicas(t, admin) > before
	}, 10*time.Second, 10*time.Millisecond)
	return rs, cut
}

// listedReplicas returns how many replicas the ROLE of admin's server
// lists, or -1 if ROLE fails.
func listedReplicas(t *testing.T, admin *redis.Client) int {
	v, err := admin.Do(t.Context(), "ROLE").Slice()
	if err != nil || len(v) < 3 {
		return -1
	}
	listed, _ := v[2].([]any)
	return len(listed)
}

// replicatedClient returns a Client of one master, with reads long
// enough for WAIT, no fencing counter (a release leaves none behind), a
// 2s master timeout, and obs, if not nil. It is closed at cleanup.
func replicatedClient(t *testing.T, addr string, obs Observer) *Client {
	t.Helper()
	opt := harness.MasterOptions(addr)
	opt.ReadTimeout = 10 * time.Second
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	c, err := New([]*redis.Client{rc}, &Options{MasterTimeout: 2 * time.Second, NoFencing: true, Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReplicaJoinedLaterIsWaitedFor: a master identified with one
// replica gains a second one, which then falls behind. No new
// connection, no INFO: the ROLE behind the write lists it, so the
// agreement, which WAIT saw reach only the first, does not count. A
// failover to the second replica would have lost the lock: b, which
// reaches it, gets the lock, and a must not hold it then.
func TestReplicaJoinedLaterIsWaitedFor(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	ctx := t.Context()
	replicaOf(t, cl.Masters[0].Addr())
	a := replicatedClient(t, cl.Masters[0].Addr(), nil)
	l, err := a.Acquire(ctx, "warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.Equal(t, 1, a.nodes[0].id.Replicas())

	// A second replica joins and syncs, then takes no more writes.
	rs, cut := replicaOf(t, cl.Masters[0].Addr())
	cut.Store(true)
	la, errA := a.Acquire(ctx, "k", 30*time.Second)
	t.Logf("a: %v", errA)
	var qe *QuorumError
	require.ErrorAs(t, errA, &qe, "granted with a replica the write did not reach")
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
	assert.Contains(t, errA.Error(), "1 of 2 replicas acknowledged")
	assert.Equal(t, 2, a.nodes[0].id.Replicas(), "the count follows ROLE")

	// Failover: the primary dies, the replica that fell behind is
	// promoted.
	require.NoError(t, cl.Masters[0].Kill(ctx))
	require.NoError(t, rs.Admin(0).Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	b, err := New(rs.Clients(), &Options{MasterTimeout: 2 * time.Second, NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	lb, errB := b.Acquire(ctx, "k", 30*time.Second)
	require.NoError(t, errB)
	require.False(t, errA == nil && la.Held() && lb.Held(), "a and b hold the lock at once")
}

// TestReplicaOfAPlainMasterIsSeenByVerify: a plain master identified
// without replicas sends no WAIT nor ROLE. A replica attached later is
// seen once the client asks again: Verify, or a new connection. From
// then on the write must reach it.
func TestReplicaOfAPlainMasterIsSeenByVerify(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	ctx := t.Context()
	a := replicatedClient(t, cl.Masters[0].Addr(), nil)
	l, err := a.Acquire(ctx, "warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.Equal(t, 0, a.nodes[0].id.Replicas())

	_, cut := replicaOf(t, cl.Masters[0].Addr())
	cut.Store(true)
	require.NoError(t, a.Verify(ctx))
	require.Equal(t, 1, a.nodes[0].id.Replicas())
	_, err = a.Acquire(ctx, "k", 10*time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe, "granted with a replica the write did not reach")
	assert.ErrorIs(t, qe.Masters[0].Err, ErrNotReplicated)
}

// blackHoleProxy forwards TCP to addr. Once cut is set, what addr sends
// is dropped: the replica behind it takes no more writes.
func blackHoleProxy(t *testing.T, addr string) (string, *atomic.Bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	cut := &atomic.Bool{}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				_ = in.Close()
				continue
			}
			t.Cleanup(func() { _ = in.Close(); _ = out.Close() })
			go func() { _, _ = io.Copy(out, in) }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := out.Read(buf)
					if n > 0 && !cut.Load() {
						if _, err := in.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), cut
}

// TestWaitErrorIsTold: a WAIT the server refuses (an ACL without WAIT)
// acknowledges nothing. The agreement does not count, and the verdict
// says why, with the server's error.
func TestWaitErrorIsTold(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	ctx := t.Context()
	replicaOf(t, cl.Masters[0].Addr())
	require.NoError(t, cl.Admin(0).Do(ctx, "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err())
	opt := harness.MasterOptions(cl.Masters[0].Addr())
	opt.Username, opt.Password = "nowait", "pw"
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	c, err := New([]*redis.Client{rc}, &Options{MasterTimeout: 2 * time.Second, NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	_, err = c.Acquire(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, ErrNotReplicated, "%v", err)
	t.Log(err)
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged; WAIT: NOPERM")
}

// TestRefusedRoleFallsBackToInfo: a server whose ACL refuses ROLE is
// judged by the replica count of its last INFO, as before ROLE: an
// agreement that every known replica acknowledged counts.
func TestRefusedRoleFallsBackToInfo(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	ctx := t.Context()
	replicaOf(t, cl.Masters[0].Addr())
	require.NoError(t, cl.Admin(0).Do(ctx, "ACL", "SETUSER", "norole", "on", ">pw", "~*", "&*", "+@all", "-role").Err())
	opt := harness.MasterOptions(cl.Masters[0].Addr())
	opt.Username, opt.Password = "norole", "pw"
	opt.ReadTimeout = 10 * time.Second
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	c, err := New([]*redis.Client{rc}, &Options{MasterTimeout: 2 * time.Second, NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	l, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err, "the known replica acknowledged")
	assert.True(t, c.nodes[0].id.roleRefused.Load(), "ROLE was refused")
	require.Equal(t, 1, c.nodes[0].id.Replicas())
	require.NoError(t, l.Release(ctx))
}
