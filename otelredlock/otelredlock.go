// Package otelredlock records what a redlock.Client does as OpenTelemetry
// metrics and traces: set the Observer that New returns as
// redlock.Options.Observer.
//
// Metrics (attributes in brackets; the lock's key only with
// Options.KeyAttribute, as keys are unbounded):
//
//	redlock.acquire.duration   histogram, s   time to decide an acquire round [redlock.outcome]
//	redlock.wait.duration      histogram, s   how long a blocking Lock waited [redlock.outcome]
//	redlock.wait.no_quorum     counter        blocking Locks that began to find no quorum
//	redlock.locks.held         up-down counter locks acquired and not yet released or lost
//	redlock.locks.lost         counter        locks lost before their release
//	redlock.renewal.failures   counter        failed auto-renewal rounds
//	redlock.master.duration    histogram, s   one master's answer [redlock.master, redlock.op, redlock.result]
//	redlock.master.errors      counter        masters that failed, timed out or are silent [redlock.master, redlock.op]
//
// redlock.outcome is redlock.Outcome of the error: "ok", "contended" (the
// lock is held elsewhere), "canceled" and "closed" are no failures;
// "no_quorum", "not_held", "expired" and "error" are. redlock.result is
// one master's part: "agreed", "refused", "pending" (not heard before the
// decision), "withdrawn" (redlock.ErrWithdrawn: not sent to a master that
// was behind) or "error".
//
// redlock.locks.held counts in one process what its Observer saw: for a
// moment after a release hands a key on to the process's next waiter it
// may count both holders (see redlock.Observer), so alert on it over time,
// not on one sample of 2 for a key.
//
// Each round is a span "redlock <op>" (child of the caller's span, with the
// round's own start and end), with the key, the outcome and the
// agreements as attributes. Its status is Error only for a failure. A
// renewal round ("redlock renew") starts a trace of its own, linked to
// the span the lock was acquired in: the work the lock guards. Lock
// events are span events on the caller's span when there is one, that of
// the acquire for renewals and a loss. A lost lock whose acquire's span
// has ended gets a span "redlock lost" of its own, linked to it.
//
// Use redlock.Observers to record with an slogobserver too.
package otelredlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-redlock/redlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/go-redlock/redlock/otelredlock"

// Options configure New. The zero value, and nil, select the defaults.
type Options struct {
	// MeterProvider and TracerProvider default to otel's global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// KeyAttribute adds the lock's key (redlock.key) to the metrics too.
	// Default: false, the key is on spans only.
	KeyAttribute bool
}

// Observer is a redlock.Observer. It is safe for concurrent use.
type Observer struct {
	tracer  trace.Tracer
	withKey bool

	acquire, wait, master              metric.Float64Histogram
	held                               metric.Int64UpDownCounter
	lost, renewFails, errors, noQuorum metric.Int64Counter
}

var _ redlock.Observer = (*Observer)(nil)

// New returns an Observer that records to the providers of opts. It fails
// only if an instrument cannot be created.
func New(opts *Options) (*Observer, error) {
	if opts == nil {
		opts = &Options{}
	}
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName), withKey: opts.KeyAttribute}
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return h
	}
	count := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	o.acquire = hist("redlock.acquire.duration", "Time to decide an acquire round.")
	o.wait = hist("redlock.wait.duration", "How long a blocking Lock waited for a held lock.")
	o.master = hist("redlock.master.duration", "Time one master took to answer a round.")
	o.lost = count("redlock.locks.lost", "Locks lost before their release.")
	o.renewFails = count("redlock.renewal.failures", "Failed auto-renewal rounds.")
	o.errors = count("redlock.master.errors", "Masters that failed, did not answer a round in time, or stopped answering.")
	o.noQuorum = count("redlock.wait.no_quorum", "Blocking Locks that began to find too few masters answering.")
	held, err := m.Int64UpDownCounter("redlock.locks.held", metric.WithDescription("Locks acquired and not yet released or lost."))
	o.held = held
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, fmt.Errorf("otelredlock: %w", err)
	}
	return o, nil
}

// keyAttrs returns the metric attributes for key: none unless asked.
func (o *Observer) keyAttrs(key string, more ...attribute.KeyValue) metric.MeasurementOption {
	if o.withKey {
		more = append(more, attribute.String("redlock.key", key))
	}
	return metric.WithAttributes(more...)
}

func outcome(err error) attribute.KeyValue {
	return attribute.String("redlock.outcome", redlock.Outcome(err))
}

// failed reports whether an outcome is a failure, as opposed to success,
// contention, or the caller's or the client's own end.
func failed(outcome string) bool {
	switch outcome {
	case "ok", "contended", "canceled", "closed":
		return false
	}
	return true
}

