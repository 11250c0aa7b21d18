package redlock

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// fakeMaster is an in-memory master that runs redlock's scripts by name and
// can be made to block, fail or forget its script cache. Safe for
// concurrent use.
type fakeMaster struct {
	mu       sync.Mutex
	data     map[string]string // lock key -> owner
	nonces   map[string]string // lock key -> nonce of the holding Lock
	counters map[string]int64  // lock key -> fencing counter
	tokens   map[string]int64  // lock key -> token of its holder
	calls    []string          // script names, in call order; "EVAL" marks a fallback
	cached   bool              // the script cache is loaded
	gate     chan struct{}
	honorCtx bool         // a blocked call returns when its context ends
	entered  atomic.Int32 // calls that reached the master, blocked or not
	err      error        // every call fails with it
}

func newFake() *fakeMaster {
	return &fakeMaster{data: map[string]string{}, nonces: map[string]string{}, counters: map[string]int64{}, tokens: map[string]int64{}, cached: true}
}

// block makes every later call wait until unblock (or, with honorCtx, until
// its context ends).
func (f *fakeMaster) block(honorCtx bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.honorCtx = make(chan struct{}), honorCtx
}

func (f *fakeMaster) unblock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate)
	f.gate = nil
}

func (f *fakeMaster) callNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeMaster) get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.data[key]
	return v, ok
}

func (f *fakeMaster) set(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data[key] = value
}

func scriptName(sha string) string {
	for name, s := range scripts {
		if s.Hash() == sha {
			return name
		}
	}
	return "unknown"
}

func (f *fakeMaster) run(ctx context.Context, name string, keys []string, args []any) *redis.Cmd {
	f.entered.Add(1)
	if ctx.Err() != nil { // as go-redis: an ended context sends nothing
		return redis.NewCmdResult(nil, ctx.Err())
	}
	f.mu.Lock()
	gate, honor := f.gate, f.honorCtx
	f.mu.Unlock()
	if gate != nil {
		if honor {
			select {
			case <-gate:
			case <-ctx.Done():
				return redis.NewCmdResult(nil, ctx.Err())
			}
		} else {
			<-gate
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	if f.err != nil {
		return redis.NewCmdResult(nil, f.err)
	}
	key, owner, n, nonce := keys[0], args[0].(string), args[2].(int64), args[5].(string)
	cur, held := f.data[key]
	ours := held && cur == owner && f.nonces[key] == nonce
	switch {
	case name == "acquire" && ours:
		return redis.NewCmdResult(f.tokens[key], nil)
	case name == "acquire" && !held && n <= 1: // a re-entry never creates a missing key
		f.data[key], f.nonces[key] = owner, nonce
		f.tokens[key] = 1
		if proposal, ok := args[3].(int64); ok { // fencing (see scripts.lua)
			f.counters[key] = max(f.counters[key]+1, proposal)
			f.tokens[key] = f.counters[key]
		}
		return redis.NewCmdResult(f.tokens[key], nil)
	case name == "fence" && ours:
		f.counters[key] = max(f.counters[key], n)
		f.tokens[key] = n
		return redis.NewCmdResult(int64(1), nil)
	case name == "extend" && ours:
		return redis.NewCmdResult(int64(1), nil)
	case name == "release" && ours:
		if n == 0 {
			delete(f.data, key)
		}
		return redis.NewCmdResult(int64(1), nil)
	}
	return redis.NewCmdResult(int64(0), nil)
}

func (f *fakeMaster) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.mu.Lock()
	cached := f.cached
	f.mu.Unlock()
	if !cached {
		return redis.NewCmdResult(nil, redis.ErrNoScript)
	}
	return f.run(ctx, scriptName(sha), keys, args)
}

func (f *fakeMaster) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	f.mu.Lock()
	f.cached = true
	f.calls = append(f.calls, "EVAL")
	f.mu.Unlock()
	return f.run(ctx, scriptName(redis.NewScript(src).Hash()), keys, args)
}

func (f *fakeMaster) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	panic("unused")
}

func (f *fakeMaster) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	panic("unused")
}

// ScriptExists is never called: a silent master comes back by an
// ordinary call (see internal/quorum's health).
func (f *fakeMaster) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	panic("unused")
}

func (f *fakeMaster) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cached = true
	return redis.NewStringResult(redis.NewScript(src).Hash(), nil)
}

func fakes(n int) []*fakeMaster {
	fs := make([]*fakeMaster, n)
	for i := range fs {
		fs[i] = newFake()
	}
	return fs
}
