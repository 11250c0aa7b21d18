package nemesis

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/semaphore"
)

// DefaultCapacity is a semaphore run's capacity when Config.Capacities
// is empty.
const DefaultCapacity = 3

// semaphores gives the key of a semaphore's permits on a master.
var semaphores = link.GetSemaphores[*redlock.Client, *redlock.Lock]()

// setSemaphore readies cfg for Kind Semaphore: one resource per slot.
func (c *Config) setSemaphore() {
	if len(c.Capacities) == 0 {
		c.Capacities = []int{DefaultCapacity}
	}
	c.Keys = slices.Max(c.Capacities)
}

// newSemaphore returns the semaphore of a client on c.
func (c *Config) newSemaphore(client *redlock.Client) (*semaphore.Semaphore, error) {
	return semaphore.New(client, c.Key, &semaphore.Options{
		TTL:           c.TTL,
		MinRetryDelay: c.MinRetryDelay,
		MaxRetryDelay: c.MaxRetryDelay,
		AutoRenew:     c.AutoRenew,
	})
}

// permit is one section of a semaphore client: Acquire, with a capacity
// of Config.Capacities at random; the slot's resource read, a hold, and
// the increment written back, fenced by the permit's token; Release. It
// returns an error only if the run cannot go on.
func (w *worker) permit(ctx context.Context, n int) error {
	rec := w.env.Rec
	capacity := w.cfg.Capacities[mrand.IntN(len(w.cfg.Capacities))]
	long := w.cfg.LongEvery > 0 && n%w.cfg.LongEvery == w.cfg.LongEvery-1
	called := rec.Now()
	actx, cancel := context.WithTimeout(ctx, w.cfg.LockTimeout)
	l, err := w.sem.Acquire(actx, capacity)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil // the load ended during the call
	}
	w.lockCalls++
	if err != nil {
		if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("client %d: acquire: %w", w.id, err)
		}
		w.lockFails++
		return nil
	}
	p := Permit{Section: Section{Client: w.id, Enter: rec.Now(), Value: l.Value()}, Capacity: capacity, Called: called, Token: l.Token()}
	p.Slot = w.slotOf(l)
	if !l.Held() { // the read outlived the permit: its slot's resource is not ours
		p.Slot = -1
	}
	p.Key = max(p.Slot, 0)
	done := make(chan struct{})
	w.env.entered(Entered{Client: w.id, Key: p.Key, Long: long, Value: p.Value, At: p.Enter, Done: done})
	if w.cfg.Fencing != nil {
		p.Fence.Token, p.Fence.Valid = w.cfg.Fencing(l)
		w.fenced = w.fenced || p.Fence.Valid
	}
	if p.Slot >= 0 {
		w.section(&p.Section, l, long)
	} else {
		p.Aborted = !w.hold(l, long) // no resource: it cannot tell which
	}
	p.Exit = exitAt(p.Section, rec.Now(), rec.At(l.Until()))
	close(done)
	rctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	err = l.Release(rctx)
	cancel()
	if errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) {
		w.notHeld++
	} else if err != nil {
		return fmt.Errorf("client %d: release: %w", w.id, err)
	}
	w.permits = append(w.permits, p)
	if p.Slot >= 0 { // the slot's resource and exclusion are Check's
		rec.Record(p.Section)
	}
	if p.completed() {
		w.env.completed.Add(1)
	}
	return nil
}

// slotTimeout bounds the reads of slotOf.
const slotTimeout = time.Second

// slotOf returns the slot of permit l, which a quorum admitted: any
// master that holds it tells. A permit's nonce, the member of the
// semaphore's sorted set, is its slot, '/' and its value (scripts.lua,
// "@permits"). It returns -1 if no master answered with it in time.
func (w *worker) slotOf(l *redlock.Lock) int {
	key := semaphores.PermitsKey("", w.cfg.Key)
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	found := make(chan int, len(w.masters))
	var wg sync.WaitGroup
	for _, m := range w.masters {
		wg.Go(func() {
			members, err := m.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				return
			}
			for _, s := range members {
				slot, nonce, _ := strings.Cut(s, "/")
				if n, err := strconv.Atoi(slot); err == nil && (nonce == l.Value() || strings.HasPrefix(nonce, l.Value()+" ")) {
					found <- n
					return
				}
			}
		})
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	defer func() { cancel(); <-all }() // a paused master's read ends with ctx
	select {
	case n := <-found:
		return n
	case <-all:
		select {
		case n := <-found:
			return n
		default:
			return -1
		}
	}
}

