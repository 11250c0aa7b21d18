package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/internal/harness"
)

const electUsage = `usage: redlock leader|observe -masters host:port,... [flags] NAME

  leader NAME    the election's current leader: its value, epoch, sequence
                 (0: the value it won with, n: its n-th Proclaim) and until
                 when it leads unless renewed; or "no leader"
  observe NAME   a line for each change of leader or value, in epoch order,
                 "vacant" when a leader resigned or lost its lead, until
                 interrupted

Exit status: 0 on success; 3 (leader) if the election has no leader; 1 if
too few masters answered to tell; 2 on a usage error.
Flags:`

// exitNoLeader is redlock leader's exit status where no candidate leads.
const exitNoLeader = 3

// electCmd is one run of redlock leader or redlock observe.
type electCmd struct {
	name          string // the command
	masters       []string
	prefix        string
	ttl           time.Duration
	masterTimeout time.Duration
	json          bool
	election      string
	stdout        io.Writer
}

// electCLI runs redlock leader or observe (args[0]) and returns the exit
// status. leader blocks for one read of every master; observe until ctx
// ends.
func electCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &electCmd{name: args[0], stdout: stdout}
	fs := newFlags(c.name, electUsage, stderr)
	masters := mastersFlags(fs, &c.prefix, "")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "observe: the election's TTL; the history is read again every quarter of it, should a change go unheard")
	fs.DurationVar(&c.masterTimeout, "master-timeout", redlock.DefaultMasterTimeout, "redlock.Options.MasterTimeout")
	fs.BoolVar(&c.json, "json", false, "print JSON (observe: one object per line)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "redlock %s: %s\n", c.name, fmt.Sprintf(format, a...))
		fs.Usage()
		return 2
	}
	c.masters = masters()
	switch {
	case len(c.masters) == 0:
		return usage(noMasters)
	case len(pos) != 1:
		return usage("want one NAME, got %d arguments", len(pos))
	}
	c.election = pos[0]
	client, closeClient, err := newClient(c.masters, c.prefix, c.masterTimeout)
	if err != nil {
		return usage("%v", err)
	}
	defer closeClient()
	e, err := election.New(client, c.election, &election.Options{TTL: c.ttl})
	if err != nil {
		return usage("%v", err)
	}
	if c.name == "observe" {
		c.observe(ctx, e)
		return 0
	}
	info, err := e.Leader(ctx)
	switch {
	case errors.Is(err, election.ErrNoLeader):
		c.print(election.LeaderInfo{Vacant: true}, time.Now())
		return exitNoLeader
	case err != nil:
		fmt.Fprintf(stderr, "redlock leader: %v\n", err)
		return 1
	}
	c.print(info, time.Now())
	return 0
}

// newClient returns a client on masters, and what closes it and them.
func newClient(masters []string, prefix string, masterTimeout time.Duration) (*redlock.Client, func(), error) {
	clients := make([]*redis.Client, len(masters))
	for i, addr := range masters {
		clients[i] = redis.NewClient(harness.MasterOptions(addr))
	}
	closeRedis := func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}
	client, err := redlock.New(clients, &redlock.Options{MasterTimeout: masterTimeout, KeyPrefix: prefix})
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	return client, func() { _ = client.Close(); closeRedis() }, nil
}

// observe prints each report of e's observer until ctx ends.
func (c *electCmd) observe(ctx context.Context, e *election.Election) {
	for info := range e.Observe(ctx) {
		c.print(info, time.Now())
	}
}

// LeaderView is a leader, or its absence, as leader and observe print it
// with -json.
type LeaderView struct {
	Time   time.Time  `json:"time"`
	Vacant bool       `json:"vacant"`
	Epoch  uint64     `json:"epoch,omitempty"`
	Seq    uint64     `json:"seq"`
	Value  string     `json:"value"`
	Until  *time.Time `json:"until,omitempty"`
}

// print writes info as read at now: one line of text or JSON.
func (c *electCmd) print(info election.LeaderInfo, now time.Time) {
	if c.json {
		v := LeaderView{Time: now, Vacant: info.Vacant, Epoch: info.Epoch, Seq: info.Seq, Value: info.Value}
		if !info.Until.IsZero() {
			v.Until = &info.Until
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(c.stdout, "%s\n", b)
		return
	}
	var line string
	switch {
	case info.Vacant && info.Epoch == 0:
		line = "no leader"
	case info.Vacant:
		line = fmt.Sprintf("no leader (epoch %d ended)", info.Epoch)
	default:
		line = fmt.Sprintf("leader %q epoch %d seq %d", info.Value, info.Epoch, info.Seq)
		if !info.Until.IsZero() {
			line += fmt.Sprintf(" until %s (%v left)", info.Until.Format(time.RFC3339Nano), info.Until.Sub(now).Round(time.Millisecond))
		}
	}
	if c.name == "observe" {
		line = now.Format(time.RFC3339Nano) + " " + line
	}
	fmt.Fprintln(c.stdout, line)
}

// electHolder returns the holder of -elect: it campaigns with -value,
// runs the child while it leads, with its epoch as the fencing token,
// and resigns when the child exits. After a loss of the lead, which
// stopped the child, it campaigns again, until ctx ends.
func (c *runCmd) electHolder(client *redlock.Client) (holder, error) {
	e, err := election.New(client, c.elect, &election.Options{TTL: c.ttl})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, child func(context.Context, uint64, func() time.Time) error) error {
		for {
			l, err := e.Campaign(ctx, c.value)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stderr, "redlock run: leading %q at epoch %d\n", c.elect, l.Epoch())
			cctx, cancel := context.WithCancelCause(ctx)
			stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
			err = child(cctx, l.Epoch(), l.Until)
			stop()
			// The child stopped for the lost lead, not on its own nor
			// for ctx: lead again once it can.
			lost := cctx.Err() != nil && ctx.Err() == nil
			cancel(nil)
			rerr := l.Resign(context.WithoutCancel(ctx))
			if !lost {
				return errors.Join(err, rerr)
			}
			fmt.Fprintf(c.stderr, "redlock run: %v; campaigning again\n", l.Err())
		}
	}, nil
}
