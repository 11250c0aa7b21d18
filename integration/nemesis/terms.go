package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Term is one leadership of an election run (Kind Election). Its Section
// spans it on the Recorder's clock: Enter when Campaign returned, Exit
// when the leader itself saw Done closed or called Resign, whichever came
// first. Exit is the leader's own view, so it is no earlier than the
// moment the leadership really ended.
type Term struct {
	Section
	Epoch uint64 // Leadership.Epoch
	// DoneAt is when a watcher saw Done closed. For a resigned term it
	// follows the Resign call; for a lapsed one it is the loss.
	DoneAt time.Duration
	// Until is Leadership.Until as last seen before DoneAt; zero if never
	// seen. Validity is when the lock's validity ran out: Until plus a
	// tenth of the TTL, as Until's documentation says.
	Until, Validity time.Duration
	// Lapsed: Done closed before the leader resigned: the lead was lost
	// (its lock lost, or its validity about to run out).
	Lapsed bool
}

// Seen is one LeaderInfo an observer received, on the Recorder's clock.
type Seen struct {
	At     time.Duration
	Vacant bool
	Epoch  uint64
}

// Observation is what one observer (election.Observe) received in a run.
type Observation []Seen

// Inversion is a pair of leaderships, in the order they started, whose
// epochs did not increase.
type Inversion struct{ First, Second Term }

// ObserverResult is what the checker found in one observer's reports.
type ObserverResult struct {
	Reports    int // LeaderInfos received
	Leaders    int // distinct epochs reported as leading
	OutOfOrder int // reports whose epoch was lower than an earlier one
	// Missed are the epochs of leaderships that started after the
	// observer's first report, and wrote, that it never reported leading.
	Missed []uint64
	// Unrecorded are epochs it reported leading that no term has: a win
	// that landed for a Campaign whose caller saw it fail. Not a
	// violation; with Missed they tell a leader seen under another epoch
	// from one not seen at all.
	Unrecorded []uint64
	missed     []Term // Missed's terms, for String
}

// ElectionResult is what CheckElection found. Overlapping leaderships,
// and what they did to the resource, are in the run's Result.
type ElectionResult struct {
	Leaderships int // terms recorded
	Lapsed      int // terms whose lead was lost before the leader resigned
	// Inversions are consecutive terms, by start, whose epochs did not
	// strictly increase.
	Inversions []Inversion
	// LateDone are terms whose Done was seen closed at or after the
	// lock's validity ran out.
	LateDone []Term
	// MinMargin is the smallest Validity - DoneAt among lapsed terms: how
	// long before its validity a lost lead was seen to end at worst.
	// Zero if no term lapsed.
	MinMargin time.Duration
	Observers []ObserverResult
}

// Missed sums the leaders the observers missed.
func (r *ElectionResult) Missed() int {
	n := 0
	for _, o := range r.Observers {
		n += len(o.Missed)
	}
	return n
}

// OutOfOrder sums the observers' reports whose epoch went backwards.
func (r *ElectionResult) OutOfOrder() int {
	n := 0
	for _, o := range r.Observers {
		n += o.OutOfOrder
	}
	return n
}

// Violations counts epoch inversions, leads seen to end past their
// validity, and observers' missed leaders and backward epochs.
func (r *ElectionResult) Violations() int {
	return len(r.Inversions) + len(r.LateDone) + r.Missed() + r.OutOfOrder()
}

func (r *ElectionResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d leaderships, %d lapsed (min margin to validity %v), %d epoch inversions, %d ended past validity",
		r.Leaderships, r.Lapsed, r.MinMargin, len(r.Inversions), len(r.LateDone))
	for i, o := range r.Observers {
		fmt.Fprintf(&b, "; observer %d: %d reports, %d leaders, %d out of order, %d missed", i, o.Reports, o.Leaders, o.OutOfOrder, len(o.Missed))
	}
	for i, v := range r.Inversions {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more inversions", len(r.Inversions)-i)
			break
		}
		fmt.Fprintf(&b, "\n  inversion: client %d epoch %d at %v, then client %d epoch %d at %v",
			v.First.Client, v.First.Epoch, v.First.Enter, v.Second.Client, v.Second.Epoch, v.Second.Enter)
	}
	for i, t := range r.LateDone {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more ended past validity", len(r.LateDone)-i)
			break
		}
		fmt.Fprintf(&b, "\n  late: client %d epoch %d [%v, %v] %s, Done seen at %v, validity %v", t.Client, t.Epoch, t.Enter, t.Exit, t.outcome(), t.DoneAt, t.Validity)
	}
	for i, o := range r.Observers {
		if len(o.Missed) > 0 {
			fmt.Fprintf(&b, "\n  observer %d missed epochs %v", i, o.Missed[:min(len(o.Missed), 5)])
			for _, t := range o.missed[:min(len(o.missed), 3)] {
				fmt.Fprintf(&b, "\n    epoch %d: client %d [%v, %v] %s", t.Epoch, t.Client, t.Enter, t.Exit, t.outcome())
			}
			fmt.Fprintf(&b, "\n    reported leading, of no term: %v", o.Unrecorded[:min(len(o.Unrecorded), 5)])
		}
	}
	return b.String()
}

// CheckElection examines the terms of an election run and what its
// observers saw:
//   - epochs strictly increase in the order the terms started;
//   - each term's Done was seen closed before its validity ran out;
//   - each observer reported epochs that never go backwards, and every
//     term that started after its first report and wrote to the resource
//     as a leader (vacancies and extra leaders allowed).
//
// Overlapping terms are Check's, on the terms' Sections.
func CheckElection(terms []Term, obs []Observation) *ElectionResult {
	r := &ElectionResult{Leaderships: len(terms)}
	byStart := slices.Clone(terms)
	slices.SortStableFunc(byStart, func(a, b Term) int { return cmp.Compare(a.Enter, b.Enter) })
	for i, t := range byStart {
		if i > 0 && t.Epoch <= byStart[i-1].Epoch {
			r.Inversions = append(r.Inversions, Inversion{First: byStart[i-1], Second: t})
		}
		if t.Until != 0 && t.DoneAt >= t.Validity {
			r.LateDone = append(r.LateDone, t)
		}
		if t.Lapsed {
			margin := t.Validity - t.DoneAt
			if r.Lapsed == 0 || margin < r.MinMargin {
				r.MinMargin = margin
			}
			r.Lapsed++
		}
	}
	for _, o := range obs {
		var or ObserverResult
		led := map[uint64]bool{}
		var last uint64
		for i, s := range o {
			or.Reports++
			if i > 0 && s.Epoch < last {
				or.OutOfOrder++
			}
			last = max(last, s.Epoch)
			if !s.Vacant {
				led[s.Epoch] = true
			}
		}
		or.Leaders = len(led)
		recorded := map[uint64]bool{}
		for _, t := range byStart {
			recorded[t.Epoch] = true
			if len(o) > 0 && t.Enter > o[0].At && t.Committed && !led[t.Epoch] {
				or.Missed = append(or.Missed, t.Epoch)
				or.missed = append(or.missed, t)
			}
		}
		for _, s := range o {
			if !s.Vacant && !recorded[s.Epoch] && !slices.Contains(or.Unrecorded, s.Epoch) {
				or.Unrecorded = append(or.Unrecorded, s.Epoch)
			}
		}
		r.Observers = append(r.Observers, or)
	}
	return r
}
