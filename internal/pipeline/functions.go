package pipeline

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Functions is a library of Redis Functions (Redis 7 and later) that runs
// scripts as FCALLs: a function is a script whose helpers the master
// defined once, at FUNCTION LOAD, instead of on every EVALSHA. It is
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

// Code returns the library's code, as FUNCTION LOAD takes it.
func (f *Functions) Code() string { return f.code }

// load returns the FUNCTION LOAD command of the library.
func (f *Functions) load(ctx context.Context) *redis.StatusCmd {
	return redis.NewStatusCmd(ctx, "function", "load", f.code)
}

// Name returns the name of the function that runs s, "" if f has none.
func (f *Functions) Name(s *redis.Script) string {
	n, _ := f.names[s].(string)
	return n
}

// Whether a Pipeline sends FCALLs: unknown until a FUNCTION LOAD of its
// library is answered, then on; off for good where the master cannot take
// the library or its FCALLs (Redis 6, an ACL, a proxy, a fake), or gave no
// usable answer to maxProbes loads.
const (
	fnUnknown uint32 = iota
	fnOn
	fnOff
)

const maxProbes = 3

// probeInterval is the least time between two loads of a master's library
// while it is unknown whether the master takes it.
var probeInterval = time.Second

// UseFunctions makes p send the scripts that f has as FCALLs once the
// master has loaded f, where its client is a *redis.Client; other clients
// keep EVALSHA. It must be called before p's first call. Until the master
// has answered the load, which p sends in the background on its first
// call, p sends EVALSHA.
func (p *Pipeline) UseFunctions(f *Functions) {
	if _, ok := p.client.(*redis.Client); ok && p.piper != nil {
		p.fns = f
	}
}

// probeLocked starts loading the library in the background, bounded by
// limit, if a load is due (see claimProbeLocked). p.mu must be held, and p
// not closed.
func (p *Pipeline) probeLocked() {
	if !p.claimProbeLocked() {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), p.limit)
		p.probe(ctx)
		cancel()
	}()
}

// claimProbeLocked reports whether a load of the library is due, and marks
// one under way if so: it is unknown whether the master takes it, no load
// is under way, and the last one ended at least probeInterval ago. p.mu
// must be held.
func (p *Pipeline) claimProbeLocked() bool {
	if p.fns == nil || p.fnState.Load() != fnUnknown || p.probing || time.Since(p.probed) < probeInterval {
		return false
	}
	p.probing = true
	return true
}

// probe loads the library under ctx and records how the load claimed by
// claimProbeLocked ended.
func (p *Pipeline) probe(ctx context.Context) {
	err := p.loadFunctions(ctx, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probing, p.probed = false, time.Now()
	if err != nil && p.fnState.Load() == fnUnknown {
		if p.probes++; p.probes >= maxProbes {
			p.fnState.Store(fnOff)
		}
	}
}

// ProbeDue reports whether p's next call would start loading the library
// in the background (see UseFunctions).
func (p *Pipeline) ProbeDue() bool {
	if p.fns == nil || p.fnState.Load() != fnUnknown {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && !p.probing && time.Since(p.probed) >= probeInterval
}

// Probe is the load of the library that p's next call would start (see
// ProbeDue), made now: the connection it opens, if any, is then open
// before the call. It blocks until the master answers, ctx ends or limit
// passes; if no load is due it returns at once.
func (p *Pipeline) Probe(ctx context.Context) {
	p.mu.Lock()
	if p.closed || !p.claimProbeLocked() {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1) // Close waits for it
	p.mu.Unlock()
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(ctx, p.limit)
	defer cancel()
	p.probe(ctx)
}

// LoadFunctions loads the library given to UseFunctions on the master, if
// there is one and the master has not refused it. It returns an error only
// where the master gave no answer: a refusal means EVALSHA, not a failure.
func (p *Pipeline) LoadFunctions(ctx context.Context) error {
	if p.fns == nil || p.fnState.Load() == fnOff {
		return nil
	}
	if err := p.loadFunctions(ctx, true); err != nil && !isRedisError(err) {
		return err
	}
	return nil
}

// loadFunctions sends FUNCTION LOAD and records the master's answer (see
// loaded). It returns nil where the library is there now.
func (p *Pipeline) loadFunctions(ctx context.Context, first bool) error {
	cmd := p.fns.load(ctx)
	_ = p.proc.Process(ctx, cmd)
	return p.loaded(cmd.Err(), first)
}

// loaded records the answer err to a FUNCTION LOAD, a first one or a
// reload, and returns nil where the library is there now: loaded, or
// already there (another client of the same code loaded it). A refusal
// turns FCALLs off for good; an error reply that may pass (OOM, LOADING,
// BUSY...) or no answer changes nothing.
func (p *Pipeline) loaded(err error, first bool) error {
	switch {
	case err == nil || redis.HasErrorPrefix(err, "Library") && strings.Contains(err.Error(), "already exists"):
		if first {
			p.fnState.CompareAndSwap(fnUnknown, fnOn)
		}
		return nil
	case redis.HasErrorPrefix(err, "unknown command"), redis.HasErrorPrefix(err, "unknown subcommand"),
		redis.HasErrorPrefix(err, "NOPERM"):
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
	return c.command(ctx, fcallName, name, keys, args)
}

// asScript reports whether cmd did not run and must be sent as EVAL: an
// EVALSHA whose script the master lacks, or an FCALL whose function it
// lacks (a reload failed), that it refuses (then p sends no more FCALLs),
// or that it turned away before running where an EVAL would run (see
// notRunHere).
func (p *Pipeline) asScript(cmd *redis.Cmd) bool {
	switch err := cmd.Err(); {
	case isNoScript(err):
		return true
	case err == nil || cmd.Name() != "fcall":
		return false
	case fcallRefused(err):
		p.fnState.Store(fnOff)
		return true
	default:
		return noFunction(err) || notRunHere(err)
	}
}

// noFunction reports whether err says that an FCALL did not run because
// the function is not there: the master lost its functions (it restarted
// empty, FUNCTION FLUSH).
func noFunction(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found")
}

// fcallRefused reports whether err says that an FCALL did not run because
// the master, or a proxy before it, does not let it.
func fcallRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "'fcall'")
}

// notRunHere reports whether err is how a master turns away a call of a
// function that may write, before running it, where it would have run the
// same script sent with EVAL until its first write: out of memory (where
// even that write may pass, as a PEXPIRE does), or refusing writes
// (MISCONF, NOREPLICAS, READONLY). An error raised while a function runs
// names the script (" script: "), so it is never taken for one of these.
func notRunHere(err error) bool {
	for _, prefix := range []string{"OOM", "MISCONF", "NOREPLICAS", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return !strings.Contains(err.Error(), " script: ")
		}
	}
	return false
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
