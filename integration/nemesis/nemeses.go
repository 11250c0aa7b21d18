package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock/integration"
)

// actionTimeout bounds one action of a nemesis on a master (kill, restart,
// pause, resume). Actions are not cut short when the run's context ends, so
// a repair after the end still happens.
const actionTimeout = 30 * time.Second

// act applies f to the masters at idx in parallel, bounded by actionTimeout
// but not by ctx's cancellation, and joins the errors.
func act(ctx context.Context, idx []int, masters []integration.Master, f func(integration.Master, context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	var g errgroup.Group
	errs := make([]error, len(idx))
	for k, i := range idx {
		g.Go(func() error {
			if err := f(masters[i], ctx); err != nil {
				errs[k] = fmt.Errorf("nemesis: %w", err)
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// None injects no fault: the baseline.
type None struct{}

// Run waits for ctx.
func (None) Run(ctx context.Context, _ *Env) error {
	<-ctx.Done()
	return nil
}

// KillMinority kills Count random masters, keeps them down for Down and
// restarts them with empty data, then leaves the cluster alone for Up; and
// again. A Down longer than the longest TTL is the spec's delayed restart.
type KillMinority struct {
	Count    int
	Down, Up time.Duration
}

// Run injects faults until ctx ends; killed masters are restarted before
// it returns.
func (k KillMinority) Run(ctx context.Context, env *Env) error {
	for ctx.Err() == nil {
		idx := env.Pick(k.Count)
		if err := act(ctx, idx, env.Cluster.Masters, integration.Master.Kill); err != nil {
			return err
		}
		for _, i := range idx {
			env.Fault("kill %s", env.Cluster.Masters[i].Name())
		}
		Sleep(ctx, k.Down)
		if err := act(ctx, idx, env.Cluster.Masters, integration.Master.Restart); err != nil {
			return err
		}
		Sleep(ctx, k.Up)
	}
	return nil
}

// PauseMinority freezes Count random masters (SIGSTOP) for Pause, resumes
// them, and leaves the cluster alone for Up; and again.
type PauseMinority struct {
	Count     int
	Pause, Up time.Duration
}

// Run injects faults until ctx ends; paused masters are resumed before it
// returns.
func (p PauseMinority) Run(ctx context.Context, env *Env) error {
	for ctx.Err() == nil {
		idx := env.Pick(p.Count)
		if err := act(ctx, idx, env.Cluster.Masters, integration.Master.Pause); err != nil {
			return err
		}
		for _, i := range idx {
			env.Fault("pause %s", env.Cluster.Masters[i].Name())
		}
		Sleep(ctx, p.Pause)
		if err := act(ctx, idx, env.Cluster.Masters, integration.Master.Resume); err != nil {
			return err
		}
		Sleep(ctx, p.Up)
	}
	return nil
}

// CutMinority cuts the clients off from Count random masters (the proxies
// close their connections and refuse new ones) for Cut, heals, and leaves
// the network alone for Up; and again.
type CutMinority struct {
	Count   int
	Cut, Up time.Duration
}

// Run injects faults until ctx ends; every proxy is healed before it
// returns.
func (c CutMinority) Run(ctx context.Context, env *Env) error {
	for ctx.Err() == nil {
		idx := env.Pick(c.Count)
		for _, i := range idx {
			if err := env.Proxies.Cut(i); err != nil {
				return err
			}
			env.Fault("cut clients from %s", env.Cluster.Masters[i].Name())
		}
		Sleep(ctx, c.Cut)
		if err := env.Proxies.HealAll(); err != nil {
			return err
		}
		Sleep(ctx, c.Up)
	}
	return nil
}

// SlowOne delays the replies of one random master by each of Latencies in
// turn (below and above the master timeout, say), each for Period, with Up
// between.
type SlowOne struct {
	Latencies  []time.Duration
	Period, Up time.Duration
}

// Run injects faults until ctx ends; every proxy is healed before it
// returns.
func (s SlowOne) Run(ctx context.Context, env *Env) error {
	for n := 0; ctx.Err() == nil; n++ {
		i := env.Pick(1)[0]
		d := s.Latencies[n%len(s.Latencies)]
		if err := env.Proxies.Latency(i, d); err != nil {
			return err
		}
		env.Fault("latency %v on %s", d, env.Cluster.Masters[i].Name())
		Sleep(ctx, s.Period)
		if err := env.Proxies.HealAll(); err != nil {
			return err
		}
		Sleep(ctx, s.Up)
	}
	return nil
}

// FastClocks starts masters 0..Count-1 with clocks running Rate times as
// fast as real time (libfaketime), for the whole run. Redis expires keys by
// its clock, so their locks live TTL/Rate. Within the drift allowance
// (Rate-1 < DriftFactor) Redlock stays safe; far beyond it on a majority,
// a lock expires while its holder still counts on it.
type FastClocks struct {
	Count int
	Rate  float64
}

// ProcessOptions preloads libfaketime into the first Count masters. It
// fails with ErrNoFaketime if the library is missing.
func (f FastClocks) ProcessOptions(Config) (integration.ProcessOptions, error) {
	ft, err := FindFaketime()
	if err != nil {
		return integration.ProcessOptions{}, err
	}
	return integration.ProcessOptions{EnvFor: func(i int) []string {
		if i < f.Count {
			return ft.Rate(f.Rate)
		}
		return nil
	}}, nil
}

// Run counts the skewed clocks as faults and waits for ctx.
func (f FastClocks) Run(ctx context.Context, env *Env) error {
	for i := range f.Count {
		env.Fault("clock of %s runs x%v", env.Cluster.Masters[i].Name(), f.Rate)
	}
	<-ctx.Done()
	return nil
}

// RestartHolders crashes masters under a held lock and brings them back
// empty. Each cycle kills PreKill random masters, waits for a client to
// enter a critical section, kills Count of the masters still running while
// that section lasts, waits Delay, and restarts every killed master with
// empty data; then leaves the cluster alone for Up. When the load has long
// sections (Config.LongEvery), it waits for one of those.
//
// With PreKill = masters - quorum, a holder holds the lock on every
// running master, so the Count victims are masters the holder had. With
// Delay longer than the TTL this is the spec's delayed restart and stays
// safe. With Delay 0 and PreKill+Count >= quorum, the holder's lock is left
// on fewer than a quorum of masters while the restarted ones are free: a
// second client can take the lock. That breaks Redlock's persistence
// assumption.
type RestartHolders struct {
	PreKill, Count int
	Delay, Up      time.Duration
}

// Run injects faults until ctx ends; every killed master is restarted
// before it returns.
func (r RestartHolders) Run(ctx context.Context, env *Env) error {
	masters := env.Cluster.Masters
	for ctx.Err() == nil {
		perm := env.Pick(len(masters))
		killed := perm[:r.PreKill]
		if err := act(ctx, killed, masters, integration.Master.Kill); err != nil {
			return err
		}
		for _, i := range killed {
			env.Fault("kill %s", masters[i].Name())
		}
		for {
			s, err := env.NextSection(ctx)
			if err != nil {
				break
			}
			if env.Config.LongEvery > 0 && !s.Long {
				continue // too short to act under
			}
			select {
			case <-s.Done:
				continue // too late for this one
			default:
			}
			victims := perm[r.PreKill : r.PreKill+r.Count]
			if err := act(ctx, victims, masters, integration.Master.Kill); err != nil {
				return err
			}
			for _, i := range victims {
				env.Fault("kill %s under client %d's lock", masters[i].Name(), s.Client)
			}
			killed = perm[:r.PreKill+r.Count]
			break
		}
		if r.Delay > 0 {
			Sleep(ctx, r.Delay)
		}
		if err := act(ctx, killed, masters, integration.Master.Restart); err != nil {
			return err
		}
		Sleep(ctx, r.Up)
	}
	return nil
}

// RollingRestart kills each master in turn, keeps it down for Down and
// restarts it empty, then leaves the cluster alone for Up before the next:
// a rolling upgrade without persistence. A Down longer than the longest
// TTL is the spec's delayed restart. A lock held through it with
// auto-renewal stays held only if each renewal repairs the masters that
// came back empty (quorum repair); without, it is lost once a majority
// has restarted.
type RollingRestart struct {
	Down, Up time.Duration
}

// Run injects faults until ctx ends; a killed master is restarted before
// it returns.
func (r RollingRestart) Run(ctx context.Context, env *Env) error {
	masters := env.Cluster.Masters
	for i := 0; ctx.Err() == nil; i = (i + 1) % len(masters) {
		if err := act(ctx, []int{i}, masters, integration.Master.Kill); err != nil {
			return err
		}
		env.Fault("kill %s", masters[i].Name())
		Sleep(ctx, r.Down)
		if err := act(ctx, []int{i}, masters, integration.Master.Restart); err != nil {
			return err
		}
		Sleep(ctx, r.Up)
	}
	return nil
}

// jumpable starts masters 0..count-1 on one libfaketime clock file that
// the nemesis moves; Close removes the file once the masters are gone.
type jumpable struct {
	count int
	dir   string
	clock *ClockFile
}

// ProcessOptions creates the clock file and preloads libfaketime into the
// first count masters. It fails with ErrNoFaketime if the library is
// missing.
func (j *jumpable) ProcessOptions(Config) (integration.ProcessOptions, error) {
	ft, err := FindFaketime()
	if err != nil {
		return integration.ProcessOptions{}, err
	}
	if j.dir, err = os.MkdirTemp("", "redlock-clock-"); err != nil {
		return integration.ProcessOptions{}, err
	}
	if j.clock, err = NewClockFile(j.dir); err != nil {
		return integration.ProcessOptions{}, err
	}
	return integration.ProcessOptions{EnvFor: func(i int) []string {
		if i < j.count {
			return ft.Jumpable(j.clock)
		}
		return nil
	}}, nil
}

// Close removes the clock file; the runner calls it after the masters
// stopped.
func (j *jumpable) Close() error {
	if j.dir == "" {
		return nil
	}
	return os.RemoveAll(j.dir)
}

// set moves the clocks to real time plus offset.
func (j *jumpable) set(offset time.Duration) error {
	if err := j.clock.Set(offset); err != nil {
		return fmt.Errorf("nemesis: %w", err)
	}
	return nil
}

// ClockJump moves the clocks of masters 0..Count-1 forward by Jump, all
// together, every Period, and back after Back: a minority whose clock
// steps ahead (an NTP step, a resumed VM) expires keys early. Within
// Redlock's assumptions while Count is a minority, and within fencing's
// (docs/guarantees.md, assumption 4) while Jump is below a quarter of the TTL. Make it
// with NewClockJump; nothing is created before the run.
type ClockJump struct {
	jumpable
	Jump, Back, Period time.Duration
}

// NewClockJump returns a ClockJump of count masters.
func NewClockJump(count int, jump, back, period time.Duration) *ClockJump {
	return &ClockJump{jumpable: jumpable{count: count}, Jump: jump, Back: back, Period: period}
}

// Run jumps the clocks until ctx ends, and leaves them right.
func (j *ClockJump) Run(ctx context.Context, env *Env) error {
	for Sleep(ctx, j.Period) {
		if err := j.set(j.Jump); err != nil {
			return err
		}
		for i := range j.count {
			env.Fault("clock of %s jumps %v forward", env.Cluster.Masters[i].Name(), j.Jump)
		}
		Sleep(ctx, j.Back)
		if err := j.set(0); err != nil {
			return err
		}
	}
	return nil
}

// DriftingClock makes the clocks of masters 0..Count-1 run Rate times as
// fast as real time for Period, then as much slower for Period, and so on,
// in steps of a millisecond: a clock that drifts and that NTP slews back,
// ahead of real time by at most Period×(Rate-1). A clock that only ran
// fast would drift apart without bound, beyond fencing's assumption that
// the masters' clocks differ by well under the TTL (docs/guarantees.md, assumption 4).
// Make it with NewDriftingClock; nothing is created before the run.
type DriftingClock struct {
	jumpable
	Rate   float64
	Period time.Duration
}

// NewDriftingClock returns a DriftingClock of count masters.
func NewDriftingClock(count int, rate float64, period time.Duration) *DriftingClock {
	return &DriftingClock{jumpable: jumpable{count: count}, Rate: rate, Period: period}
}

// Run moves the clocks until ctx ends, and leaves them right. It fails at
// once if Rate is not above 1.
func (d *DriftingClock) Run(ctx context.Context, env *Env) error {
	if !(d.Rate > 1) {
		return fmt.Errorf("nemesis: DriftingClock rate %v: must be above 1", d.Rate)
	}
	every := time.Duration(float64(time.Millisecond) / (d.Rate - 1)) // a millisecond's drift
	steps := max(int(d.Period/every), 1)
	var offset time.Duration
	for phase := 0; ctx.Err() == nil; phase++ {
		dir := time.Millisecond
		if phase%2 == 1 {
			dir = -dir
		} else {
			for i := range d.count {
				env.Fault("clock of %s runs x%v for %v", env.Cluster.Masters[i].Name(), d.Rate, d.Period)
			}
		}
		for range steps {
			if !Sleep(ctx, every) {
				break
			}
			offset += dir
			if err := d.set(offset); err != nil {
				return err
			}
		}
	}
	return d.set(0)
}

// SentinelFailovers fails over Count Sentinel groups at once (Config.Sentinel),
// then lets Up pass, and again. The failovers alternate: a forced one
// (SENTINEL FAILOVER), then the primaries killed (SIGKILL), which Sentinel
// notices after its down-after time. A killed primary comes back empty, as
// a replica of the promoted one. Each failover waits until the old primary
// replicates again, so every group keeps a replica in sync between
// faults.
type SentinelFailovers struct {
	Count int
	Up    time.Duration
}

func (s SentinelFailovers) Run(ctx context.Context, env *Env) error {
	if env.Groups == nil {
		return errors.New("nemesis: SentinelFailovers needs Config.Sentinel")
	}
	for round := 0; ; round++ {
		idx := env.Pick(s.Count)
		kill := round%2 == 1
		var g errgroup.Group
		for _, i := range idx {
			grp := env.Groups[i]
			if kill {
				env.Fault("kill -9 the primary of %s", grp.Name)
				g.Go(func() error { return grp.KillPrimary(ctx) })
			} else {
				env.Fault("SENTINEL FAILOVER %s", grp.Name)
				g.Go(func() error { return grp.Failover(ctx) })
			}
		}
		if err := g.Wait(); err != nil {
			if ctx.Err() != nil { // the run ended meanwhile
				return nil
			}
			return err
		}
		if !Sleep(ctx, s.Up) {
			return nil
		}
	}
}

// PauseLeader stalls a leader: its own proxies (Env.Links) drop all its
// traffic to and from every master, as if its process were frozen, for
// Stall, then heal; then it leaves the network alone for Up, and again.
// It stalls the leader of a long section (Config.LongEvery) if the load
// has some. A Stall longer than the TTL outlasts the leader's validity:
// its lead must end before that validity does, and another candidate
// must lead once the lock expired (Env.Takeover counts those).
type PauseLeader struct {
	Stall, Up time.Duration
}

// Run injects faults until ctx ends; every link is healed before it
// returns. It fails at once without Env.Links (Kind Election).
func (p PauseLeader) Run(ctx context.Context, env *Env) error {
	if env.Links == nil {
		return errors.New("nemesis: PauseLeader needs the clients' own links (Kind Election)")
	}
	for ctx.Err() == nil {
		s, err := env.NextSection(ctx)
		if err != nil {
			break
		}
		if env.Config.LongEvery > 0 && !s.Long {
			continue // too short to stall
		}
		select {
		case <-s.Done:
			continue // too late for this one
		default:
		}
		links := env.Links[s.Client]
		for i := range links.Len() {
			if err := links.BlackHole(i); err != nil {
				return errors.Join(err, links.HealAll())
			}
		}
		began := env.Rec.Now()
		env.Fault("stall client %d's links to every master for %v, while it leads", s.Client, p.Stall)
		sctx, cancel := context.WithTimeout(ctx, p.Stall)
		for {
			n, err := env.NextSection(sctx)
			if err != nil {
				break
			}
			if n.Client != s.Client {
				env.Takeover()
				env.note("client %d leads %v after the stall of client %d began", n.Client, (n.At - began).Round(time.Millisecond), s.Client)
				break
			}
		}
		<-sctx.Done() // the rest of the stall
		cancel()
		if err := links.HealAll(); err != nil {
			return err
		}
		Sleep(ctx, p.Up)
	}
	return nil
}
