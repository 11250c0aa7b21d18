package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
)

// Run leads the election whenever it can, until ctx ends. It campaigns
// with value; once it leads, it calls fn with a context that is
// cancelled when the lead ends (its cause is the Leadership's Err) or
// ctx does. When fn returns, Run resigns and campaigns again. So fn runs
// on one candidate at a time, and again elsewhere when that one stops.
// After fn returns an error, the next campaign waits a little, doubling
// up to MaxRetryDelay. Where fn panics, Run resigns, then panics again.
//
// Run returns once ctx ended, with an error matching ctx.Err() joined
// with fn's last error, if fn's last call failed other than by losing the
// lead. It returns earlier where a campaign cannot succeed (the client
// closed). A nil fn or ctx, or a zero Election, gets an error wrapping
// redlock.ErrInvalidArgument at once.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, l *Leadership) error) error {
	if err := e.check(ctx, "Run"); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: Run %s: nil fn", redlock.ErrInvalidArgument, clip.Quote(e.name))
	}
	var last error // fn's last error
	delay := e.opts.MinRetryDelay
	for {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return errors.Join(fmt.Errorf("election %s: run: %w", clip.Quote(e.name), ctx.Err()), last)
			}
			return err
		}
		err = l.serve(ctx, fn)
		last = nil
		if err != nil && !l.endedBy(err) {
			last = err
		}
		if ctx.Err() != nil {
			return errors.Join(fmt.Errorf("election %s: run: %w", clip.Quote(e.name), ctx.Err()), last)
		}
		if last == nil {
			delay = e.opts.MinRetryDelay
			continue
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-t.C:
			delay = min(2*delay, e.opts.MaxRetryDelay)
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// serve calls fn while l leads, then resigns, even where fn panics.
func (l *Leadership) serve(ctx context.Context, fn func(context.Context, *Leadership) error) error {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer func() {
		stop()
		cancel(nil)
		_ = l.Resign(context.WithoutCancel(ctx))
	}()
	return fn(fctx, l)
}

// endedBy reports whether err, fn's, only says that the lead ended.
func (l *Leadership) endedBy(err error) bool {
	return l.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.Cause(l.ctx)))
}
