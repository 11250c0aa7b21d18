package redlock_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/rwmutex"
)

// offline returns go-redis clients for addresses nobody listens on: every
// check below happens before any I/O.
func offline(t *testing.T, addrs ...string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs
}

// TestOptionsThatCannotWorkAreRejected: every option value that the math
// or Redis cannot honour is refused by New, naming the value and why,
// instead of silently disabling something.
func TestOptionsThatCannotWorkAreRejected(t *testing.T) {
	three := offline(t, "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")
	for _, tc := range []struct {
		name string
		opts redlock.Options
		want string
	}{
		{"NaN drift", redlock.Options{DriftFactor: math.NaN()}, "DriftFactor NaN: must be in (0, 1), or -1 for none"},
		{"+Inf drift", redlock.Options{DriftFactor: math.Inf(1)}, "DriftFactor +Inf: must be in (0, 1), or -1 for none"},
		{"-Inf drift", redlock.Options{DriftFactor: math.Inf(-1)}, "DriftFactor -Inf: must be in (0, 1), or -1 for none"},
		{"drift of one", redlock.Options{DriftFactor: 1}, "DriftFactor 1: must be in (0, 1), or -1 for none"},
		{"negative drift", redlock.Options{DriftFactor: -0.5}, "DriftFactor -0.5: must be in (0, 1), or -1 for none"},
		{"MasterTimeout in ns by mistake", redlock.Options{MasterTimeout: 50}, "MasterTimeout 50ns: must be at least 1ms"},
		{"sub-ms MasterTimeout", redlock.Options{MasterTimeout: 999 * time.Microsecond}, "MasterTimeout 999µs: must be at least 1ms"},
		{"negative MasterTimeout", redlock.Options{MasterTimeout: -time.Millisecond}, "MasterTimeout -1ms: must be at least 1ms"},
		{"MasterTimeout that overflows", redlock.Options{MasterTimeout: math.MaxInt64}, "MasterTimeout 2562047h47m16.854775807s: must be at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redlock.New(three, &tc.opts)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.Nil(t, c)
			assert.ErrorContains(t, err, tc.want)
		})
	}

	// The edges that work.
	for _, opts := range []redlock.Options{
		{MasterTimeout: time.Millisecond, DriftFactor: 0.999},
		{DriftFactor: math.SmallestNonzeroFloat64},
		{DriftFactor: -1}, // none: a 3ms TTL then leaves 1ms of validity
		{MasterTimeout: time.Hour},
	} {
		c, err := redlock.New(three, &opts)
		require.NoError(t, err, "%+v", opts)
		require.NoError(t, c.Close())
	}
}

// TestTTLsThatCannotWorkAreRejected: Acquire's TTL is checked before any
// I/O, against MasterTimeout, the drift allowance, and overflow.
func TestTTLsThatCannotWorkAreRejected(t *testing.T) {
	c, err := redlock.New(offline(t, "127.0.0.1:1"), &redlock.Options{MasterTimeout: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{500, "TTL 500ns: must be longer than MasterTimeout (1ms)"},
		{1999 * time.Microsecond, "TTL 1.999ms: must be longer than MasterTimeout (1ms)"},
		{2 * time.Millisecond, "TTL 2ms: must be longer than its drift allowance (2.02ms)"},
		{math.MaxInt64, "TTL 2562047h47m16.854775807s: must be at most 1281023h53m38.427s"},
	} {
		_, err := c.Acquire(ctx, "k", tc.ttl)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "TTL %v", tc.ttl)
		assert.ErrorContains(t, err, tc.want)
		_, err = c.AcquireRead(ctx, "k", "owner", tc.ttl)
		assert.ErrorContains(t, err, tc.want)
	}
}

