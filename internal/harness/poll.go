package harness

import (
	"context"
	"fmt"
	"time"
)

// Poll calls cond every 20ms until it holds or ctx ends, for the servers'
// states that no command waits for (a replica in sync, a failover done).
// The error names what and the last error of cond.
func Poll(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
