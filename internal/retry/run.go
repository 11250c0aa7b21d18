package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
)

// MarginDivisor sets Run's margin: a work's context ends TTL/MarginDivisor
// before the lock's validity runs out. Auto-renewal extends at a third of
// the TTL, so a healthy lock never comes that close.
const MarginDivisor = 10

// Run calls fn with l and a context derived from ctx. That context is
// cancelled when ctx ends, when l is lost (cause: l's Err), or once less
// than margin of l's validity is left (cause: an error wrapping
// redlock.ErrNotHeld). A renewal that moves Until moves that point too.
// Then unlock runs with a fresh context, not ctx: the release must not be
// lost. It is bounded by bound, and keeps ctx's values. A panic of fn
// still runs unlock, then goes on. Run returns fn's error joined with
// unlock's. No goroutine of Run's is left when it returns.
func Run(ctx context.Context, l *redlock.Lock, margin, bound time.Duration,
	fn func(context.Context, *redlock.Lock) error, unlock func(context.Context) error) (err error) {
	work, cancel := context.WithCancelCause(ctx)
	stop, exited := make(chan struct{}), make(chan struct{})
	go watch(work, cancel, l, margin, stop, exited)
	defer func() {
		// Runs while a panic unwinds too: the lock must be released.
		close(stop)
		<-exited
		cancel(context.Canceled)
		rctx, done := context.WithTimeout(context.WithoutCancel(ctx), bound)
		defer done()
		if uerr := unlock(rctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(work, l)
}

// watch cancels work when l is lost or its validity comes within margin
// of its end, until stop is closed or work ends. It closes exited when
// it returns.
func watch(work context.Context, cancel context.CancelCauseFunc, l *redlock.Lock, margin time.Duration,
	stop <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	t := time.NewTimer(time.Until(l.Until()) - margin)
	defer t.Stop()
	lost := l.Done()
	for {
		select {
		case <-lost:
			cancel(l.Err())
			return
		case <-t.C:
			// A renewal may have moved the deadline since the timer was set.
			until := l.Until()
			if left := time.Until(until) - margin; left > 0 {
				t.Reset(left)
				continue
			}
			if err := l.Err(); err != nil { // lost meanwhile: its own cause
				cancel(err)
				return
			}
			cancel(fmt.Errorf("%w: %s: validity runs out at %v, less than %v from now",
				redlock.ErrNotHeld, clip.Quote(l.Key()), until.Round(0), margin))
			return
		case <-stop:
			return
		case <-work.Done():
			return
		}
	}
}

// NilFunc is the error of call op (such as "Mutex.Do") on key when its
// func is nil. The call is refused before anything is done.
func NilFunc(op, key string) error {
	return fmt.Errorf("%w: %s %s: nil func", redlock.ErrInvalidArgument, op, clip.Quote(key))
}
