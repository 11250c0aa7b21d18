package redlock

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWriteWaitMarkerTTL: the marker outlives WriteWait by three
// MasterTimeouts (see markerTTL), and a WriteWait so long that the sum
// overflows keeps the marker for WriteWait, not for a negative TTL that
// would leave none (review).
func TestWriteWaitMarkerTTL(t *testing.T) {
	c := newFakeClient(t, fakes(3), &Options{MasterTimeout: 100 * time.Millisecond})
	for _, tc := range []struct{ writeWait, want time.Duration }{
		{0, 0},
		{time.Second, 1300 * time.Millisecond},
		{math.MaxInt64, math.MaxInt64},
	} {
		l := &Lock{lockID: lockID{client: c, mode: writeMode, writeWait: tc.writeWait}, ttl: time.Second}
		l.box()
		assert.Equal(t, tc.want.Milliseconds(), l.boxed.writeWait, "WriteWait %v", tc.writeWait)
	}
}
