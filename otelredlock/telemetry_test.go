package otelredlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/otelredlock"
	"github.com/go-redlock/redlock/slogobserver"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records written so far.
func (b *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

// telemetry is an OTel and an slog observer together, on in-memory
// providers and a buffer logging at Debug.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	log    *syncBuffer
	obs    redlock.Observer
}

func newTelemetry(t *testing.T) *telemetry {
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter(), log: &syncBuffer{}}
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tm.spans))
	otelObs, err := otelredlock.New(&otelredlock.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader)), TracerProvider: tm.tp})
	require.NoError(t, err)
	slogObs := slogobserver.New(slog.New(slog.NewJSONHandler(tm.log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	tm.obs = redlock.Observers(otelObs, slogObs)
	return tm
}

// outcomes counts a histogram's data points by redlock.outcome.
func outcomes(t *testing.T, a metricdata.Aggregation) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	if a == nil {
		return out
	}
	h, ok := a.(metricdata.Histogram[float64])
	require.True(t, ok, "%T", a)
	for _, p := range h.DataPoints {
		v, _ := p.Attributes.Value("redlock.outcome")
		out[v.AsString()] += p.Count
	}
	return out
}

// warnings returns the log records at Warn or above.
func (tm *telemetry) warnings(t *testing.T) []map[string]any {
	var out []map[string]any
	for _, r := range tm.log.records(t) {
		if r["level"] == "WARN" || r["level"] == "ERROR" {
			out = append(out, r)
		}
	}
	return out
}

// TestContendedHealthyServiceShowsNoFailure: processes (Clients) that
// take turns on one key over five healthy masters record contention,
// never a failure: no failed outcome, no master error, no error span,
// no warning.
func TestContendedHealthyServiceShowsNoFailure(t *testing.T) {
	const processes, goroutines, rounds = 3, 2, 4
	cluster := harness.NewProcessCluster(t, 5, harness.ProcessOptions{})
	tm := newTelemetry(t)
	clients := make([]*redlock.Client, processes)
	for i := range clients {
		masters := make([]*redis.Client, 5)
		for j, addr := range cluster.Addrs() {
			masters[j] = redis.NewClient(harness.MasterOptions(addr))
			t.Cleanup(func() { _ = masters[j].Close() })
		}
		c, err := redlock.New(masters, &redlock.Options{MasterTimeout: 500 * time.Millisecond, Observer: tm.obs})
		require.NoError(t, err)
		clients[i] = c
	}
	ctx := t.Context()
	opts := &mutex.Options{TTL: 10 * time.Second}
	first, err := mutex.New(clients[0], "job", opts)
	require.NoError(t, err)
	require.NoError(t, first.Lock(ctx))

	var wg sync.WaitGroup
	errs := make(chan error, processes*goroutines)
	for _, c := range clients {
		for range goroutines {
			wg.Go(func() {
				m, err := mutex.New(c, "job", opts)
				for i := 0; err == nil && i < rounds; i++ {
					if err = m.Lock(ctx); err == nil {
						time.Sleep(5 * time.Millisecond) // the critical section
						err = m.Unlock(ctx)
					}
				}
				errs <- err
			})
		}
	}
	// The other processes find the lock held before it is released.
	require.Eventually(t, func() bool {
		a, ok := collect(t, tm.reader)["redlock.acquire.duration"]
		return ok && histCount(t, a) >= processes // the first lock, then one attempt per other process
	}, 10*time.Second, 10*time.Millisecond, "the other processes' first attempts are refused")
	require.NoError(t, first.Unlock(ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, c := range clients {
		require.NoError(t, c.Close())
	}

	got := collect(t, tm.reader)
	acq := outcomes(t, got["redlock.acquire.duration"])
	assert.Equal(t, uint64(1+processes*goroutines*rounds), acq["ok"], "%v", acq)
	assert.Positive(t, acq["contended"])
	assert.Len(t, acq, 2, "only ok and contended: %v", acq)
	wait := outcomes(t, got["redlock.wait.duration"])
	assert.Equal(t, []string{"ok"}, keys(wait), "every wait ended with the lock")
	assert.NotContains(t, got, "redlock.master.errors")
	assert.NotContains(t, got, "redlock.locks.lost")
	assert.NotContains(t, got, "redlock.wait.no_quorum")
	refusedSpans := 0
	for _, s := range tm.spans.GetSpans().Snapshots() {
		assert.NotEqual(t, codes.Error, s.Status().Code, "%s: %s", s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			if kv.Key == "redlock.outcome" && kv.Value.AsString() == "contended" {
				refusedSpans++
			}
		}
	}
	assert.Positive(t, refusedSpans, "contended rounds have spans, without an error status")
	assert.Empty(t, tm.warnings(t), "a healthy service warns of nothing")
}

func keys(m map[string]uint64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLostLockInTheWorksTrace: a lock lost while renewed shows in the
// trace of the work it guarded. The renewal round that found it lost is
// linked to the span the lock was acquired in, and so is a span of the
// loss, as that span has ended. One loss is one warning.
func TestLostLockInTheWorksTrace(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	tm := newTelemetry(t)
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 100 * time.Millisecond, Observer: tm.obs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	ctx, work := tm.tp.Tracer("test").Start(t.Context(), "work")
	l, err := c.Acquire(ctx, "job", 1500*time.Millisecond) // renewed about every 500ms
	require.NoError(t, err)
	l.AutoRenew()
	work.End()
	for i := range cluster.Masters { // the lock is gone: the next renewal finds it lost
		require.NoError(t, cluster.Admin(i).Del(t.Context(), "{job}").Err())
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not lost")
	}
	require.ErrorIs(t, l.Err(), redlock.ErrNotHeld)
	require.Eventually(t, func() bool { return len(tm.warnings(t)) > 0 }, 5*time.Second, time.Millisecond, "the loss is logged")
	_ = l.Release(context.Background()) // after the loss: no second warning
	require.NoError(t, c.Close())

	warnings := tm.warnings(t)
	require.Len(t, warnings, 1, "one loss, one warning: %v", warnings)
	assert.Equal(t, "redlock lost", warnings[0]["msg"])

	var renew, lost sdktrace.ReadOnlySpan
	for _, s := range tm.spans.GetSpans().Snapshots() {
		switch {
		case s.Name() == "redlock renew" && s.Status().Code == codes.Error:
			renew = s
		case s.Name() == "redlock lost":
			lost = s
		}
	}
	for name, s := range map[string]sdktrace.ReadOnlySpan{"redlock renew": renew, "redlock lost": lost} {
		require.NotNil(t, s, "a span %q", name)
		require.Len(t, s.Links(), 1, name)
		assert.Equal(t, work.SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID(), "%s: linked to the work's span", name)
		assert.Equal(t, work.SpanContext().TraceID(), s.Links()[0].SpanContext.TraceID(), name)
		assert.Equal(t, codes.Error, s.Status().Code, name)
	}
	assert.False(t, renew.Parent().IsValid(), "a renewal starts a trace of its own")
}

// TestMastersDownWarnOncePerEpisode: a blocking Lock that finds too few
// masters answering, attempt after attempt, warns once.
func TestMastersDownWarnOncePerEpisode(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	tm := newTelemetry(t)
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 50 * time.Millisecond, Observer: tm.obs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for i := range 2 {
		require.NoError(t, cluster.Masters[i].Kill(t.Context()))
	}
	m, err := mutex.New(c, "job", &mutex.Options{TTL: time.Second, MaxRetryDelay: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = m.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var outcomes []any
	for _, r := range tm.log.records(t) {
		if r["msg"] == "redlock round" && r["op"] == "acquire" {
			outcomes = append(outcomes, r["outcome"])
		}
	}
	attempts := len(outcomes)
	if attempts > 0 && outcomes[attempts-1] == "canceled" {
		outcomes = outcomes[:attempts-1] // the deadline cut the last one short
	}
	for _, o := range outcomes {
		assert.Equal(t, "no_quorum", o)
	}
	require.Greater(t, attempts, 2, "attempts within a second: the round takes MasterTimeout (50ms), the retry 20ms at most")
	warnings := tm.warnings(t)
	require.Len(t, warnings, 1, "%d attempts, one warning: %v", attempts, warnings)
	assert.Equal(t, "redlock no_quorum", warnings[0]["msg"])
	assert.Contains(t, warnings[0]["error"], cluster.Addrs()[0], "the error names the masters")
	assert.Equal(t, int64(1), sum(t, collect(t, tm.reader)["redlock.wait.no_quorum"]))
}

// TestSilentMasterIsAMasterError: a master that stopped answering
// (redlock.ErrMasterSilent) is a master error each round, as a timeout
// is. Rounds decide without it and succeed: its errors are then the only
// sign that it is down. One not heard before the decision, or withdrawn,
// is none.
func TestSilentMasterIsAMasterError(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := otelredlock.New(&otelredlock.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	for range 3 {
		obs.ObserveRound(t.Context(), redlock.Round{Op: "acquire", Key: "k", Start: time.Now(), Masters: []redlock.MasterResult{
			{Master: "a:1", Agreed: true, Latency: time.Millisecond},
			{Master: "b:1", Agreed: true, Latency: time.Millisecond},
			{Master: "c:1", Err: redlock.ErrMasterSilent},
			{Master: "d:1", Err: redlock.ErrNoReply},
			{Master: "e:1", Err: redlock.ErrWithdrawn},
		}})
	}
	errs, ok := collect(t, reader)["redlock.master.errors"].(metricdata.Sum[int64])
	require.True(t, ok, "no master errors recorded")
	byMaster := map[string]int64{}
	for _, p := range errs.DataPoints {
		v, _ := p.Attributes.Value("redlock.master")
		byMaster[v.AsString()] += p.Value
	}
	assert.Equal(t, map[string]int64{"c:1": 3}, byMaster)
}
