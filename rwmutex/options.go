package rwmutex

import (
	"time"
)

// Options configure an RWMutex. The zero value of each field selects its
// default. New names the first invalid one.
type Options struct {
	// TTL is how long each hold lives on the masters without renewal, in
	// whole milliseconds. Each reader's hold expires on its own. It must
	// be longer than the client's MasterTimeout and its own drift
	// allowance, and with fencing at least 4*MasterTimeout (write locks
	// are fenced). Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timer between two
	// attempts of RLock and Lock. It serves releases they did not hear of,
	// and holds that expire. The delay doubles from MinRetryDelay up to
	// MaxRetryDelay. Each one is drawn at random from its upper half. Both
	// must be at least 1ms, and MaxRetryDelay less than half of WriteWait.
	// Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration

	// AutoRenew keeps each hold until it is unlocked. It extends the hold
	// every third of its TTL (see redlock.Lock.AutoRenew). Default: off.
	AutoRenew bool

	// WriteWait is how long a writer that waits for readers keeps new
	// readers out after each of its attempts. So a stream of readers
	// cannot starve it. Lock retries well within it. It is kept in whole
	// milliseconds and must be at least 1ms. The masters keep each
	// attempt's marker for three times the client's MasterTimeout longer.
	// That is the longest its round (decision and undo) and the next
	// attempt's call may add to the retry delay. So a writer that gives up
	// keeps new readers out for up to WriteWait plus three MasterTimeouts.
	// Default: 1s.
	WriteWait time.Duration
}

// Defaults of Options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
	DefaultWriteWait     = time.Second
)
