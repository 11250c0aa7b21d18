package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/pipeline"
	"github.com/go-redlock/redlock/internal/quorum"
)

// The scripts of package election (see "@election" in scripts.lua).
var (
	electRecordScript = scripts.get("elect_record")
	electResignScript = scripts.get("elect_resign")
	electReadScript   = scripts.get("elect_read")
)

// elections is what package election reaches through internal/link.
type elections struct{}

func init() { link.RegisterElections[*Client, *Lock](elections{}) }

// historyKey is the history of the election whose lock's main key is k.
// It ends with a suffix without '}', as lockKey's keys must.
func historyKey(k string) string { return k + ":eh" }

func (elections) Check(c *Client) error {
	if err := c.check(); err != nil {
		return err
	}
	if !c.fencing {
		return invalidf("Options.NoFencing: an election's epochs are fencing tokens")
	}
	return nil
}

func (elections) Deadline(c *Client, start time.Time, ttl time.Duration) time.Time {
	return c.deadline(start, ttl)
}

// Append runs an election's record round (see link.Elections). It holds
// l.mu across the round, so that it runs between the Lock's renewals and
// before its release.
func (elections) Append(ctx context.Context, l *Lock, e link.Entry, keep time.Duration, limit int) error {
	if err := l.check(); err != nil {
		return err
	}
	name := "proclaim"
	if e.Resigned {
		name = "resign"
	}
	if err := checkContext(ctx, name); err != nil {
		return err
	}
	if l.mode != exclusiveMode {
		return invalidf("%s %s: an election's lock is an exclusive lock", name, quote(l.key))
	}
	err := l.appendEntry(ctx, name, e, keep, limit)
	l.report() // the loss the round may have found
	return err
}

// appendEntry is Append under l.mu. The caller reports the EventLost it
// may queue.
func (l *Lock) appendEntry(ctx context.Context, name string, e link.Entry, keep time.Duration, limit int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkHeld(name); err != nil {
		return err
	}
	k := l.keys.Names[0]
	args := []any{l.value, l.nonce, strconv.FormatUint(e.Epoch, 10), strconv.FormatUint(e.Seq, 10), e.Value, keep.Milliseconds(), limit}
	s := electRecordScript
	if e.Resigned {
		s = electResignScript
	}
	_, err := l.client.do(ctx, &op{name: name, key: l.key, sentinel: ErrNotHeld, Spec: quorum.Spec{
		Script: s,
		Keys:   pipeline.NewKeys(k, historyKey(k)),
		Args:   args,
		// A resignation goes out even where ctx ended: observers learn
		// of it at once, not when they next poll.
		Send: quorum.Send{Must: e.Resigned},
	}})
	if err != nil {
		l.loseIfRefused(err)
	}
	return err
}

// Read reads an election on every master (see link.Elections). A read
// changes nothing, and carries data that a round's verdicts cannot, so it
// goes to each master's client directly, outside the engine. A master
// known to be a replica, or the same server as an earlier one, gets that
// as its error: its answer must not count.
func (elections) Read(ctx context.Context, c *Client, name, after string, count int) link.View {
	v := link.View{Start: time.Now()}
	if err := c.check(); err != nil {
		return v
	}
	v.Masters = make([]link.MasterView, len(c.nodes))
	fail := func(err error) link.View {
		for i := range v.Masters {
			v.Masters[i].Err = err
		}
		return v
	}
	if err := checkContext(ctx, "read election"); err != nil {
		return fail(err)
	}
	if !c.gate.enter(len(c.nodes)) {
		return fail(errClosedOp("read election", name))
	}
	defer c.gate.leave(len(c.nodes))
	k := lockKey(c.prefix + name)
	keys := []string{k, historyKey(k)}
	var wg sync.WaitGroup
	for i := range c.nodes {
		nd := &c.nodes[i]
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, c.masterTimeout)
			defer cancel()
			reply, err := electReadScript.Run(rctx, nd.client, keys, after, count).Result()
			m, err := parseElectionRead(reply, closedError(err))
			if err != nil {
				m = link.MasterView{Err: fmt.Errorf("%s: %w", nd.name, err)}
			}
			v.Masters[i] = m
		})
	}
	wg.Wait()
	servers := map[string]int{}
	for i := range c.nodes {
		id := c.nodes[i].id
		if id == nil || v.Masters[i].Err != nil {
			continue
		}
		server, verdict, known := id.Known()
		switch j, dup := servers[server]; {
		case !known || server == "":
		case verdict != nil:
			v.Masters[i] = link.MasterView{Err: verdict}
		case dup:
			v.Masters[i] = link.MasterView{Err: c.sameServer(j, i, server)}
		default:
			servers[server] = i
		}
	}
	return v
}

// errElectionReply is a read's error where a master's reply is not what
// elect_read replies.
var errElectionReply = errors.New("unexpected reply to an election read")

// parseElectionRead reads elect_read's reply.
func parseElectionRead(reply any, err error) (link.MasterView, error) {
	if err != nil {
		return link.MasterView{}, err
	}
	a, ok := reply.([]any)
	if !ok || len(a) != 4 {
		return link.MasterView{}, errElectionReply
	}
	var m link.MasterView
	if a[0] != nil {
		if m.Lock, ok = a[0].(string); !ok {
			return m, errElectionReply
		}
	}
	ttl, ok := a[1].(int64)
	if !ok {
		return m, errElectionReply
	}
	m.TTL = time.Duration(ttl) * time.Millisecond
	entries, ok := a[2].([]any)
	if !ok {
		return m, errElectionReply
	}
	for _, x := range entries {
		e, err := parseEntry(x)
		if err != nil {
			return m, err
		}
		m.Entries = append(m.Entries, e)
	}
	if a[3] != nil {
		e, err := parseEntry(a[3])
		if err != nil {
			return m, err
		}
		m.Last = &e
	}
	return m, nil
}

// parseEntry reads one stream entry: [id, [field, value]].
func parseEntry(x any) (link.Entry, error) {
	var e link.Entry
	a, ok := x.([]any)
	if !ok || len(a) != 2 {
		return e, errElectionReply
	}
	id, _ := a[0].(string)
	fv, _ := a[1].([]any)
	epoch, seq, found := cutID(id)
	if !found || len(fv) != 2 {
		return e, fmt.Errorf("%w: entry %q", errElectionReply, id)
	}
	field, _ := fv[0].(string)
	e.Value, _ = fv[1].(string)
	e.Epoch, e.Seq = epoch, seq
	switch field {
	case "v":
	case "r":
		e.Resigned = true
	default:
		return e, fmt.Errorf("%w: entry %q has field %q", errElectionReply, id, field)
	}
	return e, nil
}

// cutID splits a stream ID "epoch-seq".
func cutID(id string) (epoch, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	epoch, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return epoch, seq, err1 == nil && err2 == nil
}
