package nemesis

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStaleToken is returned (wrapped) by Resource when a fenced operation
// carries a token lower than one the resource has already seen.
var ErrStaleToken = errors.New("stale fencing token")

// Fence is the fencing token a lock holder presents to the resource. The
// zero value means "no token": the resource does not check it.
type Fence struct {
	Token uint64
	Valid bool
}

// Resource is the shared state the critical sections protect: one integer
// register that clients read, increment and write back, in the test
// process. With a Fence it behaves like Kleppmann's fenced storage: it
// remembers the highest token it has seen and rejects any operation with a
// lower one.
//
// Each operation also returns the instant it took effect on the Recorder's
// clock, taken under the resource's lock, so those instants order the
// operations exactly. It is safe for concurrent use.
type Resource struct {
	clock *Recorder

	mu       sync.Mutex
	value    int64
	maxToken uint64
	rejected int
}

// NewResource returns a resource holding 0 that timestamps its operations
// with rec's clock.
func NewResource(rec *Recorder) *Resource { return &Resource{clock: rec} }

// Read returns the value and when it was read. A fenced read with a stale
// token is rejected (ErrStaleToken); one with a newer token raises the
// highest token seen.
func (r *Resource) Read(f Fence) (int64, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.clock.Now()
	if err := r.checkLocked(f); err != nil {
		return 0, at, err
	}
	return r.value, at, nil
}

// Write stores v and returns when it was written, or rejects a stale fenced
// write (ErrStaleToken) and leaves the value unchanged.
func (r *Resource) Write(f Fence, v int64) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.clock.Now()
	if err := r.checkLocked(f); err != nil {
		return at, err
	}
	r.value = v
	return at, nil
}

func (r *Resource) checkLocked(f Fence) error {
	if !f.Valid {
		return nil
	}
	if f.Token < r.maxToken {
		r.rejected++
		return fmt.Errorf("%w: %d < %d", ErrStaleToken, f.Token, r.maxToken)
	}
	r.maxToken = f.Token
	return nil
}

// Value returns the current value.
func (r *Resource) Value() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value
}

// Rejected returns how many operations were rejected as stale.
func (r *Resource) Rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected
}
