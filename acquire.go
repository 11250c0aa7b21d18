package redlock

import "context"

// acquirePolicy is an acquire's part in its round. A master may agree
// after the decision, or time out and apply later: that agreement may
// outlive the lock's release, and is deleted again (see lateAgreement).
type acquirePolicy struct {
	noHooks
	l     *Lock
	holds int // the holds the round sets
}

func (p *acquirePolicy) settles(a answer) bool { return a.mayHaveApplied() }

func (p *acquirePolicy) settled(ctx context.Context, i int, a answer, counted bool) func() {
	// The decider counted an unknown outcome as a refusal: it may
	// still land.
	if !counted || a.unknown() {
		p.l.lateAgreement(ctx, i, p.holds, a.unknown())
	}
	return nil
}
