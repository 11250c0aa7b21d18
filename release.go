package redlock

import (
	"context"
	"time"
)

// releasePolicy is the last release's part in its round. A master that
// gives no answer gets the release again in the background. The answers
// meet the acquire's late agreements (see releasedOn). The lock is handed
// on to this client's next waiter once the calls are queued, if early,
// else once the round is decided (see Lock.release).
type releasePolicy struct {
	l      *Lock
	retry  cleanup       // the release itself, sent again
	keyTTL time.Duration // the longest a key it deletes lives: retries stop then
	early  bool
	then   func() // runs at the hand-off; nil for none
}

func (p *releasePolicy) queued() {
	if p.early {
		p.handOff()
	}
}

func (p *releasePolicy) answered(ctx context.Context, i int, a answer) {
	if a.err != nil {
		p.l.client.retryLater(ctx, i, p.retry, p.keyTTL)
		return
	}
	p.l.releasedOn(ctx, i, a.applied())
}

func (p *releasePolicy) settles(answer) bool { return false }

func (p *releasePolicy) settled(context.Context, int, answer, bool) func() { return nil }

// handOff wakes this client's next waiter for the lock (see
// Client.releasing), and runs then.
func (p *releasePolicy) handOff() {
	p.l.client.releasing(p.l.keys.Names[0], p.l.nonce)
	if p.then != nil {
		p.then()
	}
}
