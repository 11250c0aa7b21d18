package redlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// TestDialBuildsSafeClientsAndCloseClosesThem: Dial's clients never
// replay a call, end it at redlock's deadline, dial once, and time out
// at 4*MasterTimeout; a lock works on them; Verify finds nothing; Close
// closes them, once.
func TestDialBuildsSafeClientsAndCloseClosesThem(t *testing.T) {
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	c, err := Dial(cl.Addrs(), &Options{MasterTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, c.owned, 3)
	for _, rc := range c.owned {
		o := rc.Options()
		assert.Zero(t, o.MaxRetries, "go-redis keeps MaxRetries -1 as 0")
		assert.True(t, o.ContextTimeoutEnabled)
		assert.Equal(t, 1, o.DialerRetries)
		assert.Equal(t, []time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond},
			[]time.Duration{o.DialTimeout, o.ReadTimeout, o.WriteTimeout})
	}
	ctx := t.Context()
	require.NoError(t, c.Verify(ctx))
	l, err := c.Acquire(ctx, "k", time.Second)
	require.NoError(t, err)
	assert.NotZero(t, l.Token())
	require.NoError(t, l.Release(ctx))

	require.NoError(t, c.Close())
	for _, rc := range c.owned {
		assert.ErrorIs(t, rc.Ping(ctx).Err(), redis.ErrClosed, "Close closed the client Dial made")
	}
	assert.NoError(t, c.Close(), "a second Close closes nothing twice")
}

// TestDialTakesURLs: a redis:// URL picks the database; its settings
// that could replay a call are overridden.
func TestDialTakesURLs(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	addr := cl.Masters[0].Addr()
	c, err := Dial([]string{"redis://" + addr + "/2?max_retries=5&read_timeout=1s"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	assert.Equal(t, []string{addr + "/2"}, c.Masters())
	o := c.owned[0].Options()
	assert.Zero(t, o.MaxRetries, "the URL's max_retries is overridden")
	assert.Equal(t, time.Second, o.ReadTimeout, "the URL's read_timeout is kept")
	assert.Equal(t, 200*time.Millisecond, o.WriteTimeout, "4*MasterTimeout where the URL says nothing")
	l, err := c.Acquire(t.Context(), "k", time.Second)
	require.NoError(t, err)
	db2 := redis.NewClient(&redis.Options{Addr: addr, DB: 2})
	t.Cleanup(func() { _ = db2.Close() })
	n, err := db2.Exists(t.Context(), "{k}").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the lock is in database 2")
	require.NoError(t, l.Release(t.Context()))
}

// TestDialRefusesBadAddresses: before any I/O, and with every client it
// made closed.
func TestDialRefusesBadAddresses(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{nil, "no master addresses"},
		{[]string{}, "no master addresses"},
		{[]string{""}, `master 0 "": want "host:port" or a redis:// URL`},
		{[]string{"127.0.0.1:6379", "localhost"}, `master 1 "localhost": want "host:port"`},
		{[]string{":6379"}, `master 0 ":6379": no host`},
		{[]string{"h:0"}, `master 0 "h:0": port "0": want 1 to 65535`},
		{[]string{"h:x"}, `master 0 "h:x": port "x": want 1 to 65535`},
		{[]string{"http://h:1"}, `master 0 "http://h:1": redis: invalid URL scheme: http`},
		{[]string{"h:1", "h:1"}, "are the same master"},
		{[]string{"h:1"}, "MasterTimeout -1s"},
	} {
		t.Run(strings.Join(tc.addrs, ","), func(t *testing.T) {
			opts := &Options{}
			if strings.HasPrefix(tc.want, "MasterTimeout") {
				opts.MasterTimeout = -time.Second
			}
			c, err := Dial(tc.addrs, opts)
			assert.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestVerifyReportsClientsThatReplay: a client that retries a failed call
// may run a lock call twice. Verify names the master, the setting and its
// value, wrapping ErrReplayingClient; a master set up right passes.
func TestVerifyReportsClientsThatReplay(t *testing.T) {
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	addrs := cl.Addrs()
	retrying := harness.MasterOptions(addrs[1])
	retrying.MaxRetries = 2
	masters := []*redis.Client{
		redis.NewClient(&redis.Options{Addr: addrs[0]}), // go-redis' default: 3 retries
		redis.NewClient(retrying),
		redis.NewClient(harness.MasterOptions(addrs[2])),
	}
	for _, m := range masters {
		t.Cleanup(func() { _ = m.Close() })
	}
	c, err := New(masters, nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	err = c.Verify(t.Context())
	require.ErrorIs(t, err, ErrReplayingClient)
	t.Log(err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 2, "one problem per master that replays")
	assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("redlock: master 0 (%s): MaxRetries 3 (go-redis' default, also for 0): ", addrs[0])), lines[0])
	assert.Contains(t, lines[0], "set MaxRetries: -1")
	assert.True(t, strings.HasPrefix(lines[1], fmt.Sprintf("redlock: master 1 (%s): MaxRetries 2: ", addrs[1])), lines[1])
	assert.NotContains(t, err.Error(), "master 2")
}

// TestVerifyReportsAClusterClientsRetries: a ClusterClient's nodes retry
// a call that timed out if its MaxRetries is above 0. Its redirect loop
// does not matter: lock calls go to the nodes' clients, never redirected.
// Nothing listens on port 1: Verify also reports the slot map unloaded.
func TestVerifyReportsAClusterClientsRetries(t *testing.T) {
	for _, tc := range []struct {
		opt  redis.ClusterOptions
		want string
	}{
		{redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: 1}, "MaxRetries 1"},
		{redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}, ""},
		{redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRedirects: 3}, ""},
	} {
		cc := redis.NewClusterClient(&tc.opt)
		c, err := New([]*redis.ClusterClient{cc}, nil)
		require.NoError(t, err)
		err = c.Verify(context.Background())
		require.Error(t, err, "no slot map")
		if tc.want == "" {
			assert.NotErrorIs(t, err, ErrReplayingClient)
		} else {
			assert.ErrorIs(t, err, ErrReplayingClient)
			assert.ErrorContains(t, err, "redlock: master 0 (127.0.0.1:1): "+tc.want)
		}
		require.NoError(t, c.Close())
		require.NoError(t, cc.Close())
	}
}
