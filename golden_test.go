package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Golden traces: every operation of the engine runs on in-process masters
// (goldenMaster) whose outcome per call is scripted, and the test records,
// per master, each script it ran with its KEYS, ARGV and reply (undos,
// drops, repairs and retries included), and, in one log, each operation's
// result, each Observer round and each event. testdata/golden holds the
// expected traces; every later commit must reproduce them exactly. A trace
// that must change is a change of behaviour: rewrite it with
//
//	go test -run TestGolden -update .
//
// in a commit of its own that says why.
//
// The traces must not depend on scheduling, so that they hold under -race
// on a busy machine:
//   - A round is decided either by its deadline, with every prompt answer
//     counted, or by its last prompt answer, every answer being needed to
//     decide it: a successful round's quorum is exactly the masters that
//     answer at once (Quorum n, or the others held), a failed one's
//     refusals are the only prompt answers. Any other master is held at a
//     gate until the operation returned: its answer comes after the
//     decision, as a late one.
//   - What follows a held answer (an undo, a drop, a repair, a retry) is
//     awaited before the next operation that could race with it on that
//     master (waitCalls), and Client.Close, which waits for every call in
//     the background, ends each scenario before the masters are read.
//   - What clocks or randomness decide is normalized: values come from a
//     counter (Options.NewValue), tokens from the fake's counters (the
//     clock's proposal is recorded as <usec>), a repair's TTL is <ttl>,
//     and rounds and events drop times, latencies and validity (kept as
//     validity>0).
//   - Errors are recorded as the exported sentinels they match (and, for a
//     *QuorumError, each master's), never as text.
//
// Bounds that remain: a prompt answer is counted within MasterTimeout
// (750ms to 2s; the fake answers in microseconds), a fencing acquire is decided
// within a quarter of its TTL (750ms for auto-renew's 3s), and the
// withdrawn scenario's decision comes within one MasterTimeout (1s).
// auto-renew relies on the Observer getting the renewal's own context,
// which Release cancels, as Observer's doc says ("the caller's context").
//
// The test uses only the exported API, the Observer and the masters, so
// that it survives a rewrite of the engine.

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden with the traces of TestGolden")

// goldenScenario is one golden trace.
type goldenScenario struct {
	name    string
	doc     string // what it covers, in the file's header
	masters int
	quorum  int           // 0: the default
	timeout time.Duration // MasterTimeout; 0: 2s
	piped   []int         // masters that pipeline (pipedMaster)
	run     func(g *goldenRun)
}

const goldenTTL = 30 * time.Second

