package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewValidates(t *testing.T) {
	client := func(addr string, db int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := client("127.0.0.1:1", 0), client("127.0.0.1:2", 0)
	sameAddr, otherDB := client("127.0.0.1:1", 0), client("127.0.0.1:1", 1)
	var typedNil *redis.Client
	five := []*redis.Client{a, b, otherDB, client("127.0.0.1:3", 0), client("127.0.0.1:4", 0)}
	for _, tc := range []struct {
		name    string
		masters []*redis.Client
		opts    *Options
		want    string
	}{
		{"no masters", nil, nil, "0 masters: need 1 to 64"},
		{"nil master", []*redis.Client{a, typedNil}, nil, "master 1 is nil"},
		{"same client twice", []*redis.Client{a, b, a}, nil, "masters 0 (127.0.0.1:1) and 2 (127.0.0.1:1) are the same master"},
		{"same address twice", []*redis.Client{a, sameAddr}, nil, "masters 0 (127.0.0.1:1) and 1 (127.0.0.1:1) are the same master"},
		{"quorum of half", five, &Options{Quorum: 2}, "Quorum 2 with 5 masters: must be more than half and at most all (3 to 5)"},
		{"quorum above all", five, &Options{Quorum: 6}, "Quorum 6 with 5 masters"},
		{"negative quorum", five, &Options{Quorum: -1}, "Quorum -1"},
		{"negative timeout", five, &Options{MasterTimeout: -time.Millisecond}, "MasterTimeout -1ms: must be at least 1ms"},
		{"negative drift", five, &Options{DriftFactor: -0.1}, "DriftFactor -0.1: must be in (0, 1), or -1 for none"},
		{"drift of one", five, &Options{DriftFactor: 1}, "DriftFactor 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.masters, tc.opts)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	c, err := New(five, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, c.Quorum(), "default quorum is N/2+1")
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1/1", "127.0.0.1:3", "127.0.0.1:4"}, c.Masters())
	c, err = New([]redis.UniversalClient{a, b}, &Options{Quorum: 2})
	require.NoError(t, err, "any go-redis client type works")
	assert.Equal(t, 2, c.Quorum())
}

func TestAcquireValidatesArguments(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: 10 * time.Millisecond, DriftFactor: 0.5})
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		ttl  time.Duration
		want string
	}{
		{"", time.Second, "empty key"},
		{"k", 10 * time.Millisecond, "TTL 10ms: must be longer than MasterTimeout (10ms)"},
		{"k", 10*time.Millisecond + 999*time.Microsecond, "TTL 10.999ms: must be longer than MasterTimeout"},
		{"k", -time.Second, "TTL -1s"},
	} {
		_, err := c.Acquire(ctx, tc.key, tc.ttl)
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), tc.want)
	}
	c = newFakeClient(t, fakes(3), &Options{MasterTimeout: time.Millisecond, DriftFactor: 0.5})
	_, err := c.Acquire(ctx, "k", 4*time.Millisecond)
	assert.ErrorContains(t, err, "TTL 4ms: must be longer than its drift allowance (4ms)")
}

