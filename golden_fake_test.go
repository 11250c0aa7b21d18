package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// goldenMaster is the in-process master of the golden traces: it models
// scripts.lua closely enough for every path the engine takes (holders,
// nonces, holds, fencing counters, undo markers, readers), without TTLs,
// and records every script it runs. Each call's outcome can be scripted
// (see goldenStep); unscripted calls run the script at once. Tokens are
// counter+1: the clock proposal of a new acquire is ignored, so that
// tokens are deterministic. Safe for concurrent use.
type goldenMaster struct {
	idx int

	mu      sync.Mutex
	locks   map[string]*goldenHolder     // main key -> holder
	free    map[string]int64             // main key -> counter of a free lock ("f:n")
	gone    map[string]bool              // "K:gone:nonce" markers
	readers map[string]map[string]string // main key -> reader -> nonce
	steps   map[string][]goldenStep      // script name -> how its next calls go
	record  []string                     // what it ran, in order
}

// goldenRemaining is the TTL every held lock has left, for "remaining":
// the fake keeps no TTLs.
const goldenRemaining = 20 * time.Second

type goldenHolder struct {
	holds, token int64
	waited       bool
	nonce, owner string
}

// goldenOutcome is what a scripted call does.
type goldenOutcome int

const (
	runScript  goldenOutcome = iota // run it: agree or refuse as the model says
	refuseCall                      // reply 0 without running it
	replyError                      // reply errFakeReply without running it
	netTimeout                      // fail with errFakeTimeout without running it
)

var outcomeNames = [...]string{"run", "refuse", "error reply", "timeout"}

// goldenStep scripts one call of a master.
type goldenStep struct {
	outcome goldenOutcome
	// gate, if set, holds the call until it is opened: a call that lands,
	// or a reply that comes, after the round was decided.
	gate *goldenGate
	// runFirst: the call runs before the gate, only its reply waits.
	runFirst bool
}

// goldenGate holds calls until open.
type goldenGate struct {
	name    string
	open    chan struct{}
	entered chan struct{} // closed when a call waits on it
	once    sync.Once
	opened  sync.Once
}

func newGate(name string) *goldenGate {
	return &goldenGate{name: name, open: make(chan struct{}), entered: make(chan struct{})}
}

func (g *goldenGate) release() { g.opened.Do(func() { close(g.open) }) }

func (g *goldenGate) wait() {
	g.once.Do(func() { close(g.entered) })
	<-g.open
}

// fakeReplyError is an error reply of the fake master (a redis.Error).
type fakeReplyError string

func (e fakeReplyError) Error() string { return string(e) }
func (fakeReplyError) RedisError()     {}

var (
	errFakeReply   error = fakeReplyError("ERR fake error reply")
	errFakeTimeout       = errors.New("fake: i/o timeout")
)

func newGoldenMaster(idx int) *goldenMaster {
	return &goldenMaster{
		idx:     idx,
		locks:   map[string]*goldenHolder{},
		free:    map[string]int64{},
		gone:    map[string]bool{},
		readers: map[string]map[string]string{},
		steps:   map[string][]goldenStep{},
	}
}

// next scripts the next call of script name.
func (m *goldenMaster) next(name string, s goldenStep) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps[name] = append(m.steps[name], s)
}

// hold scripts the next call of script name to wait for a new gate, then
// to do outcome; the gate is returned.
func (m *goldenMaster) hold(name string, outcome goldenOutcome) *goldenGate {
	g := newGate(fmt.Sprintf("m%d %s", m.idx, name))
	m.next(name, goldenStep{outcome: outcome, gate: g})
	return g
}

// heldBy makes key held by another Lock, with token.
func (m *goldenMaster) heldBy(key, owner, nonce string, token int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locks[lockKey(key)] = &goldenHolder{holds: 1, token: token, nonce: nonce, owner: owner}
	m.record = append(m.record, fmt.Sprintf("-- set: %s held by %s (nonce %s) with token %d", lockKey(key), owner, nonce, token))
}

// counter leaves key free with fencing counter n.
func (m *goldenMaster) counter(key string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.free[lockKey(key)] = n
	m.record = append(m.record, fmt.Sprintf("-- set: %s free with counter %d", lockKey(key), n))
}

// restart drops every key: a restart without persistence.
func (m *goldenMaster) restart() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.locks)
	clear(m.free)
	clear(m.gone)
	clear(m.readers)
	m.record = append(m.record, "-- restarted empty")
}

func (m *goldenMaster) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.record...)
}

// state describes what the master holds, sorted: what the operations
// left behind.
func (m *goldenMaster) state() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, h := range m.locks {
		out = append(out, fmt.Sprintf("%s held by %s nonce=%s holds=%d token=%d waited=%t", k, h.owner, h.nonce, h.holds, h.token, h.waited))
	}
	for k, n := range m.free {
		out = append(out, fmt.Sprintf("%s free counter=%d", k, n))
	}
	for k := range m.gone {
		out = append(out, k+" marker")
	}
	for k, r := range m.readers {
		for owner, nonce := range r {
			out = append(out, fmt.Sprintf("%s read by %s nonce=%s", k, owner, nonce))
		}
	}
	slices.Sort(out)
	return out
}

