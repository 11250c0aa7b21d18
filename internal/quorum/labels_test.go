package quorum

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock/internal/harness"
)

// What a round does after its answers, on goroutines of its own (undos,
// repairs, drops of late agreements), runs under the pprof labels of the
// round's caller, whichever goroutine starts it: a master's sender, which
// sends a batch under its first call's labels, may. CPU profiles stay per
// request.
func TestRoundGoroutinesRunUnderTheCallersLabels(t *testing.T) {
	w := newWork()
	e := New(Config{Quorum: 1, MasterTimeout: time.Second, Work: w}, nil)
	defer e.Stop()
	ctx := pprof.WithLabels(context.Background(), pprof.Labels("request", "mine"))
	r := &round{e: e, ctx: newCallContext(ctx, &e.calls)}
	r.running.Store(1)
	w.EnterHeld(1)

	release := make(chan struct{})
	started := make(chan struct{}, 2)
	wait := func() {
		started <- struct{}{}
		<-release
	}
	pprof.Do(context.Background(), pprof.Labels("request", "other"), func(context.Context) {
		r.background(func() { wait() })
		e.Spawn(ctx, func() { wait() })
	})
	<-started
	<-started
	defer close(release)
	assert.Equal(t, []string{`# labels: {"request":"mine"}`}, harness.GoroutineLabels(t, "quorum.(*round).background.func1"))
	assert.Equal(t, []string{`# labels: {"request":"mine"}`}, harness.GoroutineLabels(t, "quorum.(*Engine).Spawn.func1"))
}

// work is a Work that counts, and is never closed.
type work struct {
	sync.WaitGroup
	abandon context.Context
}

func newWork() *work { return &work{abandon: context.Background()} }

func (w *work) Enter(n int) bool           { w.Add(n); return true }
func (w *work) EnterHeld(n int)            { w.Add(n) }
func (w *work) Leave(n int)                { w.Add(-n) }
func (w *work) Shutdown() <-chan struct{}  { return nil }
func (w *work) Abandoned() context.Context { return w.abandon }
