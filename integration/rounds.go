package integration

import (
	"context"
	"sync/atomic"

	"github.com/go-redlock/redlock"
)

// AcquireRounds is a redlock.Observer that counts a client's acquire
// rounds, for tests that check how many attempts a lock took. It is safe
// for concurrent use.
type AcquireRounds struct{ N atomic.Int64 }

// ObserveRound counts r if it is an acquire.
func (a *AcquireRounds) ObserveRound(_ context.Context, r redlock.Round) {
	if r.Op == "acquire" {
		a.N.Add(1)
	}
}

// ObserveEvent does nothing.
func (*AcquireRounds) ObserveEvent(context.Context, redlock.Event) {}
