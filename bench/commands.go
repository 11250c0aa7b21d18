package bench

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandCounter counts the commands masters execute, from INFO. Its admin
// clients must not be the ones under measurement. Not safe for concurrent
// use.
type CommandCounter struct {
	admins   []*redis.Client
	overhead int64 // commands a Snapshot itself adds to the next one
}

// Commands is what one or more masters executed between two snapshots.
type Commands struct {
	// Total counts the commands clients sent (INFO stats
	// total_commands_processed); commands run inside Lua scripts are not
	// included.
	Total int64
	// ByName counts per command from INFO commandstats. It includes the
	// commands scripts ran (a SET inside EVALSHA counts as both).
	ByName map[string]int64
	// Usec is the time the servers spent executing each command, in µs,
	// from INFO commandstats (usec=N): a script's includes the commands it
	// ran, and no time reading the command or writing its reply.
	Usec map[string]int64
	// CPU is the CPU time the servers used (INFO cpu used_cpu_user +
	// used_cpu_sys; the main thread and its helpers).
	CPU time.Duration
}

// Snapshot is the counters of every master at one moment.
type Snapshot []Commands

// infoTimeout bounds one INFO call.
const infoTimeout = 2 * time.Second

// NewCommandCounter returns a counter over the masters reached by admins
// (one per master). It calibrates how many commands a snapshot itself
// costs, so that Diff reports only the workload's.
func NewCommandCounter(ctx context.Context, admins []*redis.Client) (*CommandCounter, error) {
	c := &CommandCounter{admins: admins}
	a, err := c.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	b, err := c.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c.overhead = a.diffTotal(b) / int64(len(admins))
	return c, nil
}

// Prefix returns a counter over the first n of c's masters.
func (c *CommandCounter) Prefix(n int) *CommandCounter {
	return &CommandCounter{admins: c.admins[:n], overhead: c.overhead}
}

// Snapshot reads the counters of every master, one after the other.
func (c *CommandCounter) Snapshot(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	s := make(Snapshot, len(c.admins))
	for i, a := range c.admins {
		text, err := a.Info(ctx, "stats", "commandstats", "cpu").Result()
		if err != nil {
			return nil, fmt.Errorf("master %d: INFO: %w", i, err)
		}
		if s[i], err = parseInfo(text); err != nil {
			return nil, fmt.Errorf("master %d: %w", i, err)
		}
	}
	return s, nil
}

// Diff returns what all masters executed from before to after, without the
// snapshots' own INFO commands.
func (c *CommandCounter) Diff(before, after Snapshot) Commands {
	d := Commands{Total: before.diffTotal(after) - c.overhead*int64(len(before)), ByName: map[string]int64{}, Usec: map[string]int64{}}
	for i := range before {
		d.CPU += after[i].CPU - before[i].CPU
		for name, n := range after[i].ByName {
			if name == "info" {
				continue
			}
			if v := n - before[i].ByName[name]; v != 0 {
				d.ByName[name] += v
				d.Usec[name] += after[i].Usec[name] - before[i].Usec[name]
			}
		}
	}
	return d
}

func (s Snapshot) diffTotal(after Snapshot) int64 {
	var t int64
	for i := range s {
		t += after[i].Total - s[i].Total
	}
	return t
}

// parseInfo reads total_commands_processed and cmdstat_<name>:calls=N,usec=M.
func parseInfo(text string) (Commands, error) {
	c := Commands{Total: -1, ByName: map[string]int64{}, Usec: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return c, fmt.Errorf("INFO: %q: %w", line, err)
			}
			c.CPU += time.Duration(sec * float64(time.Second))
			continue
		}
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, fmt.Errorf("INFO: %q: %w", line, err)
			}
			c.Total = n
			continue
		}
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return c, fmt.Errorf("INFO: %q: no colon", line)
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, fmt.Errorf("INFO: %q: %w", line, err)
			}
			if k == "calls" {
				c.ByName[name] = n
			} else {
				c.Usec[name] = n
			}
		}
	}
	if c.Total < 0 {
		return c, fmt.Errorf("INFO: no total_commands_processed")
	}
	return c, nil
}

// Per returns c divided by n, as "name=x.xx" pairs sorted by name.
func (c Commands) Per(n int64) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	for i, name := range slices.Sorted(maps.Keys(c.ByName)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.2f", name, float64(c.ByName[name])/float64(n))
	}
	return b.String()
}

// Percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, sorting ds in place; 0 for no samples.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(float64(len(ds))*p/100-1e-9)) - 1
	return ds[min(max(rank, 0), len(ds)-1)]
}
