// Package slogobserver logs what a redlock.Client does with log/slog: set
// the value New returns as redlock.Options.Observer.
//
// Rounds and the routine events (acquired, waited, renewed, released) are
// logged at Debug, a failed renewal that will be retried at Info. A
// warning means an operator should look: a lost lock (once per loss), a
// last release that failed, and a blocking Lock that finds too few masters
// answering (once per episode). Contention is routine: a healthy service
// under contention logs no warning. Every record carries the lock's key as
// attribute "key", and names masters in values ("master"), never in keys.
// Use redlock.Observers to record with otelredlock too.
package slogobserver

import (
	"context"
	"log/slog"
	"strconv"

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

// ObserveRound logs one quorum round at Debug, with its outcome
// (redlock.Outcome) and each master's: in group "masters", one group per
// master by position, with its address as "master".
func (o *Observer) ObserveRound(ctx context.Context, r redlock.Round) {
	if !o.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	masters := make([]any, len(r.Masters))
	for i, m := range r.Masters {
		attrs := []any{slog.String("master", m.Master), slog.Bool("agreed", m.Agreed), slog.Duration("latency", m.Latency)}
		if m.Err != nil {
			attrs = append(attrs, slog.String("error", m.Err.Error()))
		}
		masters[i] = slog.Group(strconv.Itoa(i), attrs...)
	}
	attrs := []any{slog.String("op", r.Op), slog.String("key", r.Key), slog.Duration("elapsed", r.Elapsed),
		slog.Bool("ok", r.Err == nil), slog.String("outcome", redlock.Outcome(r.Err)), slog.Group("masters", masters...)}
	if r.Validity > 0 {
		attrs = append(attrs, slog.Duration("validity", r.Validity))
	}
	if r.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", r.Token))
	}
	o.log.DebugContext(ctx, "redlock round", attrs...)
}

// level is the level of event e.
func level(e redlock.Event) slog.Level {
	switch e.Kind {
	case redlock.EventLost, redlock.EventNoQuorum:
		return slog.LevelWarn
	case redlock.EventRenewalFailed:
		return slog.LevelInfo // retried; a loss warns
	case redlock.EventReleased:
		if e.Err != nil && !e.WasLost { // a loss warned already
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}

// ObserveEvent logs one lock event: at Warn if the lock was lost, the
// last release failed, or a blocking Lock began to find no quorum. A
// renewal that failed, and will be retried, is logged at Info. The
// others are logged at Debug.
func (o *Observer) ObserveEvent(ctx context.Context, e redlock.Event) {
	level := level(e)
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
		attrs = append(attrs, slog.Duration("wait", e.Wait), slog.String("outcome", redlock.Outcome(e.Err)))
	}
	if e.WasLost {
		attrs = append(attrs, slog.Bool("was_lost", true))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.log.LogAttrs(ctx, level, "redlock "+e.Kind.String(), attrs...)
}