// semaphoreScenarios are the semaphore's runs (Kind Semaphore): more
// clients than permits, each section a permit fenced by its token on the
// resource of its slot. base, someLong, lease and holding are
// Scenarios' loads.
func semaphoreScenarios(s Scale, base, someLong, lease, holding Config) []Scenario {
	pick := func(quick, full int) int {
		if s == Full {
			return full
		}
		return quick
	}
	dur := func(quick, full time.Duration) time.Duration {
		if s == Full {
			return full
		}
		return quick
	}
	// Twice as many clients as permits, or more: the semaphore stays
	// full, and every release is contended.
	sem := func(c Config) Config {
		c.Kind, c.Capacities = Semaphore, []int{DefaultCapacity}
		c.Clients = pick(6, 8)
		c.Duration = min(c.Duration, dur(10*time.Second, 5*time.Minute))
		return c
	}
	load := sem(base)
	long := sem(someLong)
	// Full: shorter leases, as the locks' lease load; 8 clients on 3
	// permits make fewer sections than its 32 on 16 keys.
	leases := sem(lease)
	leases.Sections = pick(6, 1500)
	mixed := load
	mixed.Capacities = []int{3, 3, 2}
	// Every permit held 700ms, twice as many clients as permits, each
	// acquire through a new client: the broken restart's load.
	broken := sem(holding)
	broken.Clients, broken.FreshClients = 6, true
	broken.Duration = dur(8*time.Second, 15*time.Second) // as the locks' broken runs
	// A waiter's client saw the restart: it counts the restarted masters
	// toward no new permit for a TTL. Giving up within half a TTL sends it
	// back through a fresh client, which does not. More sections than
	// fit: the Duration ends the run.
	broken.LockTimeout, broken.Sections = time.Second, 100

	const as = " Semaphore of capacity 3 (package semaphore): each client acquires a permit, reads the counter of the permit's slot, holds, writes it back with the permit's token as fencing token, and releases."
	const full = " Full runs end after 10,000 sections or 5 minutes."
	all := []Scenario{
		{
			Name: "semaphore: none", Safe: true, Config: load, Nemesis: None{},
			Description: "No fault." + as + full,
		},
		{
			Name: "semaphore: mixed capacities", Safe: true, Config: mixed,
			Nemesis:     PauseMinority{Count: 2, Pause: 400 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "As semaphore: pause-minority, with a third of the acquires given capacity 2: for every capacity c, the permits held that were given c or less number at most c at any instant." + full,
		},
		{
			Name: "semaphore: restart-delayed", Safe: true, Config: long,
			Nemesis: RestartHolders{PreKill: 2, Count: 2, Delay: 2300 * time.Millisecond, Up: dur(300*time.Millisecond, 3*time.Second)},
			Description: "As restart-delayed, under a semaphore: 4 masters die while a permit is held for 700ms (TTL 2s), and come back empty after 2.3s." + as +
				" Full runs end after 10,000 sections or 5 minutes; each cycle leaves no quorum for 2.3s and the restarted masters out for a TTL after, so fewer fit.",
		},
		{
			Name: "semaphore: restart-no-delay, fresh clients", Safe: false, Config: broken,
			Nemesis: RestartHolders{PreKill: 2, Count: 2, Delay: 0, Up: 300 * time.Millisecond},
			Description: "As restart-no-delay, fresh clients, under a semaphore of capacity 3 with 6 clients: while a permit is held for 700ms (TTL 2s) on the 3 live masters, 2 of those die, and all 4 come back empty at once: the permit is left on 1 master. " +
				"Each acquire goes through a new redlock.Client, which sees no new run_id and counts the 4 empty masters at once: they admit up to 3 more permits beside it. An acquire gives up after 1s, so that a waiter that saw the restart tries again through a new client. Breaks the persistence assumption." + as,
		},
		{
			Name: "semaphore: skew-one", Safe: true, Config: leases,
			Nemesis:     NewDriftingClock(1, 1.005, 4*time.Second),
			Description: "As skew-one, under a semaphore: permits use their whole lease." + as + full,
		},
	}
	return append(all, minorityScenarios("semaphore", ", under a semaphore", load, as+full)...)
}

// permitsOf joins the workers' permits.
func permitsOf(workers []*worker) []Permit {
	var ps []Permit
	for _, w := range workers {
		ps = append(ps, w.permits...)
	}
	return ps
}