func goldenScenarios() []goldenScenario {
	return []goldenScenario{
		{
			name: "acquire-all-agree", masters: 3, quorum: 3,
			doc: "Acquire where every master agrees, with equal fencing counters (no fence round), then Release.",
			run: func(g *goldenRun) {
				for _, m := range g.m {
					m.counter("job", 7)
				}
				l := g.acquire("Acquire", "job", "", goldenTTL)
				g.release(l)
			},
		},
		{
			name: "acquire-refuse-error-timeout", masters: 5, timeout: time.Second,
			doc: "Acquire on 5 masters: two agree, one refuses (held elsewhere), one replies an error, one answers only after the deadline. " +
				"The round fails at its deadline and is undone: at once where masters agreed, with a marker where the outcome is unknown, " +
				"and on the late master once it agrees.",
			run: func(g *goldenRun) {
				g.m[2].heldBy("job", "other", "n0", 5)
				g.m[3].next("acquire", goldenStep{outcome: replyError})
				late := g.hold(4, "acquire", runScript)
				g.acquire("Acquire", "job", "", goldenTTL)
				late()
			},
		},
		{
			name: "acquire-refused-late-undo", masters: 3,
			doc: "Acquire refused by a quorum (held elsewhere); the third master agrees after the decision and is undone in the background.",
			run: func(g *goldenRun) {
				g.m[1].heldBy("job", "other", "n0", 5)
				g.m[2].heldBy("job", "other", "n0", 5)
				late := g.hold(0, "acquire", runScript)
				g.acquire("Acquire", "job", "", goldenTTL)
				late()
			},
		},
		{
			name: "late-agreement-after-release", masters: 3,
			doc: "late1: master 2's acquire times out after the decision (outcome unknown) and its release, held too, found nothing: " +
				"the late agreement is dropped there, with a marker. late2: master 2 applied the acquire at once but replied after the " +
				"release, which deleted it: nothing to drop.",
			run: func(g *goldenRun) {
				acq := g.hold(2, "acquire", netTimeout)
				rel := g.hold(2, "release", runScript)
				l := g.acquire("Acquire", "late1", "", goldenTTL)
				g.release(l)
				rel()
				acq()
				g.m[2].waitCalls(g.t, 3) // the drop

				reply := g.holdReply(2, "acquire")
				rel = g.hold(2, "release", runScript)
				l = g.acquire("Acquire", "late2", "", goldenTTL)
				g.entered(reply) // it ran before its release
				g.release(l)
				rel()
				reply.release()
			},
		},
		{
			name: "reentry-partial-release", masters: 3, quorum: 3,
			doc: "AcquireAs, Reenter, a partial Release, the last Release, then Release and Reenter of the released Lock (nothing sent).",
			run: func(g *goldenRun) {
				l := g.acquire("AcquireAs", "re", "alice", goldenTTL)
				g.lockOp("Reenter", l, func() error { return l.Reenter(g.ctx) })
				g.release(l)
				g.release(l)
				g.release(l)
				g.lockOp("Reenter", l, func() error { return l.Reenter(g.ctx) })
			},
		},
		{
			name: "fence-raise", masters: 3, quorum: 3,
			doc: "Acquire where the masters' fencing counters differ (10, 20, 5): a fence round raises them to the token; " +
				"after the release they agree, and the next Acquire needs no fence round.",
			run: func(g *goldenRun) {
				for i, n := range []int64{10, 20, 5} {
					g.m[i].counter("fenced", n)
				}
				l := g.acquire("Acquire", "fenced", "", goldenTTL)
				g.release(l)
				l = g.acquire("Acquire", "fenced", "", goldenTTL)
				g.release(l)
			},
		},
		{
			name: "extend-repair-release", masters: 3,
			doc: "Master 2 restarts empty while the lock is held: Extend succeeds on the others, master 2 refuses after the decision " +
				"and is repaired; the last Release then leaves markers (ARGV[7] 2).",
			run: func(g *goldenRun) {
				late := g.hold(2, "acquire", runScript)
				l := g.acquire("Acquire", "job", "", goldenTTL)
				late()
				g.m[2].restart()
				late = g.hold(2, "extend", runScript)
				g.lockOp("Extend 40s", l, func() error { return l.Extend(g.ctx, 40*time.Second) })
				late()
				g.m[2].waitCalls(g.t, 4) // the repair
				late = g.hold(2, "release", runScript)
				g.release(l)
				late()
			},
		},
		{
			name: "auto-renew", masters: 3, quorum: 3, timeout: 750 * time.Millisecond,
			doc: "AutoRenew with a 3s TTL: exactly one renewal (EventRenewed), then Release, which stops the renewal.",
			run: func(g *goldenRun) {
				l := g.acquire("Acquire", "renewed", "", 3*time.Second)
				renewed := make(chan context.Context, 1)
				proceed := make(chan struct{})
				var once sync.Once
				unblock := func() { once.Do(func() { close(proceed) }) }
				g.unblock(unblock)
				g.mu.Lock()
				g.onRenewed = func(ctx context.Context) {
					select {
					case renewed <- ctx:
						<-proceed
					default: // a second renewal: the trace shows it
					}
				}
				g.mu.Unlock()
				l.AutoRenew()
				g.logf("op AutoRenew")
				// The renewal comes about a third of the TTL after the
				// acquire. Its goroutine waits in the Observer until
				// Release has cancelled its context (the one the
				// Observer got), so that no second renewal can start.
				var renewCtx context.Context
				select {
				case renewCtx = <-renewed:
				case <-time.After(10 * time.Second):
					g.t.Fatal("no renewal within 10s")
				}
				errc := make(chan error, 1)
				go func() { errc <- l.Release(g.ctx) }()
				select {
				case <-renewCtx.Done():
				case <-time.After(5 * time.Second):
					g.t.Fatal("Release did not stop the renewal within 5s")
				}
				unblock()
				g.result("Release", l, <-errc)
			},
		},
		{
			name: "release-timeout-retry", masters: 3,
			doc: "Release where master 2 times out after the decision: the release is retried there in the background (EVAL).",
			run: func(g *goldenRun) {
				late := g.hold(2, "acquire", runScript)
				l := g.acquire("Acquire", "job", "", goldenTTL)
				late()
				late = g.hold(2, "release", netTimeout)
				g.release(l)
				late()
				// Close sends the retry at once, and waits for it.
			},
		},
		{
			name: "read-write", masters: 3,
			doc: "Read-write lock: AcquireWrite, AcquireRead of another owner refused, AcquireRead of the writer (a downgrade), " +
				"release of the write lock, AcquireWrite of the reader refused as an upgrade, release of the read lock. " +
				"Master 2 answers each after its decision.",
			run: func(g *goldenRun) {
				late := g.hold(2, "acquire", runScript)
				w := g.acquire("AcquireWrite", "rw", "alice", goldenTTL)
				late()
				late = g.hold(2, "read_acquire", runScript)
				g.acquire("AcquireRead", "rw", "bob", goldenTTL)
				late()
				late = g.hold(2, "read_acquire", runScript)
				r := g.acquire("AcquireRead", "rw", "alice", goldenTTL)
				late()
				late = g.hold(2, "release", runScript)
				g.release(w)
				late()
				late = g.hold(2, "acquire", runScript)
				g.acquire("AcquireWrite", "rw", "alice", goldenTTL)
				late()
				late = g.hold(2, "read_release", runScript)
				g.release(r)
				late()
			},
		},
		{
			name: "withdrawn", masters: 3, timeout: time.Second, piped: []int{0},
			doc: "Master 0 pipelines and is behind (busy with a call for longer than MasterTimeout): the next acquire's call, " +
				"queued behind it, is withdrawn at the decision and never sent; that lock's release skips master 0.",
			run: func(g *goldenRun) {
				busy := g.m[0].hold("acquire", runScript)
				g.gates = append(g.gates, busy)
				a := g.acquire("Acquire", "busy", "", goldenTTL)
				g.entered(busy)
				// The call is withdrawn where, at the decision, master 0 has
				// been busy for twice the decision's time and MasterTimeout/20.
				// Busy for this sleep plus that time, it is for any decision
				// within one MasterTimeout, which prompt answers meet.
				time.Sleep(g.timeout)
				b := g.acquire("Acquire", "job", "", goldenTTL)
				g.release(b)
				busy.release()
				g.m[0].waitCalls(g.t, 1)
				late := g.hold(2, "release", runScript)
				g.release(a)
				late()
			},
		},
		{
			name: "extend-refused-lost", masters: 3,
			doc: "Masters 0 and 1 restart empty: Extend is refused by a quorum and the lock is lost (EventLost); " +
				"the last Release then fails (ErrNotHeld, WasLost) but still deletes it on master 2.",
			run: func(g *goldenRun) {
				late := g.hold(2, "acquire", runScript)
				l := g.acquire("Acquire", "lost", "", goldenTTL)
				late()
				g.m[0].restart()
				g.m[1].restart()
				late = g.hold(2, "extend", runScript)
				g.lockOp("Extend 30s", l, func() error { return l.Extend(g.ctx, goldenTTL) })
				late()
				late = g.hold(2, "release", runScript)
				g.release(l)
				late()
			},
		},
		{
			name: "resume", masters: 3,
			doc: "alice holds the lock on masters 0 and 1 with tokens 5 and 7, bob on master 2. carol's Resume is refused. " +
				"alice's takes it over under a new nonce (master 2 refuses, late), raises master 0's token to 7 (fence), " +
				"reads the TTLs left, and its Release frees it.",
			run: func(g *goldenRun) {
				g.m[0].heldBy("job", "alice", "n0", 5)
				g.m[1].heldBy("job", "alice", "n0", 7)
				g.m[2].heldBy("job", "bob", "n1", 9)
				late := g.hold(2, "resume", runScript)
				_, err := g.c.Resume(g.ctx, "job", "carol", goldenTTL)
				g.result(`Resume "job" as carol`, nil, err)
				late()
				lates := []func(){g.hold(2, "resume", runScript), g.hold(2, "fence", runScript), g.hold(2, "remaining", runScript)}
				l, err := g.c.Resume(g.ctx, "job", "alice", goldenTTL)
				g.result(`Resume "job" as alice`, l, err)
				for _, late := range lates {
					late()
				}
				late = g.hold(2, "release", runScript)
				g.release(l)
				late()
			},
		},
	}
}

