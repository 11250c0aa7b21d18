package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// EnvMasters is the default of -masters for the operations commands.
const EnvMasters = "REDLOCK_MASTERS"

const opsUsage = `usage: redlock inspect|watch|release|verify [flags] [KEY]

  inspect KEY          per master: owner, holds, TTL left, token, fencing counter,
                       readers, write-wait marker; and the quorum's view
  watch KEY            inspect again every -interval until interrupted (or -count times)
  release -force KEY   delete the lock on every master and wake its waiters; the
                       fencing counter stays, so later tokens are still larger.
                       Stop the holder first: until it learns at its next extend,
                       it still counts on its validity (and a renewal in flight
                       may set the lock again); waiters in the holder's own
                       process wait for its Lock to end there
  verify               the masters answer, are masters, are distinct servers, and
                       their clocks agree within the drift allowance of -ttl (a
                       bound on offsets, stricter than Redlock's, which is on rates)

Exit status: 0 on success, 1 if a master failed or verify found a problem, 2 on a
usage error.
Flags:`

// opsCmd is one run of an operations command.
type opsCmd struct {
	name     string
	masters  []string
	prefix   string
	json     bool
	timeout  time.Duration
	interval time.Duration
	count    int
	force    bool
	ttl      time.Duration
	drift    float64
	key      string

	clients []*redis.Client
	stdout  io.Writer
}

// opsCLI runs the operations command args[0] with the flags in args[1:]
// and returns the exit status. watch blocks until ctx ends or -count
// refreshes are done; the others until every master answered or -timeout
// passed.
func opsCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &opsCmd{name: args[0], stdout: stdout}
	fs := newFlags(c.name, opsUsage, stderr)
	masters := mastersFlags(fs, &c.prefix, ", in the order the clients use")
	fs.BoolVar(&c.json, "json", false, "print JSON (watch: one object per line)")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "bound of the calls to each master")
	fs.DurationVar(&c.interval, "interval", 500*time.Millisecond, "watch: time between refreshes")
	fs.IntVar(&c.count, "count", 0, "watch: stop after this many refreshes (0: until interrupted)")
	fs.BoolVar(&c.force, "force", false, "release: required; the lock is deleted whoever holds it")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "verify: the shortest TTL the clients use")
	fs.Float64Var(&c.drift, "drift", 0.01, "verify: the clients' redlock.Options.DriftFactor")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "redlock %s: %s\n", c.name, fmt.Sprintf(format, a...))
		return 2
	}
	c.masters = masters()
	wantKey := c.name != "verify"
	switch {
	case len(c.masters) == 0:
		return usage(noMasters)
	case wantKey && len(pos) != 1:
		return usage("want one KEY, got %d arguments", len(pos))
	case !wantKey && len(pos) != 0:
		return usage("unexpected arguments %q", pos)
	case c.name == "release" && !c.force:
		return usage("release deletes the lock whoever holds it: add -force")
	case c.timeout <= 0 || c.interval <= 0:
		return usage("-timeout %v and -interval %v must be positive", c.timeout, c.interval)
	case c.count < 0:
		return usage("-count %d must not be negative", c.count)
	case c.ttl <= 0 || c.drift < 0 || c.drift >= 1:
		return usage("-ttl %v must be positive and -drift %v in [0, 1)", c.ttl, c.drift)
	}
	if wantKey {
		c.key = pos[0]
	}
	for _, addr := range c.masters {
		c.clients = append(c.clients, redis.NewClient(harness.MasterOptions(addr)))
	}
	defer func() {
		for _, cl := range c.clients {
			_ = cl.Close()
		}
	}()

	switch c.name {
	case "inspect":
		err = c.print(inspect(ctx, c.clients, c.masters, c.prefix, c.key, c.timeout))
	case "watch":
		err = c.watch(ctx)
	case "release":
		err = c.release(ctx)
	case "verify":
		err = c.verify(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock %s: %v\n", c.name, err)
		return 1
	}
	return 0
}

