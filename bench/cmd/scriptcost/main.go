// Command scriptcost measures what redlock's scripts cost a master, per
// call of the plain lock's acquire and last release, fenced and not, and
// of the two scripts of redislock's plain lock (bench.Transport's), each
// sent in pipelined batches on fresh keys to one local redis-server: the
// server's CPU time (INFO cpu: reading the call and writing its reply
// included), the time the server spent running the script (INFO
// commandstats: FCALL's or EVALSHA's usec, which includes the commands the
// script ran) and, of that, the time in those commands. It prints the
// median of a few rounds per script:
//
//	cd bench && go run ./cmd/scriptcost
//
// With -pieces it prints instead what parts of the acquire and the last
// release cost, run in a loop inside one call (see pieces.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/bench"
	"github.com/go-redlock/redlock/integration"
)

func main() {
	calls := flag.Int("calls", 50000, "calls per script and round")
	batch := flag.Int("batch", 32, "calls per pipelined batch")
	rounds := flag.Int("rounds", 3, "rounds (the median is printed)")
	onlyPieces := flag.Bool("pieces", false, "measure only the pieces of the scripts (see pieces.go), not whole calls")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *calls, *batch, *rounds, *onlyPieces); err != nil {
		log.Fatal(err)
	}
}

// script is one script's call on key i of a round, given the reply of
// the call before it on that key (the acquire's, for a release).
type script struct {
	name string
	call func(key string, before any) []any
	keyf func(round, i int) string
}

func run(ctx context.Context, calls, batch, rounds int, onlyPieces bool) error {
	cl, err := integration.StartProcesses(ctx, 1, integration.ProcessOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	rc := bench.NewRedisClient(cl.Addrs()[0])
	defer func() { _ = rc.Close() }()
	lib, code, err := loadLibrary(ctx, rc)
	if err != nil {
		return err
	}
	cc, err := bench.NewCommandCounter(ctx, []*redis.Client{cl.Admin(0)})
	if err != nil {
		return err
	}
	if onlyPieces {
		return measurePieces(ctx, rc, cc, code, rounds)
	}
	for _, s := range []*redis.Script{bench.TransportObtain, bench.TransportRelease} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			return err
		}
	}
	const owner, nonce, ttl = "owner-0123456789abcdefgh", "nonce-0123456789abcdefgh", 10000
	redlockKey := func(prefix string) func(int, int) string {
		return func(round, i int) string { return fmt.Sprintf("{%s%d:%d}", prefix, round, i) }
	}
	plainKey := func(round, i int) string { return fmt.Sprintf("t%d:%d", round, i) }
	fcall := func(fn string, keyArgs ...any) []any { return append([]any{"fcall", lib + "_" + fn, 1}, keyArgs...) }
	pairs := [][2]script{
		{
			{"redlock acquire, fenced", func(k string, _ any) []any {
				return fcall("acquire", k, owner, ttl, 1, time.Now().UnixMicro(), 0, nonce)
			}, redlockKey("f")},
			{"redlock last release, fenced", func(k string, token any) []any {
				return fcall("release", k, owner, ttl, 0, token, 0, nonce, "1")
			}, redlockKey("f")},
		},
		{
			{"redlock acquire, unfenced", func(k string, _ any) []any {
				return fcall("acquire", k, owner, ttl, 1, "0", 0, nonce)
			}, redlockKey("u")},
			{"redlock last release, unfenced", func(k string, _ any) []any {
				return fcall("release", k, owner, ttl, 0, "0", 0, nonce, "1")
			}, redlockKey("u")},
		},
		{
			{"redislock obtain", func(k string, _ any) []any {
				return []any{"evalsha", bench.TransportObtain.Hash(), 1, k, owner, ttl}
			}, plainKey},
			{"redislock release", func(k string, _ any) []any {
				return []any{"evalsha", bench.TransportRelease.Hash(), 1, k, owner}
			}, plainKey},
		},
	}
	type cost struct{ cpu, script, commands float64 } // µs per call
	costs := map[string][]cost{}
	for round := range rounds {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			return err
		}
		for _, p := range pairs {
			replies := make([]any, calls)
			for _, s := range p {
				d, err := measure(ctx, rc, cc, calls, batch, func(i int) []any {
					return s.call(s.keyf(round, i), replies[i])
				}, replies)
				if err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				per := func(us int64) float64 { return float64(us) / float64(calls) }
				c := cost{cpu: d.CPU.Seconds() * 1e6 / float64(calls)}
				for name, us := range d.Usec {
					if name == "fcall" || name == "evalsha" {
						c.script += per(us)
					} else {
						c.commands += per(us)
					}
				}
				costs[s.name] = append(costs[s.name], c)
			}
		}
	}
	fmt.Printf("server time per call in µs, %d calls in batches of %d, median of %d rounds:\n", calls, batch, rounds)
	fmt.Printf("  %-32s %8s %8s %8s\n", "", "CPU", "script", "commands")
	for _, p := range pairs {
		var pair cost
		for _, s := range p {
			cs := costs[s.name]
			m := cost{
				median(cs, func(c cost) float64 { return c.cpu }),
				median(cs, func(c cost) float64 { return c.script }),
				median(cs, func(c cost) float64 { return c.commands }),
			}
			pair.cpu, pair.script, pair.commands = pair.cpu+m.cpu, pair.script+m.script, pair.commands+m.commands
			fmt.Printf("  %-32s %8.2f %8.2f %8.2f\n", s.name, m.cpu, m.script, m.commands)
		}
		fmt.Printf("  %-32s %8.2f %8.2f %8.2f\n", "  pair", pair.cpu, pair.script, pair.commands)
	}
	return nil
}

