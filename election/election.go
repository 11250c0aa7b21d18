// Package election elects one leader among candidates on a
// redlock.Client, with no consensus cluster to run. A candidate
// campaigns with a value (its address, say) and blocks until it leads.
// Its Leadership has an epoch, larger than every earlier leader's, to
// fence the resources it writes to. Leader reads the current leader
// from a quorum of masters; Observe follows every change of leader or
// value, in epoch order; Run keeps a function running on whichever
// candidate leads.
//
// The election named n is the exclusive lock named n, auto-renewed while
// its holder leads, and a short history of what its leaders proclaimed.
// An epoch is the lock's fencing token. docs/design/election.md tells
// how the history keeps observers from missing a leader.
package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/clip"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

var (
	// ErrNoLeader means that no candidate leads the election: none won
	// yet, the last leader resigned or lost its lock, or a winner has not
	// recorded its value yet.
	ErrNoLeader = errors.New("election: no leader")

	// ErrLost is Leadership.Err once the leadership was lost: its lock
	// was lost, or its validity was about to run out before a renewal
	// moved it. Another candidate may lead now.
	ErrLost = errors.New("election: leadership lost")

	// ErrResigned is Leadership.Err after Resign.
	ErrResigned = errors.New("election: resigned")
)

// elections is what package redlock lends this package.
var elections = link.GetElections[*redlock.Client, *redlock.Lock]()

// hooks is wake-on-release, which package redlock also lends.
var hooks = link.Get[*redlock.Client, *redlock.Lock]()

// Options configure an Election. The zero value of each field selects its
// default. New names the first invalid one.
type Options struct {
	// TTL is how long the leader's lock lives on the masters without
	// renewal. The leader renews it every third of it. A leader that
	// stops (a crash, a pause) is followed by the next one within about a
	// TTL. It must be longer than the client's MasterTimeout and its own
	// drift allowance, and with fencing at least 4*MasterTimeout.
	// Default: 10s.
	TTL time.Duration

	// MinRetryDelay and MaxRetryDelay bound the fallback timers of
	// Campaign and Observe, for releases and changes they did not hear
	// of (see mutex.Options). Defaults: 5ms and 200ms.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration
}

// History bounds: how many entries the masters keep, and for how many
// TTLs after the last one. An observer away for longer than that, or
// that many changes, reports the current leader without the ones between.
const (
	historyLen  = 128
	historyTTLs = 10
	readBatch   = 64 // entries per read of an observer
)

// Election is one election on a client. It is safe for concurrent use,
// and so are its Leaderships. Make one with New.
type Election struct {
	client *redlock.Client
	name   string
	opts   retry.Options // TTL and retry delays; AutoRenew set
	guard  time.Duration // a leadership ends that long before its lock's validity
}

// New returns the Election named name on client. It does no I/O. It
// returns an error wrapping redlock.ErrInvalidArgument for a nil or zero
// client, a client with Options.NoFencing (epochs are fencing tokens),
// an empty name, or an invalid option. A name may hold any character,
// '}' included: the lock's keys hash to one Redis Cluster slot either
// way (see redlock.Options.KeyPrefix). opts may be nil for the defaults.
func New(client *redlock.Client, name string, opts *Options) (*Election, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: election.New: nil *redlock.Client", redlock.ErrInvalidArgument)
	}
	if err := elections.Check(client); err != nil {
		return nil, fmt.Errorf("election.New: %w", err)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: election.New: empty name", redlock.ErrInvalidArgument)
	}
	if opts == nil {
		opts = &Options{}
	}
	o, err := retry.Options{TTL: opts.TTL, MinRetryDelay: opts.MinRetryDelay, MaxRetryDelay: opts.MaxRetryDelay}.Check(client, name, "election.Options")
	if err != nil {
		return nil, err
	}
	o.AutoRenew = true
	return &Election{client: client, name: name, opts: o, guard: o.TTL / 10}, nil
}

// Name returns the election's name.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// check returns an error if e was not made by New, or ctx is nil. op
// names the call.
func (e *Election) check(ctx context.Context, op string) error {
	if e == nil || e.client == nil {
		return fmt.Errorf("%w: %s: zero Election: use election.New", redlock.ErrInvalidArgument, op)
	}
	if ctx == nil {
		return fmt.Errorf("%w: %s %s: nil context", redlock.ErrInvalidArgument, op, clip.Quote(e.name))
	}
	return nil
}

// LeaderInfo is a leader as the masters tell it.
type LeaderInfo struct {
	// Vacant: no candidate leads. Observe reports it after a leader
	// resigned or lost its lock; Epoch is then that leader's.
	Vacant bool
	Epoch  uint64 // the leader's epoch: its fencing token
	Seq    uint64 // 0 for the value it won with, n for its n-th Proclaim
	Value  string
	// Until is when the leader's lock stops being safe, as of the read
	// that reported it; zero where Observe reports a past leader.
	Until time.Time
}

