package slogobserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
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
	assert.Equal(t, "ok", round["outcome"])
	masters, ok := round["masters"].(map[string]any)
	require.True(t, ok, "%v", round["masters"])
	require.Len(t, masters, 3, "a group per master")
	for i, addr := range cluster.Addrs() {
		m, ok := masters[strconv.Itoa(i)].(map[string]any)
		require.True(t, ok, "master %d by position: %v", i, masters)
		assert.Equal(t, addr, m["master"], "the address is a value")
	}
	for _, r := range records { // no key names a master
		var walk func(map[string]any)
		walk = func(m map[string]any) {
			for k, v := range m {
				assert.NotContains(t, k, "127.0.0.1", "key %q", k)
				if sub, ok := v.(map[string]any); ok {
					walk(sub)
				}
			}
		}
		walk(r)
	}
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

	// A loss warns once: not again at the release, nor at the failed
	// renewals before it, which are retried.
	buf.Reset()
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventRenewalFailed, Key: "job", Err: redlock.ErrNoQuorum})
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventReleased, Key: "job", WasLost: true, Err: redlock.ErrNotHeld})
	assert.Empty(t, buf.String())
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventReleased, Key: "job", Err: redlock.ErrNoQuorum})
	assert.Contains(t, buf.String(), `"level":"WARN","msg":"redlock released"`, "a release that failed")
	buf.Reset()
	quiet.ObserveEvent(ctx, redlock.Event{Kind: redlock.EventNoQuorum, Key: "job", Err: redlock.ErrNotObtained})
	assert.Contains(t, buf.String(), `"level":"WARN","msg":"redlock no_quorum"`)
}