// waitCalls waits until the master has recorded at least n lines (the
// trace checks how many), for at most 5s.
func (m *goldenMaster) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := m.calls()
		switch {
		case len(got) >= n:
			return
		case time.Now().After(deadline):
			t.Fatalf("master %d: want %d records within 5s, have %d:\n%s", m.idx, n, len(got), strings.Join(got, "\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

// call runs script name as method ("evalsha", "eval") does, as scripted.
func (m *goldenMaster) call(ctx context.Context, method, name string, keys []string, args []any) *redis.Cmd {
	if err := ctx.Err(); err != nil { // as go-redis: an ended context sends nothing
		return redis.NewCmdResult(nil, err)
	}
	m.mu.Lock()
	s := goldenStep{}
	if q := m.steps[name]; len(q) > 0 {
		s, m.steps[name] = q[0], q[1:]
	}
	m.mu.Unlock()
	if s.gate != nil && s.runFirst {
		v, err := m.apply(s, method, name, keys, args)
		s.gate.wait()
		return redis.NewCmdResult(v, err)
	}
	if s.gate != nil {
		s.gate.wait()
	}
	v, err := m.apply(s, method, name, keys, args)
	return redis.NewCmdResult(v, err)
}

// apply does step s and records it.
func (m *goldenMaster) apply(s goldenStep, method, name string, keys []string, args []any) (any, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v int64
	var err error
	switch s.outcome {
	case runScript:
		v, err = m.run(name, keys, args)
	case refuseCall:
	case replyError:
		err = errFakeReply
	case netTimeout:
		err = errFakeTimeout
	}
	reply := strconv.FormatInt(v, 10)
	if err != nil {
		reply = errorClass(err)
	}
	line := fmt.Sprintf("%s %s %v %s -> %s", method, name, keys, goldenArgs(name, args), reply)
	var notes []string
	if s.outcome != runScript {
		notes = append(notes, "scripted "+outcomeNames[s.outcome])
	}
	switch {
	case s.gate != nil && s.runFirst:
		notes = append(notes, "reply held")
	case s.gate != nil:
		notes = append(notes, "held")
	}
	if len(notes) > 0 {
		line += " (" + strings.Join(notes, ", ") + ")"
	}
	m.record = append(m.record, line)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// goldenArgs formats a script's ARGV, with what depends on clocks as a
// class: a new acquire's proposed token (the client's clock in
// microseconds) is <usec>, a repair's TTL (the validity left) <ttl>.
func goldenArgs(name string, args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = fmt.Sprint(a)
		switch {
		case name == "acquire" && i == 3 && out[i] != "0" && out[i] != "1":
			if n, err := strconv.ParseInt(out[i], 10, 64); err == nil && n > 1 {
				out[i] = "<usec>"
			}
		case name == "repair" && i == 1:
			if n, err := strconv.ParseInt(out[i], 10, 64); err == nil && n > 0 {
				out[i] = "<ttl>"
			}
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

func argInt(a any) int64 {
	n, err := strconv.ParseInt(fmt.Sprint(a), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("golden master: %v is not an integer", a))
	}
	return n
}

// run models script name of scripts.lua. m.mu must be held.
func (m *goldenMaster) run(name string, keys []string, args []any) (int64, error) {
	k := keys[0]
	owner, holds, nonce := fmt.Sprint(args[0]), argInt(args[2]), fmt.Sprint(args[5])
	flag := fmt.Sprint(args[3])
	h := m.locks[k]
	mine := h != nil && h.owner == owner && h.nonce == nonce
	marker := k + ":gone:" + nonce
	mark := func() {
		if len(args) > 6 {
			m.gone[marker] = true
		}
	}
	// What readers make an acquire or repair reply: -1 where owner reads,
	// 0 where others do (readersRefuse).
	readers := func() (int64, bool) {
		r := m.readers[k]
		if _, ok := r[owner]; ok {
			return -1, true
		}
		return 0, len(r) > 0
	}
	switch name {
	case "acquire":
		if h != nil {
			if !mine {
				h.waited = true
				return 0, nil
			}
			h.holds = holds
			if flag == "0" {
				return 1, nil
			}
			return h.token, nil
		}
		if holds > 1 || m.gone[marker] {
			return 0, nil
		}
		if v, refused := readers(); refused {
			return v, nil
		}
		token := m.free[k]
		if flag != "0" {
			token++ // the fake ignores the clock's proposal
		}
		delete(m.free, k)
		m.locks[k] = &goldenHolder{holds: holds, token: token, nonce: nonce, owner: owner}
		if flag == "0" {
			return 1, nil
		}
		return token, nil
	case "fence":
		if !mine {
			return 0, nil
		}
		h.token = max(h.token, holds)
		return 1, nil
	case "resume":
		if h == nil || m.gone[marker] || h.owner != owner {
			return 0, nil
		}
		h.nonce, h.holds = nonce, holds
		if flag == "0" || h.token == 0 {
			return 1, nil
		}
		return h.token, nil
	case "remaining":
		if !mine {
			return 0, nil
		}
		return goldenRemaining.Milliseconds(), nil
	case "extend":
		if !mine {
			return 0, nil
		}
		return 1, nil
	case "repair":
		if m.gone[marker] || h != nil {
			return 0, nil
		}
		token := argInt(args[6])
		counter, ok := m.free[k]
		if flag == "0" || ok && token < counter {
			token = counter
		}
		if _, refused := readers(); refused {
			return 0, nil
		}
		delete(m.free, k)
		m.locks[k] = &goldenHolder{holds: holds, token: token, nonce: nonce, owner: owner}
		return 1, nil
	case "release":
		if holds > 0 {
			if !mine {
				mark()
				return 0, nil
			}
			h.holds = holds
			return 1, nil
		}
		floor := argInt(args[3]) // "0", "1", or the Lock's token
		if !mine {
			if c, ok := m.free[k]; ok {
				m.free[k] = max(c, floor)
			}
			mark()
			return 0, nil
		}
		delete(m.locks, k)
		if h.token != 0 {
			m.free[k] = max(h.token, floor)
		}
		if len(args) > 6 && fmt.Sprint(args[6]) == "2" {
			mark()
		}
		if h.waited {
			return replyWaited, nil
		}
		return 1, nil
	case "read_acquire":
		if h != nil && h.owner != owner {
			h.waited = true
			return 0, nil
		}
		r := m.readers[k]
		if n, ok := r[owner]; ok {
			if n != nonce {
				return 0, nil
			}
		} else if holds > 1 || m.gone[marker] {
			return 0, nil
		}
		if r == nil {
			r = map[string]string{}
			m.readers[k] = r
		}
		r[owner] = nonce
		return 1, nil
	case "read_extend":
		if n, ok := m.readers[k][owner]; !ok || n != nonce {
			return 0, nil
		}
		return 1, nil
	case "read_release":
		if n, ok := m.readers[k][owner]; !ok || n != nonce {
			if len(args) > 6 && fmt.Sprint(args[6]) == "1" {
				m.gone[marker] = true
			}
			return 0, nil
		}
		if holds == 0 {
			delete(m.readers[k], owner)
		}
		return 1, nil
	}
	return 0, fmt.Errorf("golden master: no model of script %q", name)
}

func (m *goldenMaster) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return m.call(ctx, "evalsha", scriptName(sha), keys, args)
}

func (m *goldenMaster) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return m.call(ctx, "eval", scriptName(redis.NewScript(src).Hash()), keys, args)
}

func (m *goldenMaster) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	panic("unused")
}

func (m *goldenMaster) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	panic("unused")
}

func (m *goldenMaster) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	panic("unused")
}