// TestLockOptionsThatCannotWorkAreRejected: mutex and rwmutex options are
// refused at construction, naming the field, including a TTL that the
// client's options could never grant.
func TestLockOptionsThatCannotWorkAreRejected(t *testing.T) {
	c, err := redlock.New(offline(t, "127.0.0.1:1"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		name string
		opts mutex.Options
		want string
	}{
		{"TTL in ns by mistake", mutex.Options{TTL: 10}, "Options.TTL 10ns: must be at least 1ms"},
		{"sub-ms TTL", mutex.Options{TTL: 999 * time.Microsecond}, "Options.TTL 999µs: must be at least 1ms"},
		{"TTL within the master timeout", mutex.Options{TTL: 50 * time.Millisecond}, "Options.TTL 50ms: must be longer than MasterTimeout (50ms)"},
		{"TTL too short for fencing", mutex.Options{TTL: 199 * time.Millisecond}, "Options.TTL 199ms: must be at least 4*MasterTimeout (200ms) with fencing: a fenced acquire counts only if decided within a quarter of its TTL"},
		{"sub-ms MinRetryDelay", mutex.Options{MinRetryDelay: time.Microsecond}, "Options.MinRetryDelay 1µs: must be at least 1ms (shorter retries spin without jitter)"},
		{"sub-ms MaxRetryDelay", mutex.Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 999 * time.Microsecond}, "Options.MaxRetryDelay 999µs: must be at least 1ms"},
		{"MaxRetryDelay in ns", mutex.Options{MaxRetryDelay: 20}, "Options.MaxRetryDelay 20ns: must be at least 1ms"},
		{"negative TTL", mutex.Options{TTL: -time.Second}, "Options.TTL -1s: must be at least 1ms"},
		{"max below min", mutex.Options{MinRetryDelay: time.Second, MaxRetryDelay: time.Millisecond}, "Options.MaxRetryDelay 1ms: must not be less than MinRetryDelay (1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mutex.New(c, "k", &tc.opts)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.ErrorContains(t, err, "mutex."+tc.want)
			_, err = mutex.NewReentrant(c, "k", &tc.opts)
			assert.ErrorContains(t, err, "mutex."+tc.want)
			rw := rwmutex.Options{TTL: tc.opts.TTL, MinRetryDelay: tc.opts.MinRetryDelay, MaxRetryDelay: tc.opts.MaxRetryDelay}
			_, err = rwmutex.New(c, "k", &rw)
			assert.ErrorContains(t, err, "rwmutex."+tc.want)
		})
	}
	_, err = mutex.New(c, "k", &mutex.Options{TTL: 200 * time.Millisecond, MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
	assert.NoError(t, err, "1ms is the smallest delay; a TTL of 4*MasterTimeout works")
	unfenced, err := redlock.New(offline(t, "127.0.0.1:1"), &redlock.Options{NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { unfenced.Close() })
	_, err = mutex.New(unfenced, "k", &mutex.Options{TTL: 51 * time.Millisecond})
	assert.NoError(t, err, "without fencing, a TTL above MasterTimeout works")

	for _, tc := range []struct {
		name string
		opts rwmutex.Options
		want string
	}{
		{"sub-ms WriteWait (kept as 0: writer preference off)", rwmutex.Options{WriteWait: 999 * time.Microsecond},
			"rwmutex.Options.WriteWait 999µs: must be at least 1ms (it is kept in whole milliseconds, and 0 would let readers starve writers)"},
		{"WriteWait in ns by mistake", rwmutex.Options{WriteWait: 500}, "rwmutex.Options.WriteWait 500ns: must be at least 1ms"},
		{"negative WriteWait", rwmutex.Options{WriteWait: -time.Second}, "rwmutex.Options.WriteWait -1s: must be at least 1ms"},
		{"retries that let the marker lapse", rwmutex.Options{WriteWait: 100 * time.Millisecond},
			"rwmutex.Options.MaxRetryDelay 200ms: must be less than half of WriteWait (100ms)"},
		{"half of WriteWait as kept, in whole milliseconds", rwmutex.Options{WriteWait: 2900 * time.Microsecond, MinRetryDelay: time.Millisecond, MaxRetryDelay: 1400 * time.Microsecond},
			"rwmutex.Options.MaxRetryDelay 1.4ms: must be less than half of WriteWait (2.9ms, kept as 2ms), or a waiting writer's marker lapses between its attempts; lower it, or raise WriteWait to 3ms or more"},
	} {
		_, err := rwmutex.New(c, "k", &tc.opts)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.name)
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
	_, err = rwmutex.New(c, "k", &rwmutex.Options{WriteWait: 3 * time.Millisecond, MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
	assert.NoError(t, err)
}

// TestSameMasterUnderTwoAddressesIsRejected: New tells, without I/O, that
// loopback names and spellings of one address are one master.
func TestSameMasterUnderTwoAddressesIsRejected(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"127.0.0.1:6379", "localhost:6379"},
		{"localhost:6379", "[::1]:6379"},
		{"LOCALHOST:6379", "localhost.:6379"},
		{"127.0.0.1:6379", "[::ffff:127.0.0.1]:6379"},
		{"127.0.0.1:6379", ":6379"},
		{"10.0.0.1:6379", "10.0.0.1:06379"},
		{"[2001:db8::1]:6379", "[2001:0db8:0:0:0:0:0:1]:6379"},
	} {
		_, err := redlock.New(offline(t, tc.a, tc.b), &redlock.Options{Quorum: 2})
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "%s and %s", tc.a, tc.b)
		assert.ErrorContains(t, err, "masters 0 ("+tc.a+") and 1 ("+tc.b+") are the same master")
	}
	for _, tc := range []struct{ a, b string }{
		{"127.0.0.1:6379", "127.0.0.1:6380"},
		{"127.0.0.1:6379", "127.0.0.2:6379"},
		{"localhost:6379", "redis.local:6379"}, // a name: only INFO tells (Verify)
	} {
		c, err := redlock.New(offline(t, tc.a, tc.b), &redlock.Options{Quorum: 2})
		require.NoError(t, err, "%s and %s", tc.a, tc.b)
		require.NoError(t, c.Close())
	}
}

// TestFencedTTLBelowFourMasterTimeoutsIsRefused: a fenced acquire counts
// only if decided within a quarter of its TTL, so a TTL below
// 4*MasterTimeout is refused where it is given, before any I/O. Read
// locks carry no token, and NoFencing lifts the rule.
func TestFencedTTLBelowFourMasterTimeoutsIsRefused(t *testing.T) {
	c, err := redlock.New(offline(t, "127.0.0.1:1"), nil) // MasterTimeout 50ms
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	const want = "TTL 199ms: must be at least 4*MasterTimeout (200ms) with fencing"
	for name, acquire := range map[string]func(time.Duration) error{
		"Acquire":      func(ttl time.Duration) error { _, err := c.Acquire(ctx, "k", ttl); return err },
		"AcquireAs":    func(ttl time.Duration) error { _, err := c.AcquireAs(ctx, "k", "o", ttl); return err },
		"AcquireWrite": func(ttl time.Duration) error { _, err := c.AcquireWrite(ctx, "k", "o", ttl); return err },
		"election.New": func(ttl time.Duration) error { _, err := election.New(c, "k", &election.Options{TTL: ttl}); return err },
	} {
		err := acquire(199 * time.Millisecond)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		assert.ErrorContains(t, err, want, name)
	}
	_, err = election.New(c, "k", &election.Options{TTL: 200 * time.Millisecond})
	assert.NoError(t, err, "4*MasterTimeout works")

	// Masters nobody listens on: an acquire that passes the checks fails
	// for want of answers, not of arguments.
	_, err = c.AcquireRead(ctx, "k", "o", 199*time.Millisecond)
	assert.NotErrorIs(t, err, redlock.ErrInvalidArgument, "read locks carry no token")
	unfenced, err := redlock.New(offline(t, "127.0.0.1:1"), &redlock.Options{NoFencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { unfenced.Close() })
	_, err = unfenced.Acquire(ctx, "k", 51*time.Millisecond)
	assert.NotErrorIs(t, err, redlock.ErrInvalidArgument, "NoFencing lifts the rule")
	assert.ErrorIs(t, err, redlock.ErrNotObtained)
}
