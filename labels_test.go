package redlock

import (
	"context"
	"runtime/pprof"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock/internal/harness"
)

// What a round does after its answers, on goroutines of its own (undos,
// repairs, drops of late agreements), runs under the pprof labels of the
// round's caller, whichever goroutine starts it: a master's sender, which
// sends a batch under its first call's labels, may. CPU profiles stay per
// request.
func TestRoundGoroutinesRunUnderTheCallersLabels(t *testing.T) {
	c := newFakeClient(t, fakes(1), nil)
	ctx := pprof.WithLabels(context.Background(), pprof.Labels("request", "mine"))
	r := &round{c: c, ctx: newCallContext(ctx, &c.callTimeouts)}
	r.running.Store(1)
	c.gate.enterHeld(1)

	release := make(chan struct{})
	started := make(chan struct{}, 2)
	wait := func() {
		started <- struct{}{}
		<-release
	}
	pprof.Do(context.Background(), pprof.Labels("request", "other"), func(context.Context) {
		r.background(func() { wait() })
		c.spawn(ctx, func() { wait() })
	})
	<-started
	<-started
	defer close(release)
	assert.Equal(t, []string{`# labels: {"request":"mine"}`}, harness.GoroutineLabels(t, "redlock.(*round).background.func1"))
	assert.Equal(t, []string{`# labels: {"request":"mine"}`}, harness.GoroutineLabels(t, "redlock.(*Client).spawn.func1"))
}
