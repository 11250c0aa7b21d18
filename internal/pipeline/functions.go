package pipeline

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Functions is a library of Redis Functions (Redis 7 and later) that runs
// scripts as FCALLs: a function is a script whose helpers the master
// compiled once, at FUNCTION LOAD, instead of on every EVALSHA. It is
// read-only and safe for concurrent use.
type Functions struct {
	code  string                // what FUNCTION LOAD takes
	names map[*redis.Script]any // each script's function, its name boxed once
}

// NewFunctions returns the library code, in which function names[s] runs
// what script s does, with the same keys and arguments.
func NewFunctions(code string, names map[*redis.Script]string) *Functions {
	f := &Functions{code: code, names: make(map[*redis.Script]any, len(names))}
	for s, n := range names {
		f.names[s] = n
	}
	return f
}

// Whether a Pipeline sends FCALL: unknown until it first loads its library
// (see useFunctions), then on, or off for good where the master cannot
// take the library (Redis 6, an ACL, a proxy, a fake).
const (
	fnUnknown uint32 = iota
	fnOn
	fnOff
)

// UseFunctions makes p send the scripts that f has as FCALLs, loading f on
// the master first, where its client is a *redis.Client; other clients
// keep EVALSHA. It must be called before p's first call. A master that
// refuses FUNCTION LOAD, or later FCALL, gets EVALSHA from then on.
func (p *Pipeline) UseFunctions(f *Functions) {
	if _, ok := p.client.(*redis.Client); ok && p.piper != nil {
		p.fns = f
	}
}

// useFunctions reports whether to send FCALLs, loading the library once
// first: a master that answers the load with an error reply is off for
// good, one that gives no answer is asked again by the next call.
func (p *Pipeline) useFunctions(ctx context.Context) bool {
	if p.fns == nil {
		return false
	}
	switch p.fnState.Load() {
	case fnOn:
		return true
	case fnOff:
		return false
	}
	return p.loadFunctions(ctx) == nil
}

// LoadFunctions loads the library given to UseFunctions on the master, if
// there is one and the master has not refused it. It returns an error only
// where the master gave no answer: a refusal means EVALSHA, not a failure.
func (p *Pipeline) LoadFunctions(ctx context.Context) error {
	if p.fns == nil || p.fnState.Load() == fnOff {
		return nil
	}
	if err := p.loadFunctions(ctx); err != nil && !isRedisError(err) {
		return err
	}
	return nil
}

// loadFunctions sends FUNCTION LOAD and records the master's answer. It
// returns nil where the library is there now.
func (p *Pipeline) loadFunctions(ctx context.Context) error {
	cmd := redis.NewStatusCmd(ctx, "function", "load", p.fns.code)
	_ = p.proc.Process(ctx, cmd)
	return p.loaded(cmd.Err())
}

// loaded records the answer err to a FUNCTION LOAD and returns nil where
// the library is there now: loaded, or already there (another client of
// the same code loaded it).
func (p *Pipeline) loaded(err error) error {
	switch {
	case err == nil || redis.HasErrorPrefix(err, "Library") && strings.Contains(err.Error(), "already exists"):
		p.fnState.Store(fnOn)
		return nil
	case isRedisError(err):
		p.fnState.Store(fnOff)
	}
	return err
}

// fcall builds, in c's reused argument buffer, the FCALL command of s with
// keys and args, or returns nil if f has no function for s.
func (c *call) fcall(ctx context.Context, f *Functions, s *redis.Script, keys Keys, args []any) *redis.Cmd {
	name, ok := f.names[s]
	if !ok {
		return nil
	}
	return c.command(ctx, "fcall", name, keys, args)
}

// noFunction reports whether err says that an FCALL did not run because
// the function is not there: the master lost its functions (it restarted
// empty, FUNCTION FLUSH).
func noFunction(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found")
}

// fcallRefused reports whether err says that an FCALL did not run because
// the master, or a proxy before it, does not let it: the call is sent as a
// script instead, and so is every later one.
func fcallRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM")
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// Code returns the library's code, as FUNCTION LOAD takes it.
func (f *Functions) Code() string { return f.code }

// Name returns the name of the function that runs s, "" if f has none.
func (f *Functions) Name(s *redis.Script) string {
	n, _ := f.names[s].(string)
	return n
}
