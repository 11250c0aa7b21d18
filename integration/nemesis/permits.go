package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Permit is one semaphore permit of a run (Kind Semaphore). Its Section
// spans it on the Recorder's clock, as a lock's does: Enter when Acquire
// returned, Exit when Release was called, or no later than the permit's
// validity for a holder that found it lost. Key is its slot.
type Permit struct {
	Section
	Capacity int           // the capacity its Acquire was given
	Called   time.Duration // when its Acquire was called
	Token    uint64        // Lock.Token; 0 if none
	// Slot is the slot the masters admitted it on, read from them once
	// held; -1 if no master could tell. Section.Key is the slot too.
	Slot int
}

// Crowd is an instant at which more permits given Capacity or less were
// held than Capacity. Their slots are distinct and below Capacity, so no
// more can be held (docs/semaphore.md).
type Crowd struct {
	At       time.Duration
	Held     []Permit // the permits held at At given Capacity or less, by Enter
	Capacity int      // the capacity they exceeded
}

// TokenInversion is a permit whose token is not larger than that of a
// permit acquired before its Acquire was called.
type TokenInversion struct{ Earlier, Later Permit }

// SemaphoreResult is what CheckSemaphore found. What the permits did to
// the resources of their slots is in the run's Result.
type SemaphoreResult struct {
	Permits int // permits recorded
	MaxHeld int // the most permits held at one instant
	// Capacities are the distinct capacities the permits were given.
	Capacities []int
	// UnknownSlots are permits whose slot no master told: their
	// sections used no resource.
	UnknownSlots int
	// Crowds are the instants, one per episode, at which more permits
	// given capacity c or less were held than c, for some c.
	Crowds []Crowd
	// Inversions are permits, one pair each, whose token was not larger
	// than the largest token of the permits acquired before their
	// Acquire was called.
	Inversions []TokenInversion
}

// Violations counts crowds and token inversions.
func (r *SemaphoreResult) Violations() int { return len(r.Crowds) + len(r.Inversions) }

func (r *SemaphoreResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d permits (capacities %v), at most %d held at once, %d of unknown slot; %d crowds, %d token inversions",
		r.Permits, r.Capacities, r.MaxHeld, r.UnknownSlots, len(r.Crowds), len(r.Inversions))
	for i, c := range r.Crowds {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more crowds", len(r.Crowds)-i)
			break
		}
		fmt.Fprintf(&b, "\n  crowd at %v: %d held given capacity %d or less:", c.At, len(c.Held), c.Capacity)
		for _, p := range c.Held {
			fmt.Fprintf(&b, " client %d slot %d [%v, %v] capacity %d %s;", p.Client, p.Slot, p.Enter, p.Exit, p.Capacity, p.outcome())
		}
	}
	for i, v := range r.Inversions {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more inversions", len(r.Inversions)-i)
			break
		}
		fmt.Fprintf(&b, "\n  inversion: client %d token %d acquired at %v, then client %d called at %v and got token %d",
			v.Earlier.Client, v.Earlier.Token, v.Earlier.Enter, v.Later.Client, v.Later.Called, v.Later.Token)
	}
	return b.String()
}

// CheckSemaphore examines the permits of a semaphore run:
//   - at every instant and for every c, the permits held that were given
//     capacity c or less number at most c: each holds its own slot, below
//     its capacity (docs/semaphore.md). So all of them number at most the
//     largest capacity given, the documented rule. A permit is held over
//     [Enter, Exit], both ends included;
//   - each permit's token is larger than the token of every permit whose
//     Acquire returned (Enter) before its own Acquire was called
//     (Called). Permits without a token are left out of this check.
//
// Each slot's exclusion, and its resource, are Check's, on the permits'
// Sections by slot.
func CheckSemaphore(permits []Permit) *SemaphoreResult {
	r := &SemaphoreResult{Permits: len(permits)}
	for _, p := range permits {
		if !slices.Contains(r.Capacities, p.Capacity) {
			r.Capacities = append(r.Capacities, p.Capacity)
		}
		if p.Slot < 0 {
			r.UnknownSlots++
		}
	}
	slices.Sort(r.Capacities)
	r.checkCrowds(permits)
	r.checkTokens(permits)
	return r
}

// checkCrowds sweeps the permits' enters and exits in time. At one
// instant enters come first: the intervals are closed.
func (r *SemaphoreResult) checkCrowds(permits []Permit) {
	type event struct {
		at    time.Duration
		enter bool
		i     int // index in permits
	}
	events := make([]event, 0, 2*len(permits))
	for i, p := range permits {
		events = append(events, event{p.Enter, true, i}, event{p.Exit, false, i})
	}
	slices.SortStableFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.enter == b.enter:
			return 0
		case a.enter:
			return -1
		}
		return 1
	})
	held := map[int]bool{}
	crowded := false
	for k, e := range events {
		if e.enter {
			held[e.i] = true
		} else {
			delete(held, e.i)
		}
		// The state between two events at one instant is no state.
		if k+1 < len(events) && events[k+1].at == e.at && events[k+1].enter == e.enter {
			continue
		}
		r.MaxHeld = max(r.MaxHeld, len(held))
		capacity := exceeded(permits, held)
		over := capacity > 0
		if over && !crowded {
			c := Crowd{At: e.at, Capacity: capacity}
			for i := range held {
				if permits[i].Capacity <= capacity {
					c.Held = append(c.Held, permits[i])
				}
			}
			slices.SortFunc(c.Held, func(a, b Permit) int { return cmp.Compare(a.Enter, b.Enter) })
			r.Crowds = append(r.Crowds, c)
		}
		crowded = over
	}
}

// exceeded returns the smallest capacity c such that more than c of the
// held permits were given c or less, or 0. Sorted by capacity, the
// (j+1)th permit exceeds its own capacity exactly then.
func exceeded(permits []Permit, held map[int]bool) int {
	caps := make([]int, 0, len(held))
	for i := range held {
		caps = append(caps, permits[i].Capacity)
	}
	slices.Sort(caps)
	for j, c := range caps {
		if j+1 > c {
			return c
		}
	}
	return 0
}

// checkTokens walks the permits by Called, with the largest token of the
// permits that entered before.
func (r *SemaphoreResult) checkTokens(permits []Permit) {
	var fenced []Permit
	for _, p := range permits {
		if p.Token != 0 {
			fenced = append(fenced, p)
		}
	}
	byEnter := slices.Clone(fenced)
	slices.SortStableFunc(byEnter, func(a, b Permit) int { return cmp.Compare(a.Enter, b.Enter) })
	byCalled := slices.Clone(fenced)
	slices.SortStableFunc(byCalled, func(a, b Permit) int { return cmp.Compare(a.Called, b.Called) })
	var top Permit // the largest token of byEnter[:next]
	next := 0
	for _, p := range byCalled {
		for ; next < len(byEnter) && byEnter[next].Enter < p.Called; next++ {
			if byEnter[next].Token > top.Token {
				top = byEnter[next]
			}
		}
		if top.Token != 0 && p.Token <= top.Token {
			r.Inversions = append(r.Inversions, TokenInversion{Earlier: top, Later: p})
		}
	}
}
