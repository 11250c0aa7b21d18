package redlock

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/link"
)

// TestKeySlotMatchesRedis checks keySlot, which routes a cluster
// master's calls, against slots that Redis 7.0's CLUSTER KEYSLOT returned.
func TestKeySlotMatchesRedis(t *testing.T) {
	for key, slot := range map[string]int{
		"123456789":            12739, // 0x31C3, the CRC-16/XMODEM check value
		"foo":                  12182,
		"bar":                  5061,
		"hello":                866,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363, // empty tag: the whole key
		"foo{{bar}}zap":        4015, // tag "{bar"
		"foo{bar}{zap}":        5061, // tag "bar"
		"}a":                   642,
		"{}a}":                 4370,
	} {
		assert.Equal(t, slot, keySlot(key), "%q", key)
	}
}

// adversarialNames returns lock names made of braces and a few other
// bytes: every such name of up to 6 bytes, then random longer ones.
func adversarialNames() []string {
	alphabet := []string{"{", "}", "a", ":"}
	names := []string{""}
	for n := 1; n <= 6; n++ {
		for _, base := range names {
			if len(base) != n-1 {
				continue
			}
			for _, c := range alphabet {
				names = append(names, base+c)
			}
		}
	}
	names = names[1:] // no empty name
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, 7+r.IntN(20))
		for i := range b {
			b[i] = "{}{}:a rnfecw\x00"[r.IntN(14)]
		}
		names = append(names, string(b))
	}
	return names
}

// TestLockKeysShareOneSlotAndNeverCollide: for any name, braces included,
// all keys of a lock hash to one Redis Cluster slot through a non-empty
// hash tag, and distinct names share no key.
func TestLockKeysShareOneSlotAndNeverCollide(t *testing.T) {
	names := adversarialNames()
	require.Greater(t, len(names), 7000)
	owner := map[string]string{} // key -> the name it belongs to
	for _, name := range names {
		keys := readMode.keys("", name)
		require.Equal(t, exclusiveMode.keys("", name), keys[:1])
		slot := keySlot(keys[0])
		for _, k := range keys {
			open := strings.IndexByte(k, '{')
			require.GreaterOrEqual(t, open, 0, "key %q of %q has no '{'", k, name)
			require.Greater(t, strings.IndexByte(k[open+1:], '}'), 0, "key %q of %q has an empty or no hash tag", k, name)
			require.Equal(t, slot, keySlot(k), "keys %q and %q of %q are in different slots", keys[0], k, name)
			if other, dup := owner[k]; dup {
				t.Fatalf("names %q and %q share the key %q", other, name, k)
			}
			owner[k] = name
		}
	}
}

// TestLockKeysOfPlainNamesAreUnchanged: a name that does not start with
// '}' keeps the keys it always had, so that clients of older versions
// lock the same keys.
func TestLockKeysOfPlainNamesAreUnchanged(t *testing.T) {
	for _, name := range []string{"k", "app:k", "a}b", "{x}", "a{b}c", "{", "x}"} {
		assert.Equal(t, []string{"{" + name + "}"}, exclusiveMode.keys("", name))
	}
	assert.Equal(t, []string{"{p:k}", "{p:k}:r", "{p:k}:rn", "{p:k}:ww"}, writeMode.keys("p:", "k"))
	assert.Equal(t, []string{"}{)a}}a}"}, exclusiveMode.keys("}", "a"))
}

// TestWakerChannelIsWhereReleasesPublish: the release scripts publish on
// KEYS[1]; a waker must listen there, prefix and braces included.
func TestWakerChannelIsWhereReleasesPublish(t *testing.T) {
	for _, prefix := range []string{"", "app:", "}", "{"} {
		c := newFakeClient(t, fakes(1), &Options{KeyPrefix: prefix})
		for _, key := range []string{"k", "}k", "{k}", "a}"} {
			w := c.newWaker(key, false, time.Time{})
			assert.Equal(t, exclusiveMode.keys(prefix, key)[0], w.channel, "prefix %q, key %q", prefix, key)
			assert.Equal(t, readMode.keys(prefix, key)[0], w.channel)
			w.Close()
		}
	}
}

// TestLinkedLockKeys: the command redlock finds a lock's keys where the
// scripts use them.
func TestLinkedLockKeys(t *testing.T) {
	hooks := link.Get[*Client, *Lock]()
	assert.Equal(t, writeMode.keys("p:", "}k"), hooks.LockKeys("p:", "}k", true))
	assert.Equal(t, exclusiveMode.keys("p:", "}k"), hooks.LockKeys("p:", "}k", false))
}
