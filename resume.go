package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// Scripts of Resume (see scripts.lua).
var (
	resumeScript    = scripts.get("resume")
	remainingScript = scripts.get("remaining")
)

// Resume takes over the exclusive or reentrant lock on key that owner
// holds: after a restart of its process, or from another process. owner
// is the owner given to AcquireAs, or the Value of a Lock from Acquire.
// Each master where owner holds the lock hands it to a new Lock. It keeps
// its token and its TTL: Resume never lengthens the lock. A master where
// owner does not hold it refuses. The returned Lock has one hold; earlier
// re-entries are forgotten, and its last Release frees the lock. ttl is
// the TTL of its later Extends and renewals (AutoRenew).
//
// Until is where the quorum's remaining TTLs end, never later. A second
// round asks each master for the TTL it has left (PTTL). The deadline is
// that round's start plus the least remaining TTL of the quorum, less its
// drift allowance. Where the masters' tokens differ, a fence round raises
// them first, as Acquire's does.
//
// An older Lock of owner's for key, if one still exists, loses the lock
// wherever Resume reached a master. Its Extend, renewal and Release then
// find nothing there, and fail once that is a quorum. Its Done closes
// then, or when its validity runs out.
//
// Resume returns an error wrapping ErrNotObtained, with a *QuorumError
// that tells each master's part, where fewer than a quorum hold the lock
// for owner, or no validity is left. A failed Resume undoes nothing: the
// masters it reached keep the lock for owner, under a nonce no Lock has,
// until its TTL. Another Resume takes them over again. It blocks for two
// quorum rounds, three with the fence, each bounded by MasterTimeout.
// Cancelling ctx ends it early; the error then also matches ctx.Err().
// Read and write locks cannot be resumed.
func (c *Client) Resume(ctx context.Context, key, owner string, ttl time.Duration) (*Lock, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx, "resume"); err != nil {
		return nil, err
	}
	switch {
	case key == "":
		return nil, invalidf("resume: empty key")
	case owner == "":
		return nil, invalidf("resume %s: empty owner", quote(key))
	}
	ttl, err := c.checkTTL("TTL", ttl)
	if err != nil {
		return nil, err
	}
	nonce, err := c.value()
	if err != nil {
		return nil, err
	}
	m := exclusiveMode
	l := &Lock{lockID: lockID{client: c, mode: m, key: key, value: owner, nonce: c.nonce(nonce), keys: pipeline.NewKeys(m.keys(c.prefix, key)...)}, ttl: ttl}
	if c.observer != nil { // as an acquired Lock's (see lockID.origin)
		l.origin = context.WithoutCancel(ctx)
	}
	l.box()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.resume(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// resume runs Resume's rounds for l, a new Lock. l.mu must be held.
func (l *Lock) resume(ctx context.Context) error {
	c := l.client
	l.sendsTTL(l.ttl)
	res, err := c.do(ctx, &op{name: "resume", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: resumeScript,
		Keys:   l.keys,
		Args:   l.args(argv{ttl: l.ttl, holds: 1}),
		Policy: resumePolicy{},
	}})
	if err != nil {
		return err
	}
	fenced := c.fencing && res.Max > 1
	if fenced {
		// No deadline is known yet: the next round checks the validity.
		if err := l.raiseFence(ctx, res, time.Now().Add(l.ttl)); err != nil {
			return err
		}
	}
	left, err := c.do(ctx, &op{name: "resume", key: l.key, sentinel: ErrNotObtained, Spec: quorum.Spec{
		Script: remainingScript,
		Keys:   l.keys,
		Args:   l.args(argv{ttl: l.ttl, holds: 1}),
		Lossy:  true, // it writes nothing
	}})
	if err != nil {
		return err
	}
	// The least of the quorum's remaining TTLs: past it, fewer than a
	// quorum of the masters that counted hold the lock.
	least := time.Duration(0)
	for i := range left.Masters() {
		if r := left.Master(i); r.Agreed && (least == 0 || time.Duration(r.Val)*time.Millisecond < least) {
			least = time.Duration(r.Val) * time.Millisecond
		}
	}
	until := c.deadline(left.Start, least)
	if !time.Now().Before(until) {
		return fmt.Errorf("%w: resume %s: the lock's remaining TTL (%v) left no validity", ErrNotObtained, quote(l.key), least)
	}
	// Releases and their markers must cover the longest key it may find.
	l.sendsTTL(time.Duration(left.Max) * time.Millisecond)
	if fenced {
		l.token = uint64(res.Max)
	}
	if err := l.setUntil(until); err != nil {
		return fmt.Errorf("%w: resume %s: lost meanwhile: %w", ErrNotObtained, quote(l.key), err)
	}
	l.holds = 1
	if c.observer != nil {
		l.observe(ctx, EventAcquired, nil)
		l.signal() // tracked, so that its loss is reported
	}
	return nil
}

// resumePolicy is a resume's part in its round. A master in quarantine
// does not count: its new server may keep a lock that was released since.
type resumePolicy struct{ quorum.NoHooks }

func (resumePolicy) Counts(_ int, _ quorum.Answer, m quorum.MasterState) error {
	return m.Quarantine()
}
