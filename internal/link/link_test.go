package link

import (
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