func TestNewValueOption(t *testing.T) {
	c := newFakeClient(t, fakes(1), &Options{NewValue: func() (string, error) { return "fixed", nil }, KeyPrefix: "app:"})
	l, err := c.Acquire(context.Background(), "k", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "fixed", l.Value())
	assert.Equal(t, "k", l.Key())
	assert.Equal(t, []string{"{app:k}"}, l.keys.Names)

	boom := errors.New("no entropy")
	c = newFakeClient(t, fakes(1), &Options{NewValue: func() (string, error) { return "", boom }})
	_, err = c.Acquire(context.Background(), "k", time.Second)
	assert.ErrorIs(t, err, boom)
	c = newFakeClient(t, fakes(1), &Options{NewValue: func() (string, error) { return "", nil }})
	_, err = c.Acquire(context.Background(), "k", time.Second)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// TestBadNewValuesAreRefusedByEveryAcquire: a value is every Lock's nonce,
// which names its undo marker K:gone:nonce. An empty nonce would be every
// Lock's, and one holding '}' could make the marker another lock's main
// key ("{name}:gone:x}" is the lock "name}:gone:x"), which a release that
// finds nothing would overwrite.
func TestBadNewValuesAreRefusedByEveryAcquire(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"", "x1}", "}", "a}b"} {
		c := newFakeClient(t, fakes(3), &Options{NewValue: func() (string, error) { return bad, nil }})
		acquires := map[string]func() (*Lock, error){
			"Acquire":      func() (*Lock, error) { return c.Acquire(ctx, "k", time.Second) },
			"AcquireAs":    func() (*Lock, error) { return c.AcquireAs(ctx, "k", "owner", time.Second) },
			"AcquireRead":  func() (*Lock, error) { return c.AcquireRead(ctx, "k", "owner", time.Second) },
			"AcquireWrite": func() (*Lock, error) { return c.AcquireWrite(ctx, "k", "owner", time.Second) },
		}
		for name, acquire := range acquires {
			l, err := acquire()
			assert.Nil(t, l, "%s with NewValue %q", name, bad)
			assert.ErrorIs(t, err, ErrInvalidArgument, "%s with NewValue %q", name, bad)
			if bad != "" {
				assert.ErrorContains(t, err, fmt.Sprintf("NewValue returned %q: a value must not hold '}'", bad), name)
			}
		}
	}
}

func TestDefaultValuesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		v, err := randomValue()
		require.NoError(t, err)
		require.False(t, seen[v])
		seen[v] = true
	}
}

// Helpers are defined once in the functions library, outside any function:
// there, KEYS and ARGV do not exist.
func TestHelpersTakeKeysAsArguments(t *testing.T) {
	helpers, _, ok := strings.Cut(functions.Code(), "redis.register_function(")
	require.True(t, ok)
	for i, line := range strings.Split(helpers, "\n") {
		code, _, _ := strings.Cut(line, "--")
		assert.NotRegexp(t, `\b(KEYS|ARGV)\b`, code, "library line %d", i+1)
	}
}

func TestSplitScripts(t *testing.T) {
	for _, name := range []string{"acquire", "extend", "release"} {
		assert.Contains(t, scripts, name)
	}
	set, _ := splitScripts("-- header\n--- a\nreturn 1\n--- b\nreturn 2\n")
	assert.Len(t, set, 2)
	assert.Equal(t, redis.NewScript("return 1\n").Hash(), set["a"].Hash())
	assert.Panics(t, func() { splitScripts("--- a\n--- a\n") })

	libs, fns := splitScripts("--- @x\nlocal x = 1\n--- @y\nlocal y = 2\n--- c @x @y\nreturn x + y\n")
	assert.Len(t, libs, 1, "helpers are not scripts")
	assert.Equal(t, redis.NewScript("local x = 1\nlocal y = 2\nreturn x + y\n").Hash(), libs["c"].Hash())
	lib, _, _ := strings.Cut(fns.Code(), "\n")
	name := strings.TrimPrefix(lib, "#!lua name=")
	assert.Regexp(t, `^redlock_[0-9a-f]{16}$`, name)
	assert.Equal(t, lib+"\nlocal x = 1\nlocal y = 2\n"+
		"redis.register_function('"+name+"_c', function(KEYS, ARGV)\nreturn x + y\nend)\n", fns.Code())
	_, other := splitScripts("--- @x\nlocal x = 2\n--- @y\nlocal y = 2\n--- c @x @y\nreturn x + y\n")
	assert.NotEqual(t, fns.Code()[:len(lib)], other.Code()[:len(lib)], "the name follows the code")
	assert.Panics(t, func() { splitScripts("--- c @x\nreturn 1\n") }, "helper not defined before")
	assert.Panics(t, func() { splitScripts("--- @x\n--- c x\n") }, "not a helper")
	assert.Panics(t, func() { splitScripts("--- @x\n--- @y @x\n") }, "a helper needing another")
	assert.Panics(t, func() { set.get("missing") })
}