// result is master m's part in a round, for redlock.result.
func result(m redlock.MasterResult) string {
	switch {
	case m.Agreed:
		return "agreed"
	case isRefusal(m.Err):
		return "refused"
	case errors.Is(m.Err, redlock.ErrWithdrawn):
		return "withdrawn"
	case errors.Is(m.Err, redlock.ErrMasterSilent):
		return "error" // it stopped answering: rounds go on without it
	case errors.Is(m.Err, redlock.ErrNoReply), errors.Is(m.Err, context.Canceled), errors.Is(m.Err, context.DeadlineExceeded):
		return "pending" // not heard before the decision: no fault of the master's
	}
	return "error"
}

// ObserveRound records the round's span, its duration if it is an
// acquire, and each master's latency and errors.
func (o *Observer) ObserveRound(ctx context.Context, r redlock.Round) {
	end := r.Start.Add(r.Elapsed)
	agreed := 0
	op := attribute.String("redlock.op", r.Op)
	for _, m := range r.Masters {
		master := attribute.String("redlock.master", m.Master)
		res := result(m)
		switch res {
		case "agreed":
			agreed++
		case "error":
			o.errors.Add(ctx, 1, o.keyAttrs(r.Key, master, op))
		}
		if m.Latency > 0 {
			o.master.Record(ctx, m.Latency.Seconds(), o.keyAttrs(r.Key, master, op, attribute.String("redlock.result", res)))
		}
	}
	oc := outcome(r.Err)
	if r.Op == "acquire" {
		o.acquire.Record(ctx, r.Elapsed.Seconds(), o.keyAttrs(r.Key, oc))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(r.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(op, attribute.String("redlock.key", r.Key), oc,
			attribute.Int("redlock.masters", len(r.Masters)), attribute.Int("redlock.agreed", agreed))}
	if r.Op == "renew" {
		// The renewal outlives the acquire's span: a trace of its own,
		// linked to the work the lock guards.
		opts = append(opts, trace.WithNewRoot())
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	_, span := o.tracer.Start(ctx, "redlock "+r.Op, opts...)
	if r.Validity > 0 {
		span.SetAttributes(attribute.Int64("redlock.validity_ms", r.Validity.Milliseconds()))
	}
	if r.Token != 0 {
		span.SetAttributes(attribute.Int64("redlock.token", int64(r.Token))) // at most the largest int64
	}
	if failed(oc.Value.AsString()) {
		span.SetStatus(codes.Error, r.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// isRefusal reports whether a master answered no, as opposed to failing.
func isRefusal(err error) bool {
	return errors.Is(err, redlock.ErrHeldElsewhere) || errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrUpgrade)
}

// ObserveEvent counts the event and adds it to the caller's span.
func (o *Observer) ObserveEvent(ctx context.Context, e redlock.Event) {
	switch e.Kind {
	case redlock.EventAcquired:
		o.held.Add(ctx, 1, o.keyAttrs(e.Key))
	case redlock.EventReleased:
		if !e.WasLost {
			o.held.Add(ctx, -1, o.keyAttrs(e.Key))
		}
	case redlock.EventLost:
		o.held.Add(ctx, -1, o.keyAttrs(e.Key))
		o.lost.Add(ctx, 1, o.keyAttrs(e.Key))
	case redlock.EventRenewalFailed:
		o.renewFails.Add(ctx, 1, o.keyAttrs(e.Key))
	case redlock.EventWaited:
		o.wait.Record(ctx, e.Wait.Seconds(), o.keyAttrs(e.Key, outcome(e.Err)))
	case redlock.EventNoQuorum:
		o.noQuorum.Add(ctx, 1, o.keyAttrs(e.Key))
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		if sc := span.SpanContext(); e.Kind == redlock.EventLost && sc.IsValid() {
			o.lostSpan(ctx, sc, e)
		}
		return
	}
	attrs := []attribute.KeyValue{attribute.String("redlock.key", e.Key)}
	if e.Token != 0 {
		attrs = append(attrs, attribute.Int64("redlock.token", int64(e.Token))) // at most the largest int64
	}
	if e.Kind == redlock.EventWaited {
		attrs = append(attrs, attribute.Int64("redlock.wait_ms", e.Wait.Milliseconds()))
	}
	if e.Err != nil {
		attrs = append(attrs, attribute.String("redlock.error", e.Err.Error()))
	}
	span.AddEvent("redlock."+e.Kind.String(), trace.WithAttributes(attrs...), trace.WithTimestamp(time.Now()))
}

// lostSpan records the loss of a lock whose acquire's span sc has ended:
// a span of its own, linked to sc.
func (o *Observer) lostSpan(ctx context.Context, sc trace.SpanContext, e redlock.Event) {
	_, span := o.tracer.Start(ctx, "redlock lost", trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}),
		trace.WithAttributes(attribute.String("redlock.key", e.Key)))
	if e.Token != 0 {
		span.SetAttributes(attribute.Int64("redlock.token", int64(e.Token))) // at most the largest int64
	}
	if e.Err != nil {
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}
