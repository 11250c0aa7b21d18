package election

import (
	"context"
	"fmt"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/mutex"
)

// Owner returns the owner of the leadership's lock: what Resume takes to
// resume it after a restart, or from another process. Keep it where the
// next process finds it, as a secret: whoever has it can take the lead.
func (l *Leadership) Owner() string { return l.lock.Value() }

// Resume takes over the leadership whose lock owner holds: after a
// restart of the leader's process, or from another process (the
// owner is that Leadership's Owner). The returned Leadership has the same
// epoch. Its validity is what is left of the lock's TTL on a quorum,
// never more (see redlock.Client.Resume); renewals then go on as after
// Campaign. Its Value is the latest the leader published, and its next
// Proclaim follows the leader's last. The old Leadership, if it still
// runs, loses the lead: its renewals fail.
//
// It returns an error wrapping ErrNoLeader where the election has no
// leader, and one wrapping redlock.ErrNotObtained where owner does not
// hold the leader's lock; nothing is changed then. An empty owner, a nil
// ctx or a zero Election gets an error wrapping
// redlock.ErrInvalidArgument. It blocks for a read, Resume's quorum
// rounds and another read. Cancelling ctx ends it with an error matching
// ctx.Err(); a lock it had taken over is released then.
func (e *Election) Resume(ctx context.Context, owner string) (*Leadership, error) {
	if err := e.check(ctx, "Resume"); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, fmt.Errorf("%w: election %s: resume: empty owner", redlock.ErrInvalidArgument, clip.Quote(e.name))
	}
	fail := func(err error) (*Leadership, error) {
		return nil, fmt.Errorf("election %s: resume: %w", clip.Quote(e.name), err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	// Only a leader's lock is taken: one whose win is recorded, and who
	// has not resigned. A plain lock of the name is left alone.
	r := e.read(ctx, "", 0)
	before, ok := r.leader()
	switch {
	case ok:
	case r.holder != nil || r.vacant:
		return nil, fmt.Errorf("%w to resume: election %s", ErrNoLeader, clip.Quote(e.name))
	default:
		return nil, r.noQuorum(ctx, e.name)
	}
	m, err := mutex.New(e.client, e.name, &mutex.Options{TTL: e.opts.TTL, MinRetryDelay: e.opts.MinRetryDelay, MaxRetryDelay: e.opts.MaxRetryDelay, AutoRenew: true})
	if err != nil {
		return fail(err)
	}
	if err := m.Resume(ctx, owner); err != nil {
		return fail(err)
	}
	// From here on the lock is this Mutex's: a failure releases it.
	release := func(err error) (*Leadership, error) {
		_ = m.Unlock(context.WithoutCancel(ctx))
		return fail(err)
	}
	epoch := m.Current().Token()
	if epoch != before.Epoch {
		return release(fmt.Errorf("%w: the lock of owner %s has epoch %d, the leader's is %d", redlock.ErrNotObtained, clip.Quote(owner), epoch, before.Epoch))
	}
	// The old Leadership may have proclaimed or resigned since the first
	// read. Now that its lock is taken over, it cannot write any more
	// where the take-over landed: a second read finds its last entry.
	last := before
	if en := e.read(ctx, "", 0).latest(epoch); en != nil {
		if en.Resigned {
			return release(fmt.Errorf("%w: the leader of epoch %d resigned meanwhile", ErrNoLeader, epoch))
		}
		if en.Seq > last.Seq {
			last.Seq, last.Value = en.Seq, en.Value
		}
	}
	if err := ctx.Err(); err != nil {
		return release(err)
	}
	l := e.lead(m, last.Value)
	l.seq = last.Seq // l is not shared yet: no lock needed
	// The guard may have ended it at once: too little validity was left.
	if l.ctx.Err() != nil {
		err := l.Err()
		_ = l.Resign(context.WithoutCancel(ctx))
		return fail(err)
	}
	return l, nil
}