func TestGolden(t *testing.T) {
	scenarios := goldenScenarios()
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.txt"))
	require.NoError(t, err)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		if !slices.ContainsFunc(scenarios, func(s goldenScenario) bool { return s.name == name }) {
			t.Errorf("%s: no scenario of that name (remove the file)", f)
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			got := sc.trace(t)
			path := filepath.Join("testdata", "golden", sc.name+".txt")
			if *updateGolden {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden trace: create it with go test -run TestGolden -update .")
			if got != string(want) {
				t.Errorf("the trace differs from %s (- want, + got):\n%s\n"+
					"A trace that must change is a change of behaviour: rewrite it with "+
					"go test -run TestGolden -update . in a commit of its own that says why.",
					path, lineDiff(string(want), got))
			}
		})
	}
}

// goldenRun is one scenario under way, and its Client's Observer.
type goldenRun struct {
	t       *testing.T
	ctx     context.Context
	c       *Client
	timeout time.Duration // MasterTimeout
	m       []*goldenMaster
	gates   []*goldenGate // every gate: opened at the end at the latest
	values  atomic.Int64

	mu        sync.Mutex
	log       []string
	onRenewed func(ctx context.Context) // called after EventRenewed is logged
	unblocks  []func()                  // run before the Client is closed
}

func (sc goldenScenario) trace(t *testing.T) string {
	g := &goldenRun{t: t, ctx: context.Background()}
	masters := make([]redis.Scripter, sc.masters)
	for i := range masters {
		m := newGoldenMaster(i)
		g.m = append(g.m, m)
		masters[i] = m
		if slices.Contains(sc.piped, i) {
			masters[i] = &pipedMaster{m}
		}
	}
	timeout := sc.timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	c, err := New(masters, &Options{
		Quorum:        sc.quorum,
		MasterTimeout: timeout,
		Observer:      g,
		NewValue:      func() (string, error) { return fmt.Sprintf("v%d", g.values.Add(1)), nil },
	})
	require.NoError(t, err)
	g.c, g.timeout = c, timeout
	t.Cleanup(func() { // after a failure: nothing may stay blocked
		g.openAll()
		_ = c.Close()
	})

	sc.run(g)
	for _, gate := range g.gates {
		select {
		case <-gate.open:
		default:
			t.Fatalf("gate %s was never opened", gate.name)
		}
	}
	g.logf("op Close: %s", errorClass(c.Close()))

	var b strings.Builder
	fmt.Fprintf(&b, "# golden trace %q (see golden_test.go)\n", sc.name)
	for _, line := range wrapWords(sc.doc, 76) {
		fmt.Fprintf(&b, "# %s\n", line)
	}
	fmt.Fprintf(&b, "masters=%d quorum=%d masterTimeout=%v pipelined=%v\n", sc.masters, c.Quorum(), timeout, sc.piped)
	b.WriteString("\nlog:\n")
	g.mu.Lock()
	for _, line := range g.log {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	g.mu.Unlock()
	for i, m := range g.m {
		fmt.Fprintf(&b, "\nmaster %d:\n", i)
		for _, line := range m.calls() {
			fmt.Fprintf(&b, "  %s\n", line)
		}
		for _, line := range m.state() {
			fmt.Fprintf(&b, "  left: %s\n", line)
		}
	}
	return b.String()
}

// openAll opens every gate and unblocks the Observer.
func (g *goldenRun) openAll() {
	for _, gate := range g.gates {
		gate.release()
	}
	g.mu.Lock()
	unblocks := g.unblocks
	g.mu.Unlock()
	for _, f := range unblocks {
		f()
	}
}

func (g *goldenRun) unblock(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unblocks = append(g.unblocks, f)
}

// hold holds master i's next call of script until the operation under
// way has returned: call the function returned then. It opens the gate,
// and waits until the master ran the call.
func (g *goldenRun) hold(i int, script string, outcome goldenOutcome) func() {
	m := g.m[i]
	gate := m.hold(script, outcome)
	g.gates = append(g.gates, gate)
	return func() {
		n := len(m.calls()) + 1
		gate.release()
		m.waitCalls(g.t, n)
	}
}

// holdReply holds the reply to master i's next call of script, which
// runs at once, until its gate is opened.
func (g *goldenRun) holdReply(i int, script string) *goldenGate {
	gate := newGate(fmt.Sprintf("m%d %s reply", i, script))
	g.m[i].next(script, goldenStep{gate: gate, runFirst: true})
	g.gates = append(g.gates, gate)
	return gate
}

// entered waits until a call waits at gate, for at most 5s: a call that
// is not held may reach its master after its operation returned.
func (g *goldenRun) entered(gate *goldenGate) {
	g.t.Helper()
	select {
	case <-gate.entered:
	case <-time.After(5 * time.Second):
		g.t.Fatalf("no call at gate %s within 5s", gate.name)
	}
}

func (g *goldenRun) logf(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = append(g.log, fmt.Sprintf(format, args...))
}

// acquire runs an Acquire method (kind) and logs its result.
func (g *goldenRun) acquire(kind, key, owner string, ttl time.Duration) *Lock {
	var l *Lock
	var err error
	switch kind {
	case "Acquire":
		l, err = g.c.Acquire(g.ctx, key, ttl)
	case "AcquireAs":
		l, err = g.c.AcquireAs(g.ctx, key, owner, ttl)
	case "AcquireRead":
		l, err = g.c.AcquireRead(g.ctx, key, owner, ttl)
	case "AcquireWrite":
		l, err = g.c.AcquireWrite(g.ctx, key, owner, ttl)
	default:
		g.t.Fatalf("no acquire %s", kind)
	}
	desc := fmt.Sprintf("%s %q", kind, key)
	if owner != "" {
		desc += " owner=" + owner
	}
	g.result(fmt.Sprintf("%s ttl=%v", desc, ttl), l, err)
	return l
}

func (g *goldenRun) release(l *Lock) {
	g.lockOp("Release", l, func() error { return l.Release(g.ctx) })
}

func (g *goldenRun) lockOp(desc string, l *Lock, f func() error) {
	g.result(desc, l, f())
}

// result logs an operation's outcome, and the state of its Lock.
func (g *goldenRun) result(desc string, l *Lock, err error) {
	line := fmt.Sprintf("op %s: %s%s", desc, errorClass(err), quorumDetail(err))
	if l != nil {
		line += fmt.Sprintf(" => lock %q token=%d holds=%d err=%s", l.Key(), l.Token(), l.Holds(), errorClass(l.Err()))
	}
	g.logf("%s", line)
}

func (g *goldenRun) ObserveRound(_ context.Context, r Round) {
	g.logf("round %s %q: %s validity>0=%t token=%d err=%s",
		r.Op, r.Key, masterClasses(r.Masters), r.Validity > 0, r.Token, errorClass(r.Err))
}

func (g *goldenRun) ObserveEvent(ctx context.Context, e Event) {
	g.logf("event %s %q read=%t token=%d wasLost=%t err=%s", e.Kind, e.Key, e.Read, e.Token, e.WasLost, errorClass(e.Err))
	g.mu.Lock()
	hook := g.onRenewed
	g.mu.Unlock()
	if e.Kind == EventRenewed && hook != nil {
		hook(ctx)
	}
}

// goldenClasses are the errors a trace names, in the order it names them.
var goldenClasses = []struct {
	name string
	err  error
}{
	{"ErrNotObtained", ErrNotObtained},
	{"ErrNotHeld", ErrNotHeld},
	{"ErrHeldElsewhere", ErrHeldElsewhere},
	{"ErrUpgrade", ErrUpgrade},
	{"ErrNoReply", ErrNoReply},
	{"ErrMasterTimeout", ErrMasterTimeout},
	{"ErrReleased", ErrReleased},
	{"ErrClosed", ErrClosed},
	{"ErrInvalidArgument", ErrInvalidArgument},
	{"ErrSameServer", ErrSameServer},
	{"ErrReplica", ErrReplica},
	{"Canceled", context.Canceled},
	{"DeadlineExceeded", context.DeadlineExceeded},
	{"fakeErrorReply", errFakeReply},
	{"fakeTimeout", errFakeTimeout},
}

// errorClass names the sentinels err matches, joined by '+': "nil" for
// none, "other(type)" where it matches none of them.
func errorClass(err error) string {
	if err == nil {
		return "nil"
	}
	var names []string
	for _, c := range goldenClasses {
		if errors.Is(err, c.err) {
			names = append(names, c.name)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("other(%T)", err)
	}
	return strings.Join(names, "+")
}

// quorumDetail describes the *QuorumError in err, if any.
func quorumDetail(err error) string {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return ""
	}
	return fmt.Sprintf(" quorum{op=%s key=%q agreed=%d/%d expired=%t %s}",
		qe.Op, qe.Key, qe.Agreed, qe.Quorum, qe.Expired, masterClasses(qe.Masters))
}

func masterClasses(ms []MasterResult) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		class := "agreed"
		if !m.Agreed {
			class = errorClass(m.Err)
		}
		out[i] = fmt.Sprintf("%s=%s", m.Master, class)
	}
	return strings.Join(out, " ")
}

// wrapWords splits s into lines of at most width bytes, at spaces.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// lineDiff returns the lines of want and got, marked "- " where only want
// has them and "+ " where only got does (a longest common subsequence).
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString("  " + a[i] + "\n")
			i++
			j++
		case j == len(b) || i < len(a) && lcs[i+1][j] >= lcs[i][j+1]:
			out.WriteString("- " + a[i] + "\n")
			i++
		default:
			out.WriteString("+ " + b[j] + "\n")
			j++
		}
	}
	return out.String()
}
