package redlock

import (
	"context"

	"github.com/go-redlock/redlock/internal/quorum"
)

// acquirePolicy is an acquire's part in its round. A master may agree
// after the decision, or time out and apply later: that agreement may
// outlive the lock's release, and is deleted again (see lateAgreement).
type acquirePolicy struct {
	quorum.NoHooks
	l     *Lock
	holds int // the holds the round sets
}

func (p *acquirePolicy) Settles(a quorum.Answer) bool { return a.MayHaveApplied() }

func (p *acquirePolicy) Settled(ctx context.Context, i int, a quorum.Answer, counted bool) func() {
	// The decider counted an unknown outcome as a refusal: it may
	// still land.
	if !counted || a.Unknown() {
		p.l.lateAgreement(ctx, i, p.holds, a.Unknown())
	}
	return nil
}
