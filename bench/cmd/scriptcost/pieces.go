package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/bench"
)

// piece is a part of redlock's acquire or last release, as Lua that runs
// with the library's helpers, KEYS and ARGV as an acquire has them, V a
// held lock's value and NOW the master's clock in µs.
type piece struct{ name, lua string }

var pieces = []piece{
	{"holderOf(nonce, owner)", "local me = holderOf(ARGV[6], ARGV[1])"},
	{"valueOf(holds, token, waited, holder)", "local v = valueOf(ARGV[3], ARGV[4], '0', ARGV[6])"},
	{"parse(value)", "local a, b, c, d = parse(V)"},
	{"parse(false)", "local a, b, c, d = parse(false)"},
	{"nextToken(nil, proposal, ttl)", "local t = nextToken(nil, ARGV[4], 10000)"},
	{"redis.call('TIME')", "local t = redis.call('TIME')"},
	{"redis.call('MGET', lock, marker)", "local f = redis.call('MGET', KEYS[1], KEYS[1] .. ':gone:' .. ARGV[6])"},
	{"redis.call('GET', lock)", "local f = redis.call('GET', KEYS[1])"},
	{"redis.call('EXISTS', lock)", "local f = redis.call('EXISTS', KEYS[1])"},
}

// piecesLoops is how many times one FCALL runs a piece.
const piecesLoops = 10000

// measurePieces prints what each piece costs the master per run: the
// FCALL's time (INFO commandstats) over piecesLoops runs, less that of an
// empty loop, the median of rounds calls. code is redlock's library, as
// FUNCTION LOAD took it.
func measurePieces(ctx context.Context, rc *redis.Client, cc *bench.CommandCounter, code string, rounds int) error {
	helpers, _, ok := strings.Cut(code, "\nredis.register_function(")
	if !ok {
		return fmt.Errorf("the library registers no function")
	}
	_, helpers, _ = strings.Cut(helpers, "\n") // its "#!lua name=" line
	var b strings.Builder
	b.WriteString("#!lua name=scriptcost_pieces\n" + helpers + "\n")
	all := append([]piece{{"", ""}}, pieces...) // function 0: the empty loop
	for i, p := range all {
		fmt.Fprintf(&b, `redis.register_function('scriptcost_piece%d', function(KEYS, ARGV)
local V = valueOf('1', ARGV[4], '0', holderOf(ARGV[6], ARGV[1]))
local T = redis.call('TIME')
local NOW = T[1] * 1000000 + T[2]
for _ = 1, %d do %s end
return 1
end)
`, i, piecesLoops, p.lua)
	}
	if err := rc.FunctionLoadReplace(ctx, b.String()).Err(); err != nil {
		return fmt.Errorf("loading the pieces: %w", err)
	}
	defer rc.FunctionDelete(context.WithoutCancel(ctx), "scriptcost_pieces")
	const owner, nonce = "owner-0123456789abcdefgh", "nonce-0123456789abcdefgh"
	costs := make([][]float64, len(all)) // µs per FCALL
	for range rounds {
		for i := range all {
			before, err := cc.Snapshot(ctx)
			if err != nil {
				return err
			}
			args := []any{"fcall", fmt.Sprintf("scriptcost_piece%d", i), 1, "{scriptcost}", owner, 10000, 1, time.Now().UnixMicro(), 0, nonce}
			if err := rc.Do(ctx, args...).Err(); err != nil {
				return fmt.Errorf("piece %q: %w", all[i].name, err)
			}
			after, err := cc.Snapshot(ctx)
			if err != nil {
				return err
			}
			costs[i] = append(costs[i], float64(cc.Diff(before, after).Usec["fcall"]))
		}
	}
	empty := median(costs[0], func(v float64) float64 { return v })
	fmt.Printf("server time per run of a piece of the scripts in ns, %d runs per FCALL less an empty loop's %.0f ns, median of %d rounds:\n",
		piecesLoops, empty*1000/piecesLoops, rounds)
	for i, p := range all[1:] {
		us := median(costs[i+1], func(v float64) float64 { return v })
		fmt.Printf("  %-40s %6.0f\n", p.name, (us-empty)*1000/piecesLoops)
	}
	return nil
}
