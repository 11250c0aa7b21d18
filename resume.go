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

// Resume takes over, after a restart, the exclusive or reentrant lock on
// key that owner (AcquireAs's, or a Lock's Value) holds: same token, one
// hold, valid no longer than the quorum's remaining TTLs; ttl is for later
// renewals. An older Lock of owner's loses it. Where too few masters hold
// it, Resume wraps ErrNotObtained and undoes nothing. It blocks for two
// or three rounds; cancelling ctx ends it early.
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
