package integration_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// TestErrorTextNamesEachMastersPart: a QuorumError says, once and in
// plain words, what each master answered: held by another owner, or the
// master's own error (a refused connection is not a timeout).
func TestErrorTextNamesEachMastersPart(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	ctx := context.Background()
	// Another client holds "job" on master 0 only; master 2 is down.
	other, err := redlock.New([]*redis.Client{cl.Clients()[0]}, &redlock.Options{MasterTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	held, err := other.Acquire(ctx, "job", 30*time.Second)
	require.NoError(t, err)
	defer held.Release(ctx)
	require.NoError(t, cl.Masters[2].Kill(ctx))

	// Master 0 refuses and master 2 cannot be reached: those two decide the
	// round, with or without master 1's yes.
	c := newClient(t, cl, &redlock.Options{MasterTimeout: 2 * time.Second})
	_, err = c.Acquire(ctx, "job", 30*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "no context ended")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, qe.Masters[0].Err, redlock.ErrHeldElsewhere)
	assert.NotErrorIs(t, qe.Masters[2].Err, redlock.ErrMasterTimeout)
	assert.ErrorContains(t, qe.Masters[2].Err, "connection refused")

	text := err.Error()
	t.Log(text)
	assert.True(t, strings.HasPrefix(text, `redlock: lock not obtained: acquire "job": `), text)
	assert.Contains(t, text, " of 3 masters agreed, 2 needed, 1 refused, ")
	assert.Contains(t, text, cl.Masters[0].Addr()+": held by another owner; ")
	assert.Contains(t, text, cl.Masters[2].Addr()+": connection refused)")
	assert.Equal(t, 1, strings.Count(text, cl.Masters[2].Addr()), "the address is said once")
	assert.Equal(t, 1, strings.Count(text, "redlock:"), "the package prefix is said once")
}

// TestRenewalFailureSaysSoOnce: when auto-renewal loses the lock, Err says
// which call failed and why, without repeating itself.
func TestRenewalFailureSaysSoOnce(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	ctx := context.Background()
	// TTL 4s, MasterTimeout 1s: renewal's failed attempts end ~1.7s before
	// the validity does, so it is renewal, not the expiry timer, that
	// declares the loss even on a busy machine.
	c := newClient(t, cl, &redlock.Options{MasterTimeout: time.Second})
	l, err := c.Acquire(ctx, "job", 4*time.Second)
	require.NoError(t, err)
	l.AutoRenew()
	require.NoError(t, cl.FlushAll(ctx), "the lock vanishes from every master")
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second): // the TTL is 4s: renewal fails within it
		t.Fatal("Done not closed after the lock vanished")
	}
	err = l.Err()
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	var qe *redlock.QuorumError
	require.True(t, errors.As(err, &qe), "the renewal's QuorumError is kept: %v", err)
	assert.Equal(t, "renew", qe.Op)
	text := err.Error()
	t.Log(text)
	// A renewal may reach a master before FLUSHALL does: the count varies.
	assert.True(t, strings.HasPrefix(text, `redlock: lock not held: renew "job": `), text)
	assert.Contains(t, text, " of 3 masters agreed, 2 needed, ")
	assert.Equal(t, 1, strings.Count(text, "redlock:"), "the package prefix is said once")
	// Refusals decide the round; a master may not be heard.
	assert.GreaterOrEqual(t, strings.Count(text, ": lock not held"), 1, "the masters that answered: not held")
}

// TestLostConnectionsAreNoQuorumInPlainWords: an Extend that two of three
// masters cannot answer, one closing every connection as soon as it gets
// a request and one refusing connections, is ErrNoQuorum (the lock may
// still be held), not ErrNotHeld. Each failure reads in plain words: a
// closed connection, not a bare "EOF"; a refused dial, without the
// address again. errors.Is and errors.As still reach the network error.
func TestLostConnectionsAreNoQuorumInPlainWords(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	px := proxied(t, cl)
	ctx := context.Background()
	c := proxiedClient(t, px, &redlock.Options{MasterTimeout: 2 * time.Second})
	l, err := c.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, cl, l)
	require.NoError(t, px.ResetPeer(1))
	require.NoError(t, px.Cut(2))

	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNoQuorum)
	assert.NotErrorIs(t, err, redlock.ErrNotHeld, "a master that did not answer may still hold it")
	assert.True(t, l.Held())
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	text := err.Error()
	t.Log(text)
	// The two failures decide the round; master 0's yes may come first.
	assert.Regexp(t, `extend "job": (1 of 3 masters agreed, 2 needed, 2|0 of 3 masters agreed, 2 needed, 3) gave no answer; the lock may still be held \(`, text)
	closed, refused := qe.Masters[1].Err, qe.Masters[2].Err
	assert.Regexp(t, `^connection (closed \((unexpected )?EOF\)|reset)$`, closed.Error())
	var ne net.Error
	assert.True(t, errors.Is(closed, io.EOF) || errors.Is(closed, io.ErrUnexpectedEOF) || errors.As(closed, &ne),
		"errors.Is/As reach the network error: %#v", closed)
	assert.Equal(t, "connection refused", refused.Error())
	assert.ErrorIs(t, refused, syscall.ECONNREFUSED)
	for _, addr := range px.Addrs()[1:] {
		assert.Equal(t, 1, strings.Count(text, addr), "the address is said once")
	}
	assert.NotContains(t, text, ": EOF")
}

// TestAutoRenewKeepsAnExtendedTTL: renewal extends by the lock's current
// TTL, so an Extend to a longer TTL is not shrunk back by the next renewal.
func TestAutoRenewKeepsAnExtendedTTL(t *testing.T) {
	cl := integration.NewCluster(t, 3)
	ctx := context.Background()
	c := newClient(t, cl, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	l, err := c.Acquire(ctx, "job", 900*time.Millisecond)
	require.NoError(t, err)
	l.AutoRenew()
	require.NoError(t, l.Extend(ctx, time.Minute))
	// The first renewal was due a third of the old 900ms in: after 1.5s it
	// has run (bound: 1.2s of slack on a busy machine), and must have
	// extended by the minute, not by 900ms.
	time.Sleep(1500 * time.Millisecond)
	assert.Greater(t, time.Until(l.Until()), 30*time.Second, "renewal shrank the TTL back")
	// A master whose acquire came late may have missed the Extend, and
	// lost its copy since: a quorum must hold the lock for the minute.
	held := 0
	for i := range cl.Masters {
		pttl, err := cl.Admin(i).PTTL(ctx, "{job}").Result()
		require.NoError(t, err)
		if pttl != -2 {
			assert.Greater(t, pttl, 30*time.Second, "master %d", i)
			held++
		}
	}
	assert.GreaterOrEqual(t, held, 2, "a quorum holds the lock")
	require.NoError(t, l.Release(ctx))
}
