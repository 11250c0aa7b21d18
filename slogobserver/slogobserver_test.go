package slogobserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
	"github.com/go-redlock/redlock/slogobserver"
)

func TestLogsRoundsAndEvents(t *testing.T) {
	cluster := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := redlock.New(cluster.Clients(), &redlock.Options{MasterTimeout: 500 * time.Millisecond, Observer: slogobserver.New(log)})
	require.NoError(t, err)
	ctx := t.Context()

	m, err := mutex.New(c, "job", &mutex.Options{TTL: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	token := m.Current().Token()
	waited := make(chan error, 1)
	go func() {
		other, err := mutex.New(c, "job", &mutex.Options{TTL: 10 * time.Second})
		if err == nil {
			err = other.Lock(ctx)
		}
		if err == nil {
			err = other.Unlock(context.Background())
		}
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, m.Unlock(ctx))
	require.NoError(t, <-waited)
	require.NoError(t, c.Close())

	var records []map[string]any
	for line := range strings.Lines(buf.String()) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		records = append(records, r)
	}
	find := func(msg string) map[string]any {
		for _, r := range records {
			if r["msg"] == msg {
				return r
			}
		}
		t.Fatalf("no record %q in\n%s", msg, buf.String())
		return nil
	}
	round := find("redlock round")
	assert.Equal(t, "DEBUG", round["level"])
	assert.Equal(t, "acquire", round["op"])
	assert.Equal(t, "job", round["key"])
	assert.Len(t, round["masters"], 3, "a group per master")
	acquired := find("redlock acquired")
	assert.Equal(t, float64(token), acquired["token"])
	assert.Contains(t, acquired, "until")
	waitRec := find("redlock waited")
	assert.Positive(t, waitRec["wait"], "nanoseconds waited")
	assert.NotContains(t, waitRec, "error")
	find("redlock released")

	// At Warn, routine events cost nothing and log nothing.
	buf.Reset()
	quiet := slogobserver.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	quiet.ObserveRound(ctx, redlock.Round{Op: "acquire"})
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventAcquired})
	assert.Empty(t, buf.String())
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventLost, Key: "job", Err: redlock.ErrNotHeld})
	assert.Contains(t, buf.String(), `"level":"WARN","msg":"redlock lost","event":"lost","key":"job","error":"redlock: lock not held"`)
}
