package redlock

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts.lua
var scriptsLua string

// Scripts compiled from scripts.lua. Their SHA1 is computed once here; each
// master caches the script body on first use (EVALSHA falls back to EVAL on
// NOSCRIPT, which also covers a master that restarted and lost its cache).
var (
	scripts     = splitScripts(scriptsLua)
	fenceScript = scripts.get("fence")
)

// mode is one sort of lock: the scripts for its operations and its keys.
type mode struct {
	acquire, extend, release *redis.Script
	fenced                   bool // acquisitions hand out fencing tokens
	rw                       bool // a read-write lock: five keys
	waits                    bool // a writer that leaves the write-wait marker
}

var (
	exclusiveMode    = &mode{acquire: scripts.get("acquire"), extend: scripts.get("extend"), release: scripts.get("release"), fenced: true}
	writeMode        = &mode{acquire: exclusiveMode.acquire, extend: exclusiveMode.extend, release: exclusiveMode.release, fenced: true, rw: true}
	waitingWriteMode = &mode{acquire: exclusiveMode.acquire, extend: exclusiveMode.extend, release: exclusiveMode.release, fenced: true, rw: true, waits: true}
	readMode         = &mode{acquire: scripts.get("read_acquire"), extend: scripts.get("read_extend"), release: scripts.get("read_release"), rw: true}
)

// keys returns the keys of the lock named key, in the order scripts.lua
// expects; they share the Redis Cluster hash tag {prefix+key}.
func (m *mode) keys(prefix, key string) []string {
	tag := "{" + prefix + key + "}"
	if !m.rw {
		return []string{tag, tag + ":fence"}
	}
	return []string{tag, tag + ":fence", tag + ":r", tag + ":rn", tag + ":ww"}
}

type scriptSet map[string]*redis.Script

// splitScripts cuts src into the sections that start with "--- name".
func splitScripts(src string) scriptSet {
	set := scriptSet{}
	var name string
	var body strings.Builder
	flush := func() {
		if name != "" {
			set[name] = redis.NewScript(body.String())
		}
		body.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "--- "); ok {
			flush()
			name = strings.TrimSpace(rest)
			if _, dup := set[name]; dup || name == "" {
				panic(fmt.Sprintf("redlock: scripts.lua: bad or duplicate section %q", name))
			}
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	flush()
	return set
}

func (s scriptSet) get(name string) *redis.Script {
	sc, ok := s[name]
	if !ok {
		panic("redlock: scripts.lua has no section " + name)
	}
	return sc
}

// node is one master. It is safe for concurrent use.
type node struct {
	name    string
	client  redis.Scripter
	timeout time.Duration // bound of every call to this master

}

// eval runs s on the master. Every script replies with an integer that is
// positive where the master agreed; err reports a master that gave no usable
// answer (network error, timeout, Redis error).
func (n *node) eval(ctx context.Context, s *redis.Script, keys []string, args []any) (int64, error) {
	v, err := s.Run(ctx, n.client, keys, args...).Int64()
	if err != nil {
		return 0, err
	}
	return v, nil
}

// undo runs s on the master with a fresh context bounded by the node's
// timeout: cleanup must happen even when the caller's context has ended.
func (n *node) undo(ctx context.Context, s *redis.Script, keys []string, args []any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
	defer cancel()
	_, _ = n.eval(ctx, s, keys, args)
}

// masterName names a master in errors: its address where the client tells
// it, otherwise its position.
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
