// Package slogobserver logs what a redlock.Client does with log/slog: set
// the value New returns as redlock.Options.Observer.
//
// Rounds and the routine events (acquired, waited, renewed, released) are
// logged at Debug; a failed renewal, a lost lock and a release that found
// the lock gone at Warn. Every record
// carries the lock's key as attribute "key".
package slogobserver

import (
	"context"
	"log/slog"

	"github.com/go-redlock/redlock"
)

// Observer logs rounds and lock events to a *slog.Logger. It is safe for
// concurrent use.
type Observer struct{ log *slog.Logger }

// New returns an Observer that logs to log, or to slog.Default() if log is
// nil.
func New(log *slog.Logger) *Observer {
	if log == nil {
		log = slog.Default()
	}
	return &Observer{log: log}
}

var _ redlock.Observer = (*Observer)(nil)

// ObserveRound logs one quorum round at Debug, with each master's outcome
// and latency.
func (o *Observer) ObserveRound(ctx context.Context, r redlock.Round) {
	if !o.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	masters := make([]any, len(r.Masters))
	for i, m := range r.Masters {
		attrs := []any{slog.Bool("agreed", m.Agreed), slog.Duration("latency", m.Latency)}
		if m.Err != nil {
			attrs = append(attrs, slog.String("error", m.Err.Error()))
		}
		masters[i] = slog.Group(m.Master, attrs...)
	}
	attrs := []any{slog.String("op", r.Op), slog.String("key", r.Key), slog.Duration("elapsed", r.Elapsed),
		slog.Bool("ok", r.Err == nil), slog.Group("masters", masters...)}
	if r.Validity > 0 {
		attrs = append(attrs, slog.Duration("validity", r.Validity))
	}
	if r.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", r.Token))
	}
	o.log.DebugContext(ctx, "redlock round", attrs...)
}

// ObserveEvent logs one lock event: at Warn if the lock was lost, a
// renewal failed or the last release failed, else at Debug.
func (o *Observer) ObserveEvent(ctx context.Context, e redlock.Event) {
	level := slog.LevelDebug
	if e.Kind == redlock.EventLost || e.Kind == redlock.EventRenewalFailed || e.Kind == redlock.EventReleased && e.Err != nil {
		level = slog.LevelWarn
	}
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("event", e.Kind.String()), slog.String("key", e.Key)}
	if e.Read {
		attrs = append(attrs, slog.Bool("read", true))
	}
	if e.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", e.Token))
	}
	if !e.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", e.Until))
	}
	if e.Kind == redlock.EventWaited {
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	}
	if e.WasLost {
		attrs = append(attrs, slog.Bool("was_lost", true))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.log.LogAttrs(ctx, level, "redlock "+e.Kind.String(), attrs...)
}
