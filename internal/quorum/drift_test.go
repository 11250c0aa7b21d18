package quorum

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDrift(t *testing.T) {
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{10 * time.Second, 0.01, 102 * time.Millisecond},
		{time.Second, 0.01, 12 * time.Millisecond},
		{100 * time.Millisecond, 0.01, 3 * time.Millisecond},
		{10 * time.Millisecond, 0.01, 2100 * time.Microsecond}, // the 2ms dominate
		{time.Millisecond, 0, 2 * time.Millisecond},
		{3 * time.Nanosecond, 0.5, 2*time.Millisecond + 2}, // factor part rounds up
	} {
		assert.Equal(t, tc.want, Drift(tc.ttl, tc.factor), "Drift(%v, %v)", tc.ttl, tc.factor)
	}
}

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		ttl, elapsed time.Duration
		want         time.Duration
	}{
		{10 * time.Second, 5 * time.Millisecond, 10*time.Second - 5*time.Millisecond - 102*time.Millisecond},
		{time.Second, 0, 988 * time.Millisecond},
		{10 * time.Millisecond, 7 * time.Millisecond, 900 * time.Microsecond},   // still held
		{10 * time.Millisecond, 8 * time.Millisecond, -100 * time.Microsecond},  // 2ms term makes it expire
		{5 * time.Millisecond, 3 * time.Millisecond, -50 * time.Microsecond},    // without +2ms it would look held
		{100 * time.Millisecond, 100 * time.Millisecond, -3 * time.Millisecond}, // elapsed ate the TTL
	} {
		assert.Equal(t, tc.want, Validity(tc.ttl, tc.elapsed, 0.01), "Validity(%v, %v)", tc.ttl, tc.elapsed)
	}
}
