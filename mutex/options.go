package mutex

import (
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/retry"
)

// Options configure a Mutex or a Reentrant. The zero value of each field
// selects its default. New and NewReentrant name the first invalid one.
type Options struct {
	// TTL is how long the lock lives on the masters without renewal, in
	// whole milliseconds. It must be longer than the client's
	// MasterTimeout and its own drift allowance, and with fencing at least
	// 4*MasterTimeout. Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timer between two
	// attempts of Lock. It serves releases Lock did not hear of, and locks
	// that expire. The delay doubles from MinRetryDelay up to
	// MaxRetryDelay. Each one is drawn at random from its upper half, so
	// that competing clients fall out of step. Both must be at least 1ms.
	// Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration

	// AutoRenew keeps each lock held until it is unlocked. It extends the
	// lock every third of its TTL (see redlock.Lock.AutoRenew). Default:
	// off.
	AutoRenew bool
}

// Defaults of Options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
)

// check fills in the defaults of opts (nil for all defaults). It names
// the first invalid value.
func check(client *redlock.Client, key string, opts *Options) (retry.Options, error) {
	if opts == nil {
		opts = &Options{}
	}
	return retry.Options(*opts).Check(client, key, "mutex.Options")
}
