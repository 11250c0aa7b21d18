package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/quorum"
)

// extendPolicy is an extend's part in its round: once a quorum agreed,
// it repairs the masters that answered without the lock (see repairOn).
type extendPolicy struct {
	quorum.NoHooks
	l     *Lock
	until time.Time // the deadline the round would set
	holds int64     // what a repair sets
	token uint64
}

// extendPolicy returns the policy of an extend whose validity ends by
// until. Read locks, and Options.NoRepair, repair nothing. l.mu must be
// held.
func (l *Lock) extendPolicy(until time.Time) quorum.Policy {
	if l.mode.repair == nil || l.client.noRepair {
		return quorum.NoHooks{}
	}
	return &extendPolicy{l: l, until: until, holds: int64(l.holds), token: max(l.token, 1)}
}

func (p *extendPolicy) Settles(a quorum.Answer) bool { return a.Refused() }

func (p *extendPolicy) Settled(ctx context.Context, i int, _ quorum.Answer, _ bool) func() {
	return func() { p.l.repairOn(ctx, i, p.until, p.holds, p.token) }
}
