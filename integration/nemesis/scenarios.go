package nemesis

import (
	"fmt"
	"slices"
	"time"
)

// Scenario is a nemesis with the load it runs against and what the checker
// must find.
type Scenario struct {
	Name        string
	Description string
	// Safe is true when the nemesis stays within Redlock's assumptions: the
	// checker must find no violation. When false, the nemesis breaks an
	// assumption on purpose and the checker must report a violation.
	Safe bool
	// Within the assumptions fencing tokens never go backwards, even when
	// masters restart empty (they are a hybrid logical clock): a safe run
	// must see no rejection by the fenced resource.

	// KeepsLock: a holder must never lose its lock (no section aborted).
	// LosesLock: the nemesis makes holders lose their locks (a safety
	// feature is off), and some section must abort.
	KeepsLock, LosesLock bool
	Config               Config
	Nemesis              Nemesis
}

// Scale selects the size of the scenarios' runs.
type Scale int

const (
	// Quick runs take about 5-25s each: for tests.
	Quick Scale = iota
	// Full runs of the nemeses within the assumptions have at least 8
	// clients on 4 keys and end after 10,000 sections (but for the single
	// holder of rolling-restart), within 5 minutes each: for
	// RELIABILITY.md. The election's have 8 candidates on its one lock,
	// and end after 10,000 leaderships or 5 minutes, which comes first
	// under most nemeses (see their descriptions).
	Full
)