// print writes v as text or JSON, and returns an error if a master did not
// answer.
func (c *opsCmd) print(v *LockView) error {
	if c.json {
		b, _ := json.Marshal(v)
		fmt.Fprintf(c.stdout, "%s\n", b)
	} else {
		printLock(c.stdout, v)
	}
	n := 0
	for _, m := range v.Masters {
		if m.Error != "" {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d masters did not answer", n, len(v.Masters))
	}
	return nil
}

// watch inspects every interval until ctx ends or count refreshes are
// done. A master that does not answer is shown; if one did not in the last
// refresh, watch returns an error.
func (c *opsCmd) watch(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	var last error
	for n := 1; ; n++ {
		v := inspect(ctx, c.clients, c.masters, c.prefix, c.key, c.timeout)
		if ctx.Err() != nil {
			return last // interrupted during the refresh: nothing new to show
		}
		if last = c.print(v); n == c.count {
			return last
		}
		if !c.json {
			fmt.Fprintln(c.stdout)
		}
		select {
		case <-ctx.Done():
			return last
		case <-t.C:
		}
	}
}

// ReleaseResult is what release did on one master.
type ReleaseResult struct {
	Master  string `json:"master"`
	Deleted int64  `json:"deleted"` // keys freed: the lock, readers, write-wait marker
	Error   string `json:"error,omitempty"`
}

// forceRelease frees the lock on one master: it deletes the readers (and
// their mark, K:rh) and the write-wait marker, and replaces a holder's
// value with the free value that keeps its fencing counter (see
// scripts.lua), then publishes a release so that waiters retry at once. It
// replies the number of keys it freed, the mark not counted.
var forceRelease = redis.NewScript(`
local n = redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('DEL', KEYS[1] .. ':rh')
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or not v:find('^f:') then
  local token = type(v) == 'string' and v:match('^%d+:(%d+):')
  if token and token ~= '0' then
    redis.call('SET', KEYS[1], 'f:' .. token, 'KEEPTTL')
    n = n + 1
  else
    n = n + redis.call('DEL', KEYS[1])
  end
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return n
`)

// release frees the lock on every master, keeping its fencing counter.
func (c *opsCmd) release(ctx context.Context) error {
	keys := hooks.LockKeys(c.prefix, c.key, true)
	nonce := "force-" + rand.Text()
	res := make([]ReleaseResult, len(c.clients))
	var g errgroup.Group
	for i, cl := range c.clients {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			res[i].Master = c.masters[i]
			n, err := forceRelease.Run(ctx, cl, keys, nonce).Int64()
			if err != nil {
				res[i].Error = err.Error()
			}
			res[i].Deleted = n
			return nil
		})
	}
	_ = g.Wait()
	failed := 0
	for _, r := range res {
		if r.Error != "" {
			failed++
		}
	}
	if c.json {
		b, _ := json.Marshal(map[string]any{"key": c.key, "masters": res})
		fmt.Fprintf(c.stdout, "%s\n", b)
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MASTER\tDELETED\tERROR")
		for _, r := range res {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Master, r.Deleted, dash(r.Error))
		}
		_ = tw.Flush()
		fmt.Fprintf(c.stdout, "released %q on %d of %d masters\n", c.key, len(res)-failed, len(res))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d masters failed; run it again when they answer", failed, len(res))
	}
	return nil
}

// ClockView is one master's clock against this machine's.
type ClockView struct {
	Master   string `json:"master"`
	OffsetUs int64  `json:"offset_us"` // master's TIME minus the local clock at the middle of the call
	RTTUs    int64  `json:"rtt_us"`    // the call's round trip: the offset's uncertainty is half of it
	Error    string `json:"error,omitempty"`
}

// VerifyResult is what verify found.
type VerifyResult struct {
	OK       bool        `json:"ok"`
	Problems []string    `json:"problems,omitempty"`
	Clocks   []ClockView `json:"clocks"`
	// SpreadUs is how far apart the masters' clocks can be, each offset
	// taken with its uncertainty; AllowanceUs is TTL*DriftFactor + 2ms for
	// -ttl.
	SpreadUs    int64 `json:"spread_us"`
	AllowanceUs int64 `json:"allowance_us"`
}

