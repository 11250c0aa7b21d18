package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/quorum"
)

// releasePolicy is the last release's part in its round. A master that
// gives no answer gets the release again in the background. The answers
// meet the acquire's late agreements (see releasedOn). The lock is handed
// on to this client's next waiter once the calls are queued, if early,
// else once the round is decided (see Lock.release).
type releasePolicy struct {
	l      *Lock
	retry  quorum.Cleanup // the release itself, sent again
	keyTTL time.Duration  // the longest a key it deletes lives: retries stop then
	early  bool
	then   func() // runs at the hand-off; nil for none
}

func (p *releasePolicy) Queued() {
	if p.early {
		p.handOff()
	}
}

func (p *releasePolicy) Answered(ctx context.Context, i int, a quorum.Answer) {
	if a.Err != nil {
		p.l.client.engine.RetryLater(ctx, i, p.retry, p.keyTTL)
		return
	}
	p.l.releasedOn(ctx, i, a.Applied())
}

func (p *releasePolicy) Settles(quorum.Answer) bool { return false }

func (p *releasePolicy) Settled(context.Context, int, quorum.Answer, bool) func() { return nil }

// handOff wakes this client's next waiter for the lock (see
// Client.releasing), and runs then.
func (p *releasePolicy) handOff() {
	p.l.client.releasing(p.l.keys.Names[0], p.l.nonce)
	if p.then != nil {
		p.then()
	}
}