// Scenarios returns every scenario at the given scale, safe ones first.
// Counts and durations bound every run. The resource checks fencing tokens
// (LockFencing), except in the "unfenced" copies of the unsafe scenarios,
// which show what the violations do to unprotected data.
func Scenarios(s Scale) []Scenario {
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
	base := func() Config {
		return Config{
			Clients:       pick(3, 8),
			Keys:          pick(2, 4),
			Sections:      pick(200, 1500), // quick: the Duration usually ends a run first
			Completed:     pick(0, 10000),
			Duration:      dur(5*time.Second, 5*time.Minute),
			TTL:           time.Second,
			MasterTimeout: 100 * time.Millisecond,
			Hold:          2 * time.Millisecond,
			Fencing:       LockFencing,
		}
	}
	// Long sections only, for the unsafe nemeses that act while a lock is
	// held: every section is a chance for a second holder.
	holding := func() Config {
		c := base()
		c.Keys, c.TTL, c.Hold, c.Sections = 1, 2*time.Second, 700*time.Millisecond, pick(8, 100)
		c.Duration = dur(8*time.Second, time.Minute)
		return c
	}
	// Short sections with a long one now and then, for safe nemeses that
	// act while a lock is held: the cluster stays up long enough between
	// faults for many sections.
	someLong := func() Config {
		c := base()
		c.TTL, c.LongHold, c.LongEvery = 2*time.Second, 700*time.Millisecond, pick(5, 50)
		// Full: restarts quarantine masters for a TTL, so 10,000
		// sections take about 8 minutes.
		c.Duration = dur(10*time.Second, 12*time.Minute)
		return c
	}
	// Sections that use the whole lease, for clock nemeses. A lease is
	// long: many clients on many keys make the sections.
	lease := func() Config {
		c := base()
		c.TTL, c.HoldUntilValidity, c.Sections = 500*time.Millisecond, 50*time.Millisecond, pick(6, 25)
		if s == Full { // shorter leases: more sections in the time
			c.Clients, c.Keys, c.Sections = 32, 16, 375
			c.TTL, c.MasterTimeout, c.HoldUntilValidity = 200*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond
		}
		return c
	}
	// One section of 20 TTLs with auto-renewal per client: the first
	// holds while the other's lock call times out.
	rolling := func() Config {
		c := base()
		c.Clients, c.Keys, c.Sections, c.AutoRenew = pick(2, 8), 1, 1, true
		c.Hold, c.Duration = 20*c.TTL, 25*time.Second
		return c
	}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }

	all := []Scenario{
		{
			Name: "none", Safe: true, Config: with(base(), func(c *Config) { c.Sections, c.Completed = pick(15, 1500), pick(30, 10000) }),
			Nemesis:     None{},
			Description: "No fault: the baseline.",
		},
		{
			Name: "kill-minority", Safe: true, Config: base(),
			Nemesis:     KillMinority{Count: 2, Down: 1300 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "Kill 2 of 5 masters (SIGKILL), restart them empty after 1.3s (longer than the 1s TTL), repeat.",
		},
		{
			Name: "pause-minority", Safe: true, Config: base(),
			Nemesis:     PauseMinority{Count: 2, Pause: 400 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "Freeze 2 of 5 masters (SIGSTOP) for 400ms, four times the master timeout, then resume them.",
		},
		{
			Name: "cut-minority", Safe: true, Config: base(),
			Nemesis:     CutMinority{Count: 2, Cut: 400 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "Cut every client off from 2 of 5 masters (toxiproxy stopped: connections closed, dials refused) for 400ms, then heal.",
		},
		{
			Name: "slow-one", Safe: true, Config: base(),
			Nemesis: SlowOne{
				Latencies: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond},
				Period:    500 * time.Millisecond, Up: 200 * time.Millisecond,
			},
			Description: "Delay one master's replies by 50ms (half the master timeout) or 200ms (twice it), alternately, 500ms at a time.",
		},
		{
			Name: "skew-one", Safe: true, Config: lease(),
			Nemesis:     NewDriftingClock(1, 1.005, 4*time.Second),
			Description: "One master's clock runs 0.5% fast for 4s, then 0.5% slow for 4s, and so on (libfaketime, in 1ms steps): a drift within the 1% allowance that NTP slews back, so that the clock is at most 20ms ahead. Sections use their whole lease (until shortly before validity ends).",
		},
		{
			Name: "clock-jump-minority", Safe: true, Config: lease(),
			Nemesis:     NewClockJump(2, 3*time.Millisecond, 300*time.Millisecond, 700*time.Millisecond),
			Description: "Every 700ms the clocks of 2 of 5 masters jump 3ms forward (libfaketime), and back 300ms later: less than the drift allowance (TTL x 0.01 + 2ms), the most a jump may take. Sections use their whole lease (until shortly before validity ends).",
		},
		{
			Name: "restart-delayed", Safe: true, Config: someLong(),
			Nemesis:     RestartHolders{PreKill: 2, Count: 2, Delay: 2300 * time.Millisecond, Up: dur(300*time.Millisecond, 3*time.Second)},
			Description: "Kill 2 masters; while a client holds a lock on the other 3 (a 700ms section among short ones, TTL 2s), kill 2 of those; restart all 4 empty after 2.3s, longer than the TTL (the spec's delayed restart).",
		},
		{
			Name: "restart-no-delay", Safe: true, Config: someLong(),
			Nemesis: RestartHolders{PreKill: 2, Count: 2, Delay: 0, Up: dur(300*time.Millisecond, 3*time.Second)},
			Description: "As restart-delayed, but the 4 masters come back empty at once, while a lock is held: it is left on 1 master, 4 are free. " +
				"The clients met the masters before: each sees the new run_id, and counts that master toward no new lock for the longest TTL it asked for (the delayed restart, done by the client).",
		},
		{
			Name: "rolling-restart", Safe: true, KeepsLock: true, Config: rolling(),
			Nemesis:     RollingRestart{Down: 1300 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "Kill each master in turn and restart it empty after 1.3s (longer than the 1s TTL), while one client holds the lock with auto-renewal for 20 TTLs and another tries to take it; renewals repair the masters that came back empty.",
		},
		{
			Name: "rolling-restart, short sections", Safe: true, Config: base(),
			Nemesis:     RollingRestart{Down: 1300 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "The same rolling restart under the baseline's load of short sections.",
		},
		{
			Name: "rolling-restart, no repair", Safe: true, LosesLock: true, Config: with(rolling(), func(c *Config) { c.NoRepair = true }),
			Nemesis:     RollingRestart{Down: 1300 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "As rolling-restart, with quorum repair off (redlock.Options.NoRepair): each master that restarts, or that the other client took first at the start, is one holder fewer, and the lock is lost within a few restarts, though every restart was delayed.",
		},
		{
			Name: "sentinel-failover-minority", Safe: true,
			Config: with(base(), func(c *Config) {
				c.Sentinel = true
				c.Sections = pick(3000, 1500) // quick: the Duration ends the run
				c.Duration = dur(15*time.Second, 10*time.Minute)
				// Full: longer sections, so that 10,000 take minutes, and
				// many failovers happen meanwhile.
				c.Hold = dur(2*time.Millisecond, 50*time.Millisecond)
			}),
			Nemesis: SentinelFailovers{Count: 2, Up: dur(500*time.Millisecond, 2*time.Second)},
			Description: "Each master is a Sentinel group (a primary, a replica, three sentinels; down-after 1s), reached through redis.NewFailoverClient. " +
				"2 of 5 groups fail over at once, alternately forced (SENTINEL FAILOVER) and by kill -9 of the primary, which comes back empty as a replica; then a pause, and again. " +
				"An agreement counts once WAIT saw the replica take it, and a group seen to change server counts toward no new lock for a TTL.",
		},
		{
			Name: "restart-no-delay, fresh clients", Safe: false, Config: with(holding(), func(c *Config) { c.FreshClients = true }),
			Nemesis:     RestartHolders{PreKill: 2, Count: 2, Delay: 0, Up: 300 * time.Millisecond},
			Description: "As restart-no-delay, but each lock call goes through a new redlock.Client (a short-lived process): it never met the masters before, sees no new run_id, and the 4 that came back empty count at once. Breaks the persistence assumption.",
		},
		{
			Name: "fast-clocks-majority", Safe: false, Config: lease(),
			Nemesis:     FastClocks{Count: 3, Rate: 2},
			Description: "Clocks of 3 of 5 masters run twice as fast (libfaketime): keys there expire after half the TTL while the holder still uses its lease. Breaks the clock-drift assumption.",
		},
	}
	// The scenarios that break an assumption only need to show what the
	// checker reports: they keep the small size.
	for i := range all {
		if c := &all[i].Config; !all[i].Safe && s == Full {
			c.Clients, c.Keys, c.Duration = 4, 1, 15*time.Second
		}
	}
	// The other lock kinds under the nemeses that act most on held locks.
	for _, k := range []struct {
		name string
		kind Kind
	}{{"reentrant", Reentrant}, {"read-write", ReadWrite}} {
		for _, sc := range all[1:3] { // kill-minority, pause-minority
			sc.Name = k.name + ": " + sc.Name
			sc.Description = "As " + sc.Name[len(k.name)+2:] + ", with " + k.kind.String() + describeKind[k.kind]
			sc.Config.Kind = k.kind
			all = append(all, sc)
		}
	}
	all = append(all, electionScenarios(s, base(), holding())...)
	all = append(all, semaphoreScenarios(s, base(), someLong(), lease(), holding())...)
	all = append(all, fairScenarios(s, base())...)
	all = append(all, multiScenarios(s, base())...)
	for _, sc := range all {
		if !sc.Safe {
			sc.Description = "As " + sc.Name + ", with a resource that does not check fencing tokens."
			sc.Name += ", unfenced"
			sc.Config.Fencing = nil
			all = append(all, sc)
		}
	}
	slices.SortStableFunc(all, func(a, b Scenario) int {
		switch {
		case a.Safe == b.Safe:
			return 0
		case a.Safe:
			return -1
		}
		return 1
	})
	return all
}

var describeKind = map[Kind]string{
	Reentrant: ": each section locks twice (nested; the inner hold must keep the Lock and its token), writes, and unlocks twice.",
	ReadWrite: ": a third of the sections take the write lock and write, the others share the read lock and only read; every read must see the last write.",
}

// minorityScenarios are kill-, pause- and cut-minority, as the locks'
// runs of those names, on a recipe's load: "recipe: kill-minority" and
// so on. under tells the recipe in the description, as its load.
func minorityScenarios(recipe, under string, load Config, as string) []Scenario {
	sc := func(name string, n Nemesis) Scenario {
		return Scenario{Name: recipe + ": " + name, Safe: true, Config: load, Nemesis: n, Description: "As " + name + under + "." + as}
	}
	return []Scenario{
		sc("kill-minority", KillMinority{Count: 2, Down: 1300 * time.Millisecond, Up: 300 * time.Millisecond}),
		sc("pause-minority", PauseMinority{Count: 2, Pause: 400 * time.Millisecond, Up: 300 * time.Millisecond}),
		sc("cut-minority", CutMinority{Count: 2, Cut: 400 * time.Millisecond, Up: 300 * time.Millisecond}),
	}
}

// electionScenarios are the election's runs (Kind Election): each client
// is a candidate, and each leadership a section fenced by its epoch.
// base and holding are Scenarios' loads.
func electionScenarios(s Scale, base, holding Config) []Scenario {
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
	// Full: 8 candidates until 10,000 leaderships wrote. Leaderships
	// come one at a time: a handoff takes a Resign (two rounds) and a
	// Campaign (a wake and two rounds), about 25ms on local masters.
	elect := base
	elect.Kind, elect.Keys, elect.Sections = Election, 1, pick(200, 5000)
	elect.Duration = dur(5*time.Second, 5*time.Minute)
	// Some long leaderships for the nemeses that act under one.
	someLong := elect
	someLong.TTL, someLong.LongHold, someLong.LongEvery = 2*time.Second, 700*time.Millisecond, pick(5, 50)
	someLong.Duration = dur(10*time.Second, 5*time.Minute)
	// A long leadership outlasts a TTL, so that a stall outlasts its
	// validity while the leader still counts on it.
	stalled := elect
	stalled.LongHold, stalled.LongEvery = 3*elect.TTL, pick(10, 20)
	stalled.Duration = dur(12*time.Second, 5*time.Minute)
	broken := holding
	broken.Kind, broken.FreshClients = Election, true
	if s == Full { // only to show what the checker reports, as the others
		broken.Clients, broken.Duration = 4, 15*time.Second
	}

	const as = " Each client is a candidate (election.Campaign); a leadership reads the counter, holds, writes it back with its epoch as fencing token, and resigns; two observers (election.Observe) follow the election."
	// What bounds the full runs, which 10,000 leaderships may not reach:
	// leaderships come one at a time, and each waits for the one before.
	const full = " Full runs end after 10,000 leaderships wrote or 5 minutes (cmd/reliability gives a run 6): leaderships come one at a time, each a Resign, a wake and a Campaign after the last (about 25ms on local masters), so a nemesis that slows quorum rounds leaves fewer."
	all := []Scenario{
		{
			Name: "election: restart-delayed", Safe: true, Config: someLong,
			Nemesis: RestartHolders{PreKill: 2, Count: 2, Delay: 2300 * time.Millisecond, Up: dur(300*time.Millisecond, 3*time.Second)},
			Description: "As restart-delayed, under an election: 4 masters die under a leader of 700ms (TTL 2s), and come back empty after 2.3s." + as +
				" Full runs end after 10,000 leaderships wrote or 5 minutes; each cycle leaves no quorum for 2.3s and the restarted masters out for a TTL after, so far fewer fit.",
		},
		{
			Name: "election: pause-leader", Safe: true, LosesLock: true, Config: stalled,
			Nemesis: PauseLeader{Stall: 1600 * time.Millisecond, Up: dur(300*time.Millisecond, time.Second)},
			Description: "While a candidate leads for 3 TTLs (one leadership in " + fmt.Sprint(stalled.LongEvery) + "), its own proxies drop all its traffic to every master for 1.6s, longer than the 1s TTL, as if its process were frozen: " +
				"its lead must end before its validity does, and another candidate leads once the lock expired." + as +
				" Full runs end after 10,000 leaderships wrote or 5 minutes; with a 3s or stalled leadership every 20, fewer fit.",
		},
		{
			Name: "election: restart-no-delay, fresh clients", Safe: false, Config: broken,
			Nemesis:     RestartHolders{PreKill: 2, Count: 2, Delay: 0, Up: 300 * time.Millisecond},
			Description: "As restart-no-delay, fresh clients, under an election: each campaign goes through a new redlock.Client, so the 4 masters that come back empty under a leader count at once, and a second candidate leads. Breaks the persistence assumption.",
		},
	}
	return append(all, minorityScenarios("election", ", under an election", elect, as+full)...)
}