func (m *goldenMaster) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	return redis.NewStringResult(redis.NewScript(src).Hash(), nil)
}

// pipedMaster is a goldenMaster that pipelines: its calls go through one
// lane of the engine's pipeline, in order, so that a call queued behind
// one in flight can be withdrawn.
type pipedMaster struct{ *goldenMaster }

func (p *pipedMaster) Pipeline() redis.Pipeliner { return &goldenPipe{m: p.goldenMaster} }

// goldenPipe runs a batch's EVALSHAs one after the other. Only what the
// engine's pipeline uses is implemented.
type goldenPipe struct {
	redis.Pipeliner
	m    *goldenMaster
	cmds []redis.Cmder
}

func (p *goldenPipe) Process(_ context.Context, cmd redis.Cmder) error {
	p.cmds = append(p.cmds, cmd)
	return nil
}

func (p *goldenPipe) BatchProcess(_ context.Context, cmds ...redis.Cmder) error {
	p.cmds = append(p.cmds, cmds...)
	return nil
}

func (p *goldenPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds := p.cmds
	p.cmds = nil
	for _, c := range cmds {
		argv := c.Args() // evalsha, sha, numkeys, keys..., args...
		if fmt.Sprint(argv[0]) != "evalsha" {
			panic(fmt.Sprintf("golden pipe: unexpected command %v", argv[0]))
		}
		n := int(argInt(argv[2]))
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint(argv[3+i])
		}
		res := p.m.call(ctx, "evalsha", scriptName(fmt.Sprint(argv[1])), keys, argv[3+n:])
		cmd := c.(*redis.Cmd)
		if err := res.Err(); err != nil {
			cmd.SetErr(err)
		} else {
			cmd.SetVal(res.Val())
		}
	}
	return cmds, nil
}
