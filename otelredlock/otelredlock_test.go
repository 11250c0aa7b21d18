package otelredlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/otelredlock"
)

// collect returns the metrics recorded so far, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, otelredlock.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func histCount(t *testing.T, a metricdata.Aggregation) (n uint64) {
	t.Helper()
	h, ok := a.(metricdata.Histogram[float64])
	require.True(t, ok, "%T", a)
	for _, p := range h.DataPoints {
		n += p.Count
	}
	return n
}

func sum(t *testing.T, a metricdata.Aggregation) (n int64) {
	t.Helper()
	s, ok := a.(metricdata.Sum[int64])
	require.True(t, ok, "%T", a)
	for _, p := range s.DataPoints {
		n += p.Value
	}
	return n
}

// TestMetricsAndSpans runs locks on real masters with the OTel adapter on
// in-memory providers and checks what they recorded.
func TestMetricsAndSpans(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	obs, err := otelredlock.New(&otelredlock.Options{MeterProvider: mp, TracerProvider: tp})
	require.NoError(t, err)
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond, Observer: obs})
	require.NoError(t, err)

	ctx, parent := tp.Tracer("test").Start(t.Context(), "job")
	m, err := mutex.New(c, "job", &mutex.Options{TTL: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	got := collect(t, reader)
	assert.Equal(t, int64(1), sum(t, got["redlock.locks.held"]), "one lock held")

	waited := make(chan error, 1)
	go func() {
		other, err := mutex.New(c, "job", &mutex.Options{TTL: 10 * time.Second})
		if err == nil {
			err = other.Lock(ctx)
		}
		if err == nil {
			err = other.Unlock(ctx)
		}
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond)
	// The waiter waits for this process's turn and makes no attempt while
	// m holds the lock; a TryLock does, and is refused.
	refused, err := mutex.New(c, "job", &mutex.Options{TTL: 10 * time.Second})
	require.NoError(t, err)
	require.ErrorIs(t, refused.TryLock(ctx), redlock.ErrNotObtained)
	require.NoError(t, m.Unlock(ctx))
	require.NoError(t, <-waited)

	// A lock lost to Close.
	lost, err := c.Acquire(ctx, "other", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	assert.False(t, lost.Held())
	parent.End()

	got = collect(t, reader)
	assert.GreaterOrEqual(t, histCount(t, got["redlock.acquire.duration"]), uint64(4), "three locks and the refused TryLock")
	assert.Equal(t, uint64(1), histCount(t, got["redlock.wait.duration"]))
	assert.Equal(t, int64(0), sum(t, got["redlock.locks.held"]), "released or lost")
	assert.Equal(t, int64(1), sum(t, got["redlock.locks.lost"]))
	assert.Positive(t, histCount(t, got["redlock.master.duration"]))
	assert.NotContains(t, got, "redlock.renewal.failures", "nothing recorded, nothing exported")
	assert.NotContains(t, got, "redlock.master.errors", "healthy masters; those not heard before a decision are no errors")
	for name, a := range got {
		if h, ok := a.(metricdata.Histogram[float64]); ok {
			for _, p := range h.DataPoints {
				_, hasKey := p.Attributes.Value("redlock.key")
				assert.False(t, hasKey, "%s: no key attribute unless asked", name)
			}
		}
	}
	acq := got["redlock.acquire.duration"].(metricdata.Histogram[float64])
	outcomes := map[string]uint64{}
	for _, p := range acq.DataPoints {
		v, _ := p.Attributes.Value("redlock.outcome")
		outcomes[v.AsString()] += p.Count
	}
	assert.Equal(t, uint64(3), outcomes["ok"])
	assert.Positive(t, outcomes["contended"], "the TryLock found it held")
	assert.Len(t, outcomes, 2, "%v", outcomes)

	var names []string
	var acquireSpan sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		names = append(names, s.Name())
		if s.Name() == "redlock acquire" && s.Status().Code == 0 && acquireSpan == nil {
			acquireSpan = s
		}
	}
	assert.Contains(t, names, "redlock acquire")
	assert.Contains(t, names, "redlock release")
	require.NotNil(t, acquireSpan)
	assert.Equal(t, parent.SpanContext().SpanID(), acquireSpan.Parent().SpanID(), "a child of the caller's span")
	attrs := map[string]string{}
	for _, kv := range acquireSpan.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	assert.Equal(t, "job", attrs["redlock.key"])
	assert.Equal(t, "3", attrs["redlock.masters"])
	assert.Positive(t, acquireSpan.EndTime().Sub(acquireSpan.StartTime()))
	var events []string
	for _, s := range spans.GetSpans().Snapshots() {
		if s.Name() == "job" {
			for _, e := range s.Events() {
				events = append(events, e.Name)
			}
		}
	}
	assert.Contains(t, events, "redlock.acquired")
	assert.Contains(t, events, "redlock.waited")
	assert.Contains(t, events, "redlock.released")
	assert.Contains(t, events, "redlock.lost", "the loss to Close, in the acquire's span")
}

// TestKeyAttribute: asked for, the key labels the metrics.
func TestKeyAttribute(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := otelredlock.New(&otelredlock.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), KeyAttribute: true})
	require.NoError(t, err)
	obs.ObserveRound(context.Background(), redlock.Round{Op: "acquire", Key: "job", Start: time.Now(), Elapsed: time.Millisecond})
	h := collect(t, reader)["redlock.acquire.duration"].(metricdata.Histogram[float64])
	require.Len(t, h.DataPoints, 1)
	v, ok := h.DataPoints[0].Attributes.Value("redlock.key")
	assert.True(t, ok)
	assert.Equal(t, "job", v.AsString())
}
