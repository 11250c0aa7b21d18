package redlock

import (
	"bufio"
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

//go:embed scripts.lua
var scriptsLua string

// Scripts compiled from scripts.lua. Their SHA1 is computed once here.
// Each master caches the script body on first use. EVALSHA falls back to
// EVAL on NOSCRIPT, which also covers a master that lost its cache. Where
// a master takes Redis Functions, the same scripts run as the functions
// of one library instead.
var (
	scripts, functions = splitScripts(scriptsLua)
	fenceScript        = scripts.get("fence")
)

// mode is one sort of lock: the scripts for its operations and its keys.
type mode struct {
	acquire, extend, release *redis.Script
	repair                   *redis.Script // nil: extends repair nothing (read locks, permits)
	fence                    *redis.Script // raises the counter to a token; nil where not fenced
	// extendMany extends many Locks of this mode in one call. It takes
	// the first batchKeys of each Lock's keys, and three arguments per Lock
	// (see extend_many in scripts.lua).
	extendMany *redis.Script
	batchKeys  int
	rank       int  // renewal batches hold Locks of one mode, in rank order
	fenced     bool // acquisitions hand out fencing tokens
	rw         bool // a read-write lock: four keys
	// permit: a semaphore's permit, whose one key is the main key with
	// suffix ":s". It holds once: it cannot be re-entered.
	permit bool
	// undo reverts a failed acquire where it applied; nil: release does.
	undo *redis.Script
	// multi: a multi-resource lock, whose keys are the main keys of
	// several names. Releases publish on each. It holds once.
	multi bool
}

var (
	exclusiveMode = &mode{acquire: scripts.get("acquire"), extend: scripts.get("extend"), release: scripts.get("release"), repair: scripts.get("repair"), fence: fenceScript,
		extendMany: scripts.get("extend_many"), batchKeys: 1, fenced: true}
	writeMode = &mode{acquire: exclusiveMode.acquire, extend: exclusiveMode.extend, release: exclusiveMode.release, repair: exclusiveMode.repair, fence: fenceScript,
		extendMany: exclusiveMode.extendMany, batchKeys: 1, fenced: true, rw: true}
	readMode = &mode{acquire: scripts.get("read_acquire"), extend: scripts.get("read_extend"), release: scripts.get("read_release"),
		extendMany: scripts.get("read_extend_many"), batchKeys: 4, rank: 1, rw: true}
	permitMode = &mode{acquire: scripts.get("sem_acquire"), extend: scripts.get("sem_extend"), release: scripts.get("sem_release"), fence: scripts.get("sem_fence"),
		extendMany: scripts.get("sem_extend_many"), batchKeys: 1, rank: 2, fenced: true, permit: true}
	// fairMode is the exclusive lock taken in a queue's order (see
	// "@queue" in scripts.lua): held, extended and renewed as one.
	fairMode = &mode{acquire: scripts.get("fair_acquire"), undo: scripts.get("fair_undo"), extend: exclusiveMode.extend, release: scripts.get("fair_release"),
		repair: exclusiveMode.repair, fence: fenceScript, extendMany: exclusiveMode.extendMany, batchKeys: 1, fenced: true}
)

// keys returns the keys of the lock named key, in the order scripts.lua
// expects: the lock's main key, then that key with a suffix. They all
// hash to one Redis Cluster slot. A permit's one key is the main key
// with a suffix: the semaphore of a name is not its lock.
func (m *mode) keys(prefix, key string) []string {
	k := lockKey(prefix + key)
	switch {
	case m.permit:
		return []string{permitsKey(k)}
	case !m.rw:
		return []string{k}
	}
	return []string{k, k + ":r", k + ":rn", k + ":ww"}
}

// permitsKey is the key of the permits of the semaphore whose name's
// main key is k. Its releases are published on it too.
func permitsKey(k string) string { return k + ":s" }

// lockKey returns the main key of the lock named name (prefix and key),
// which is also the channel its releases are published on.
//
// Redis Cluster hashes only a key's tag, from its first '{' to the next
// '}', if that is not empty. The key is "{name}", whose tag is name up to
// its first '}'. A name that starts with '}' would make the tag empty.
// The keys of one lock would then hash to different slots. Such a name
// gets "}{tag}name}", where tag is name with each '}' replaced by ')'.
//
// The keys of distinct names never collide. Only the second form starts
// with '}', and in it the first '}' ends the tag. Every key is lockKey's,
// which ends with '}', followed by a suffix without '}'. The suffixes are
// ":r", ":rn", ":ww", ":rh", or ":gone:" and a nonce, which may hold no
// '}'. So the last '}' of a key tells its name from its suffix.
func lockKey(name string) string {
	if !strings.HasPrefix(name, "}") {
		return "{" + name + "}"
	}
	return "}{" + strings.ReplaceAll(name, "}", ")") + "}" + name + "}"
}

type scriptSet map[string]*redis.Script

// splitScripts cuts src into the sections that start with "--- name". A
// section "--- name @a @b" starts with the text of sections "@a" and "@b",
// which must come before it. Sections named "@..." are only such helpers.
//
// It also returns the scripts as a library of Redis Functions. The library
// holds every helper once, then a function per script. A function's body
// is the script's own text, with KEYS and ARGV as its parameters. The
// library and its functions are named after a hash of their code. So
// clients of different versions share a master without replacing each
// other's.
func splitScripts(src string) (scriptSet, *pipeline.Functions) {
	set, libs := scriptSet{}, map[string]string{}
	var names []string                // scripts, in order
	own := map[string]string{}        // each script's text without its helpers
	var helpers, body strings.Builder // helpers: every helper, in order
	var name string
	ownFrom := 0 // where name's own text starts in body
	flush := func() {
		switch {
		case strings.HasPrefix(name, "@"):
			libs[name] = body.String()
			helpers.WriteString(body.String())
		case name != "":
			set[name] = redis.NewScript(body.String())
			own[name] = body.String()[ownFrom:]
			names = append(names, name)
		}
		body.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "--- "); ok {
			flush()
			fields := strings.Fields(rest)
			name = ""
			if len(fields) > 0 {
				name = fields[0]
			}
			_, dup := set[name]
			_, dupLib := libs[name]
			if dup || dupLib || name == "" || strings.HasPrefix(name, "@") && len(fields) > 1 {
				panic(fmt.Sprintf("redlock: scripts.lua: bad or duplicate section %q", rest))
			}
			for _, need := range fields[1:] {
				lib, ok := libs[need]
				if !ok || !strings.HasPrefix(need, "@") {
					panic(fmt.Sprintf("redlock: scripts.lua: section %q needs %s before it", name, need))
				}
				body.WriteString(lib)
			}
			ownFrom = body.Len()
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	flush()

	code := func(lib string) string {
		c := "#!lua name=" + lib + "\n" + helpers.String()
		for _, n := range names {
			c += "redis.register_function('" + lib + "_" + n + "', function(KEYS, ARGV)\n" + own[n] + "end)\n"
		}
		return c
	}
	sum := sha1.Sum([]byte(code("")))
	lib := "redlock_" + hex.EncodeToString(sum[:8])
	fns := make(map[*redis.Script]string, len(names))
	for _, n := range names {
		fns[set[n]] = lib + "_" + n
	}
	return set, pipeline.NewFunctions(code(lib), fns)
}

func (s scriptSet) get(name string) *redis.Script {
	sc, ok := s[name]
	if !ok {
		panic("redlock: scripts.lua has no section " + name)
	}
	return sc
}

// node is one master. It is safe for concurrent use. New sets its fields,
// then they never change.
type node struct {
	name    string
	client  redis.Scripter
	pipe    *pipeline.Pipeline // calls made while one is in flight go out together
	timeout time.Duration      // MasterTimeout: the first cleanup try's wait
	id      *idCache           // the server it reaches; nil if it cannot be asked
	prep    *preparation       // its setup under way, if any (see Client.prepare)
	// shards routes a cluster master's rounds to the node of each
	// lock's slot; nil for other masters. pipe still serves the rest.
	shards *shards
}

// close closes the master's pipelines, or aborts them, and waits.
func (n *node) close(abort bool) {
	var wg sync.WaitGroup
	if n.shards != nil {
		wg.Go(func() { n.shards.closePipes(abort) })
	}
	if abort {
		n.pipe.Abort()
	} else {
		n.pipe.Close()
	}
	wg.Wait()
}

// batches reports whether one call may carry many locks' keys. Only a
// master known to be one server may: one with an identity (id), a plain
// or Sentinel *redis.Client. A client that shards keys, a cluster, a
// ring or any type that wraps one, routes a call by one of its keys.
// So every other master gets one call per lock.
func (n *node) batches() bool { return n.id != nil }

// eval runs s on the master, through its pipeline, and waits for its
// reply or for ctx to end. mustSend calls are never refused nor dropped,
// and are sent even if ctx ends first. Every script replies with an
// integer, or a fencing token as decimal text. It is positive where the
// master agreed. err reports a master that gave no usable answer: a
// network error, a timeout, a Redis error. It also reports a call not
// sent, matching pipeline.ErrNotSent.
func (n *node) eval(ctx context.Context, s *redis.Script, keys pipeline.Keys, args []any, mustSend bool) (int64, error) {
	v, err := n.pipe.Run(ctx, s, keys, args, mustSend)
	return v, closedError(err)
}

// closedError returns err. Where the pipeline was closed, err matches
// ErrClosed too. A connection that closed or was refused gets plain
// words.
func closedError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pipeline.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, io.EOF):
		return &connError{"connection closed (EOF)", err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &connError{"connection closed (unexpected EOF)", err}
	case errors.Is(err, syscall.ECONNRESET):
		return &connError{"connection reset", err}
	case errors.Is(err, syscall.EPIPE):
		return &connError{"connection closed (broken pipe)", err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &connError{"connection refused", err}
	}
	return err
}

// connError is a master's network error in plain words. A bare "EOF"
// does not say that the master closed the connection. A dial error
// repeats the master's address. errors.Is and errors.As reach the error
// itself.
type connError struct {
	what string
	err  error
}

func (e *connError) Error() string { return e.what }
func (e *connError) Unwrap() error { return e.err }

// masterName names a master in errors: its address where the client
// tells it, otherwise its position.
func masterName(c redis.Scripter, i int) string {
	switch c := c.(type) {
	case *redis.Client:
		switch o := c.Options(); {
		case o.Addr == "FailoverClient": // Sentinel-managed: no fixed address
		case o.DB != 0:
			return fmt.Sprintf("%s/%d", o.Addr, o.DB)
		default:
			return o.Addr
		}
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("master%d", i)
}