// Leader returns the current leader, read from every master at once. A
// quorum of them must hold the lock for one holder with one epoch. It
// returns an error wrapping ErrNoLeader where none does, and one
// wrapping redlock.ErrNoQuorum where too few masters answered to tell.
// The value is the latest proclaimed that the masters which answered
// hold: a Proclaim that failed may have reached them. Leader blocks for
// one read, at most the client's MasterTimeout.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.check(ctx, "Leader"); err != nil {
		return LeaderInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return LeaderInfo{}, fmt.Errorf("election %s: leader: %w", clip.Quote(e.name), err)
	}
	r := e.read(ctx, "", 0)
	if info, ok := r.leader(); ok {
		return info, nil
	}
	switch {
	case r.holder != nil:
		return LeaderInfo{}, fmt.Errorf("%w: election %s: the holder of epoch %d has not recorded a win, or resigned", ErrNoLeader, clip.Quote(e.name), r.holder.epoch)
	case r.vacant:
		return LeaderInfo{}, fmt.Errorf("%w: election %s", ErrNoLeader, clip.Quote(e.name))
	}
	return LeaderInfo{}, r.noQuorum(ctx, e.name)
}

// reading is an election as one read of every master found it.
type reading struct {
	answered int
	errs     []error
	quorum   int
	// holder is the holder a quorum of masters agree on, or nil.
	holder *holding
	// vacant: so many masters answered that no holder can have a quorum.
	vacant  bool
	entries []link.Entry // after the ID asked for, from every answer, in order
	// more: a master had more entries than a read returns. entries then
	// end where the shortest of those full answers ended.
	more  bool
	last  *link.Entry  // the latest of the masters' last entries
	lasts []link.Entry // every master's last entry
}

// holding is a lock held on a quorum of masters.
type holding struct {
	nonce string
	epoch uint64
	until time.Time
}

// read reads the election on every master: the entries after ID after
// ("" for none), at most count.
func (e *Election) read(ctx context.Context, after string, count int) *reading {
	v := elections.Read(ctx, e.client, e.name, after, count)
	r := &reading{quorum: e.client.Quorum()}
	type group struct {
		nonce string
		epoch uint64
		ttls  []time.Duration
	}
	groups := map[string]*group{}
	seen := map[string]bool{}
	var cut *link.Entry // the earliest end of a full answer
	for _, m := range v.Masters {
		if m.Err != nil {
			r.errs = append(r.errs, m.Err)
			continue
		}
		r.answered++
		// A holder is its Lock's nonce. Its token may be lower on a
		// master that its fence and record rounds missed: the epoch is
		// the largest among its masters.
		if h, ok := link.ParseHolder(m.Lock); ok && m.TTL > 0 {
			if token, err := strconv.ParseUint(h.Token, 10, 64); err == nil {
				g := groups[h.Nonce]
				if g == nil {
					g = &group{nonce: h.Nonce}
					groups[h.Nonce] = g
				}
				g.epoch = max(g.epoch, token)
				g.ttls = append(g.ttls, m.TTL)
			}
		}
		if n := len(m.Entries); count > 0 && n >= count {
			// Past its last entry this master's answer says nothing:
			// another master's later entries would skip its next ones.
			if end := m.Entries[n-1]; cut == nil || end.Before(*cut) {
				cut = &end
			}
		}
		for _, en := range m.Entries {
			if !seen[en.ID()] {
				seen[en.ID()] = true
				r.entries = append(r.entries, en)
			}
		}
		if m.Last != nil {
			r.lasts = append(r.lasts, *m.Last)
			if r.last == nil || r.last.Before(*m.Last) {
				r.last = m.Last
			}
		}
	}
	slices.SortFunc(r.entries, func(a, b link.Entry) int {
		switch {
		case a.Before(b):
			return -1
		case b.Before(a):
			return 1
		}
		return 0
	})
	if cut != nil {
		r.more = true
		r.entries = slices.DeleteFunc(r.entries, func(en link.Entry) bool { return cut.Before(en) })
	}
	most := 0
	for _, g := range groups {
		most = max(most, len(g.ttls))
		if len(g.ttls) < r.quorum {
			continue
		}
		// The quorum holds it until the quorum-th longest TTL runs out.
		slices.SortFunc(g.ttls, func(a, b time.Duration) int { return int(b - a) })
		r.holder = &holding{nonce: g.nonce, epoch: g.epoch, until: elections.Deadline(e.client, v.Start, g.ttls[r.quorum-1])}
	}
	silent := len(v.Masters) - r.answered
	r.vacant = r.holder == nil && most+silent < r.quorum
	return r
}

// latest returns the latest entry of epoch among the masters' last
// entries and the entries read, or nil.
func (r *reading) latest(epoch uint64) *link.Entry {
	var best *link.Entry
	for _, list := range [][]link.Entry{r.lasts, r.entries} {
		for i := range list {
			if en := &list[i]; en.Epoch == epoch && (best == nil || best.Before(*en)) {
				best = en
			}
		}
	}
	return best
}

// leader returns the leader the reading shows: a holder on a quorum
// whose win is recorded, and who has not resigned.
func (r *reading) leader() (LeaderInfo, bool) {
	if r.holder == nil {
		return LeaderInfo{}, false
	}
	en := r.latest(r.holder.epoch)
	if en == nil || en.Resigned {
		return LeaderInfo{}, false
	}
	return LeaderInfo{Epoch: en.Epoch, Seq: en.Seq, Value: en.Value, Until: r.holder.until}, true
}

// noQuorum is the error of a read that too few masters answered.
func (r *reading) noQuorum(ctx context.Context, name string) error {
	err := fmt.Errorf("%w: election %s: %d of %d masters answered, %d needed: %w",
		redlock.ErrNoQuorum, clip.Quote(name), r.answered, r.answered+len(r.errs), r.quorum, errors.Join(r.errs...))
	if end := ctx.Err(); end != nil && !errors.Is(err, end) {
		err = fmt.Errorf("%w: %w", err, end)
	}
	return err
}
