package redlocktest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/go-redlock/redlock/redlocktest"
)

// TestKillWhileCommandsRun: killing a master while its clients' commands
// run is race-free. miniredis answers INFO without its lock, and its Close
// cleared the server under it (go test -race found it in the conformance
// suite on a busy machine); Kill now stops the server's connections first.
// Bounded: 30 kills, each with INFO in flight from 4 goroutines.
func TestKillWhileCommandsRun(t *testing.T) {
	m := redlocktest.NewMasters(t, 1)[0]
	ctx := context.Background()
	for range 30 {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = m.Client().Info(ctx).Err() // fails once killed: that is fine
				}
			})
		}
		_ = m.Client().Info(ctx).Err()
		if err := m.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if err := m.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
