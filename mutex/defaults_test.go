package mutex

import (
	"testing"

	"github.com/go-redlock/redlock/internal/retry"
)

// The documented defaults are the ones the blocking loop fills in.
func TestDefaultsAreTheLoops(t *testing.T) {
	if DefaultTTL != retry.DefaultTTL || DefaultMinRetryDelay != retry.DefaultMinRetryDelay || DefaultMaxRetryDelay != retry.DefaultMaxRetryDelay {
		t.Errorf("defaults %v, %v, %v differ from internal/retry's", DefaultTTL, DefaultMinRetryDelay, DefaultMaxRetryDelay)
	}
}
