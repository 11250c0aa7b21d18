package nemesis

import "time"

// Scenario is a nemesis with the load it runs against and what the checker
// must find.
type Scenario struct {
	Name        string
	Description string
	// Safe is true when the nemesis stays within Redlock's assumptions: the
	// checker must find no violation. When false, the nemesis breaks an
	// assumption on purpose and the checker must report a violation.
	Safe bool
	// LosesCounters is true when masters restart without persistence and
	// lose their fencing counters: when those held the latest token, later
	// tokens may go backwards, and a fenced resource rejects a holder whose
	// lock is nevertheless safe. Elsewhere a safe run must see no rejection.
	LosesCounters bool
	Config        Config
	Nemesis       Nemesis
}

// Scale selects the size of the scenarios' runs.
type Scale int

const (
	// Quick runs take about 5-10s each: for tests.
	Quick Scale = iota
	// Full runs take about 12-15s each: for RELIABILITY.md.
	Full
)

// Scenarios returns every scenario at the given scale, safe ones first.
// Counts and durations bound every run. The resource checks fencing tokens
// (MutexFencing), except in the "unfenced" copies of the unsafe scenarios,
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
			Clients:       pick(3, 4),
			Sections:      pick(200, 1000), // the Duration usually ends a run first
			Duration:      dur(5*time.Second, 12*time.Second),
			TTL:           time.Second,
			MasterTimeout: 100 * time.Millisecond,
			Hold:          2 * time.Millisecond,
			Fencing:       MutexFencing,
		}
	}
	// Long sections, for nemeses that act while a lock is held.
	holding := func() Config {
		c := base()
		c.TTL, c.Hold, c.Sections = 2*time.Second, 700*time.Millisecond, pick(8, 30)
		c.Duration = dur(8*time.Second, 15*time.Second)
		return c
	}
	// Sections that use the whole lease, for clock nemeses.
	lease := func() Config {
		c := base()
		c.TTL, c.HoldUntilValidity, c.Sections = 500*time.Millisecond, 50*time.Millisecond, pick(6, 25)
		return c
	}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }

	all := []Scenario{
		{
			Name: "none", Safe: true, Config: with(base(), func(c *Config) { c.Sections = pick(15, 100) }),
			Nemesis:     None{},
			Description: "No fault: the baseline.",
		},
		{
			Name: "kill-minority", Safe: true, LosesCounters: true, Config: base(),
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
			Nemesis:     FastClocks{Count: 1, Rate: 1.005},
			Description: "One master's clock runs 0.5% fast (libfaketime), within the 1% drift allowance; sections use their whole lease (until 50ms before validity ends, TTL 500ms).",
		},
		{
			Name: "restart-delayed", Safe: true, LosesCounters: true, Config: holding(),
			Nemesis:     RestartHolders{PreKill: 2, Count: 2, Delay: 2300 * time.Millisecond, Up: 300 * time.Millisecond},
			Description: "Kill 2 masters; while a client holds the lock on the other 3 (700ms sections, TTL 2s), kill 2 of those; restart all 4 empty after 2.3s, longer than the TTL (the spec's delayed restart).",
		},
		{
			Name: "restart-no-delay", Safe: false, LosesCounters: true, Config: holding(),
			Nemesis:     RestartHolders{PreKill: 2, Count: 2, Delay: 0, Up: 300 * time.Millisecond},
			Description: "As restart-delayed, but the 4 masters come back empty at once, while the lock is held: the holder keeps it on 1 master, 4 are free. Breaks the persistence assumption.",
		},
		{
			Name: "fast-clocks-majority", Safe: false, Config: lease(),
			Nemesis:     FastClocks{Count: 3, Rate: 2},
			Description: "Clocks of 3 of 5 masters run twice as fast (libfaketime): keys there expire after half the TTL while the holder still uses its lease. Breaks the clock-drift assumption.",
		},
	}
	for _, sc := range all {
		if !sc.Safe {
			sc.Description = "As " + sc.Name + ", with a resource that does not check fencing tokens."
			sc.Name += ", unfenced"
			sc.Config.Fencing = nil
			all = append(all, sc)
		}
	}
	return all
}
