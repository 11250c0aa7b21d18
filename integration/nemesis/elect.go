package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
)

// Observers is how many observers (election.Observe) an election run has.
const Observers = 2

// untilEvery is how often a term's watcher reads Leadership.Until. A
// renewal moves it by a third of the TTL, far more than this.
const untilEvery = 5 * time.Millisecond

// newElection returns the election of a candidate or observer on c.
func (c *Config) newElection(client *redlock.Client) (*election.Election, error) {
	return election.New(client, c.Key, &election.Options{
		TTL:           c.TTL,
		MinRetryDelay: c.MinRetryDelay,
		MaxRetryDelay: c.MaxRetryDelay,
	})
}

// validity is when a leadership's lock stops being valid, given its
// Until: a tenth of the TTL later, as Leadership.Until's doc says.
func (c *Config) validity(until time.Duration) time.Duration { return until + c.TTL/10 }

// campaign is one term of a candidate: Campaign, then a section on the
// resource fenced by the epoch, then Resign. It returns an error only if
// the run cannot go on.
func (w *worker) campaign(ctx context.Context, n int) error {
	rec := w.env.Rec
	long := w.cfg.LongEvery > 0 && n%w.cfg.LongEvery == w.cfg.LongEvery-1
	value := fmt.Sprintf("c%d-%d", w.id, n)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.LockTimeout)
	l, err := w.elect.Campaign(cctx, value)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil // the load ended during the call
	}
	w.lockCalls++
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrNotObtained) {
			return fmt.Errorf("client %d: campaign: %w", w.id, err)
		}
		w.lockFails++
		return nil
	}
	t := Term{Section: Section{Client: w.id, Enter: rec.Now(), Value: value}, Epoch: l.Epoch()}
	watched := make(chan struct{})
	// Written by the watcher, read once watched is closed. Resign's
	// release clears Until, after Done closed: a sample is kept only if
	// Done was still open after it.
	until := l.Until()
	var doneAt time.Duration
	go func() {
		defer close(watched)
		tick := time.NewTicker(untilEvery)
		defer tick.Stop()
		for {
			u := l.Until()
			select {
			case <-l.Done():
			default:
				if u.After(until) {
					until = u
				}
			}
			select {
			case <-l.Done():
				doneAt = rec.Now()
				return
			case <-tick.C:
			}
		}
	}()
	done := make(chan struct{})
	w.env.entered(Entered{Client: w.id, Long: long, Value: value, At: t.Enter, Done: done})
	if w.cfg.Fencing != nil {
		t.Fence = Fence{Token: t.Epoch, Valid: t.Epoch != 0}
		w.fenced = w.fenced || t.Fence.Valid
	}
	w.lead(&t.Section, l, long)
	// The leader's view: it stops leading once it has seen Done closed,
	// or when it calls Resign.
	t.Exit = rec.Now()
	close(done)
	rctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	err = l.Resign(rctx)
	cancel()
	<-watched
	t.DoneAt = doneAt
	t.Lapsed = !errors.Is(l.Err(), election.ErrResigned)
	if !until.IsZero() {
		t.Until = rec.At(until)
		t.Validity = w.cfg.validity(t.Until)
	}
	if errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) {
		w.notHeld++
	} else if err != nil {
		return fmt.Errorf("client %d: resign: %w", w.id, err)
	}
	w.terms = append(w.terms, t)
	rec.Record(t.Section)
	if t.completed() {
		w.env.completed.Add(1)
	}
	return nil
}

// lead reads the resource, holds, and writes the increment back unless
// the lead ended meanwhile or the resource rejected the epoch.
func (w *worker) lead(s *Section, l *election.Leadership, long bool) {
	res := w.res[0]
	v, at, err := res.Read(s.Fence)
	if err != nil {
		s.Rejected = true
		return
	}
	s.ReadOK, s.Read, s.ReadAt = true, v, at
	hold := w.cfg.Hold
	if long {
		hold = w.cfg.LongHold
	}
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-l.Done():
		t.Stop()
	}
	select {
	case <-l.Done():
		s.Aborted = true
		return
	default:
	}
	at, err = res.Write(s.Fence, v+1)
	if err != nil {
		s.Rejected = true
		return
	}
	s.Committed, s.Written, s.WriteAt = true, v+1, at
}

// electionObserver follows the election with its own client, and records
// every LeaderInfo on the Recorder's clock.
type electionObserver struct {
	client *redlock.Client
	rec    *Recorder
	ended  chan struct{} // closed when Observe's channel is

	mu   sync.Mutex
	seen Observation
}

func startObserver(ctx context.Context, cfg Config, masters []*redis.Client, rec *Recorder) (*electionObserver, error) {
	c, err := redlock.New(masters, &redlock.Options{MasterTimeout: cfg.MasterTimeout})
	if err != nil {
		return nil, err
	}
	e, err := cfg.newElection(c)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	o := &electionObserver{client: c, rec: rec, ended: make(chan struct{})}
	ch := e.Observe(ctx)
	go func() {
		defer close(o.ended)
		for info := range ch {
			o.mu.Lock()
			o.seen = append(o.seen, Seen{At: rec.Now(), Vacant: info.Vacant, Epoch: info.Epoch})
			o.mu.Unlock()
		}
	}()
	return o, nil
}

// last returns the last report, and false if none came yet.
func (o *electionObserver) last() (Seen, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return Seen{}, false
	}
	return o.seen[len(o.seen)-1], true
}

// observation returns the reports; call it once Observe ended.
func (o *electionObserver) observation() Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen
}

// waitFor polls every few milliseconds until ok holds for the observer's
// last report, or d passes. It reports whether ok held.
func (o *electionObserver) waitFor(d time.Duration, ok func(Seen) bool) bool {
	deadline := time.Now().Add(d)
	for {
		if s, seen := o.last(); seen && ok(s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// observersTimeout bounds the wait for an observer's first report, and
// for its catching up with the last leader after the load.
const observersTimeout = 10 * time.Second