// loadLibrary has a redlock client load its library on the master (by
// locking and unlocking once), and returns the library's name and code.
func loadLibrary(ctx context.Context, rc *redis.Client) (name, code string, err error) {
	c, err := redlock.New([]*redis.Client{rc}, nil)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = c.Close() }()
	l, err := c.Acquire(ctx, "scriptcost", time.Second)
	if err != nil {
		return "", "", err
	}
	if err := l.Release(ctx); err != nil {
		return "", "", err
	}
	libs, err := rc.FunctionList(ctx, redis.FunctionListQuery{WithCode: true}).Result()
	if err != nil {
		return "", "", err
	}
	for _, l := range libs {
		if strings.HasPrefix(l.Name, "redlock") {
			return l.Name, l.Code, nil
		}
	}
	return "", "", fmt.Errorf("no redlock library loaded on the master (%d libraries)", len(libs))
}

// measure sends calls commands, batch at a time, and returns what the
// master did meanwhile, as cc counts it; replies[i] is set to command i's
// reply.
func measure(ctx context.Context, rc *redis.Client, cc *bench.CommandCounter, calls, batch int, command func(i int) []any, replies []any) (bench.Commands, error) {
	before, err := cc.Snapshot(ctx)
	if err != nil {
		return bench.Commands{}, err
	}
	cmds := make([]*redis.Cmd, 0, batch)
	for i := 0; i < calls; i += batch {
		p := rc.Pipeline()
		cmds = cmds[:0]
		for j := i; j < min(i+batch, calls); j++ {
			cmds = append(cmds, p.Do(ctx, command(j)...))
		}
		if _, err := p.Exec(ctx); err != nil {
			return bench.Commands{}, err
		}
		for k, c := range cmds {
			replies[i+k] = c.Val()
		}
	}
	after, err := cc.Snapshot(ctx)
	if err != nil {
		return bench.Commands{}, err
	}
	return cc.Diff(before, after), nil
}

// median returns the median of f over cs.
func median[T any](cs []T, f func(T) float64) float64 {
	vs := make([]float64, len(cs))
	for i, c := range cs {
		vs[i] = f(c)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}