// verify checks the masters with redlock.Client.Verify and compares their
// clocks.
func (c *opsCmd) verify(ctx context.Context) error {
	r := VerifyResult{Clocks: make([]ClockView, len(c.clients))}
	rl, err := redlock.New(c.clients, &redlock.Options{MasterTimeout: c.timeout / 4})
	if err != nil { // a master given twice
		r.Problems = append(r.Problems, err.Error())
	} else {
		if err := rl.Verify(ctx); err != nil {
			r.Problems = append(r.Problems, splitJoined(err)...)
		}
		if err := rl.Close(); err != nil {
			return err
		}
	}

	var g errgroup.Group
	for i, cl := range c.clients {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			cv := &r.Clocks[i]
			cv.Master = c.masters[i]
			before := time.Now()
			t, err := cl.Time(ctx).Result()
			after := time.Now()
			if err != nil {
				cv.Error = err.Error()
				return nil
			}
			rtt := after.Sub(before)
			cv.RTTUs = rtt.Microseconds()
			cv.OffsetUs = t.Sub(before.Add(rtt / 2)).Microseconds()
			return nil
		})
	}
	_ = g.Wait()
	// Each offset is known within half its round trip: the spread is the
	// widest the true offsets can be apart.
	var lo, hi int64
	first := true
	for i, cv := range r.Clocks {
		if cv.Error != "" {
			// A master that Verify found unreachable is reported once.
			if !reported(r.Problems, i) {
				r.Problems = append(r.Problems, fmt.Sprintf("master %s: TIME: %s", cv.Master, cv.Error))
			}
			continue
		}
		low, high := cv.OffsetUs-cv.RTTUs/2, cv.OffsetUs+cv.RTTUs/2
		if first {
			lo, hi, first = low, high, false
		}
		lo, hi = min(lo, low), max(hi, high)
	}
	r.SpreadUs = hi - lo
	r.AllowanceUs = (time.Duration(float64(c.ttl)*c.drift) + 2*time.Millisecond).Microseconds()
	if r.SpreadUs > r.AllowanceUs {
		r.Problems = append(r.Problems, fmt.Sprintf("clocks differ by up to %v, more than the drift allowance %v (TTL %v × %v + 2ms)",
			time.Duration(r.SpreadUs)*time.Microsecond, time.Duration(r.AllowanceUs)*time.Microsecond, c.ttl, c.drift))
	}
	r.OK = len(r.Problems) == 0

	if c.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(c.stdout, "%s\n", b)
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MASTER\tCLOCK OFFSET\tRTT")
		for _, cv := range r.Clocks {
			if cv.Error != "" {
				fmt.Fprintf(tw, "%s\terror: %s\t\n", cv.Master, cv.Error)
				continue
			}
			fmt.Fprintf(tw, "%s\t%v\t%v\n", cv.Master, time.Duration(cv.OffsetUs)*time.Microsecond, time.Duration(cv.RTTUs)*time.Microsecond)
		}
		_ = tw.Flush()
		fmt.Fprintf(c.stdout, "clocks: spread %v, allowance %v\n", time.Duration(r.SpreadUs)*time.Microsecond, time.Duration(r.AllowanceUs)*time.Microsecond)
		for _, p := range r.Problems {
			fmt.Fprintf(c.stdout, "problem: %s\n", p)
		}
		if r.OK {
			fmt.Fprintf(c.stdout, "ok: %d masters answer, are masters, are distinct servers, and their clocks agree\n", len(c.clients))
		}
	}
	if !r.OK {
		return errors.New(plural(len(r.Problems), "problem"))
	}
	return nil
}

// reported reports whether one of problems, from Verify, is about master
// i: Verify's read "redlock: master <i> (<name>): <problem>".
func reported(problems []string, i int) bool {
	prefix := fmt.Sprintf("redlock: master %d (", i)
	return slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, prefix) })
}

// plural returns "1 problem", "2 problems".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// splitJoined returns the messages of the errors joined in err.
func splitJoined(err error) []string {
	var j interface{ Unwrap() []error }
	if !errors.As(err, &j) {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range j.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}
