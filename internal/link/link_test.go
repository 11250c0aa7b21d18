package link

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHolderValuesRoundTrip(t *testing.T) {
	for _, h := range []Holder{
		{Owner: "worker-7", Nonce: "n", Holds: 1, Token: "1"},
		{Owner: "a:b", Nonce: "1:2:", Holds: 12, Token: "9223372036854775807", Waited: true},
		{Owner: "", Nonce: "", Holds: 0, Token: "0"},
		{Owner: "ünï\x00", Nonce: "10:x", Holds: 3, Token: "42"},
	} {
		v := FormatHolder(h)
		got, ok := ParseHolder(v)
		require.True(t, ok, v)
		assert.Equal(t, h, got, v)
	}
	for _, v := range []string{"", "1", "1:1:0", "x:1:0:0:", "1:1:2:0:", "1:1:0:5:abc", "1::0:0:", "1:1:0:-1:"} {
		_, ok := ParseHolder(v)
		assert.False(t, ok, "%q is not a lock value", v)
	}
}

// splitMultiKey reads back the names of MultiKey's key, or fails.
func splitMultiKey(t *testing.T, key string) []string {
	t.Helper()
	var names []string
	for len(key) > 0 {
		var n string
		if key[0] == '"' {
			q, err := strconv.QuotedPrefix(key)
			require.NoError(t, err, key)
			n, err = strconv.Unquote(q)
			require.NoError(t, err)
			key = key[len(q):]
		} else {
			n, key, _ = strings.Cut(key, ",")
			names = append(names, n)
			continue
		}
		names = append(names, n)
		if key != "" {
			require.Equal(t, byte(','), key[0], "a comma after a quoted name")
			key = key[1:]
		}
	}
	return names
}

// MultiKey's key tells the names back, so no two sets of names share
// one: a name with a comma is not two names.
func TestMultiKeyUnambiguous(t *testing.T) {
	assert.Equal(t, "a,b", MultiKey([]string{"a", "b"}), "plain names as they are")
	assert.Equal(t, `"a,b"`, MultiKey([]string{"a,b"}))
	assert.Equal(t, `a"b`, MultiKey([]string{`a"b`}), "a quote inside is no quote")
	sets := [][]string{
		{"a", "b"}, {"a,b"}, {"a,", "b"}, {"a", ",b"}, {`"a"`, "b"}, {`"a","b"`},
		{`a"`, "b"}, {"é,\xff", "z"}, {",", ",,"}, {`"`}, {`\`, `"\"`},
	}
	seen := map[string][]string{}
	for _, names := range sets {
		key := MultiKey(names)
		assert.Equal(t, names, splitMultiKey(t, key), "key %s", key)
		if other, dup := seen[key]; dup {
			t.Errorf("%q and %q share the key %s", other, names, key)
		}
		seen[key] = names
	}
}
