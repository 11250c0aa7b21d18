package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects the critical sections of a run on one monotonic clock
// (its Now). It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu       sync.Mutex
	sections []Section
}

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now returns the time since the recorder started, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// At returns t on the recorder's clock.
func (r *Recorder) At(t time.Time) time.Duration { return t.Sub(r.start) }

// Record appends a finished section.
func (r *Recorder) Record(s Section) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sections = append(r.sections, s)
}

// Sections returns a copy of the sections recorded so far, in recording
// order.
func (r *Recorder) Sections() []Section {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sections)
}

// Section is one critical section: from the moment a client's Lock
// returned (Enter) to the moment it called Unlock (Exit), with the
// read-modify-write it made on the Resource in between. Times are on the
// Recorder's clock.
type Section struct {
	Client int    // which client held the lock
	Key    int    // which lock and resource: the index of Config's keys
	Value  string // the lock's value: identifies the acquisition
	Fence  Fence  // the token presented to the resource, if any
	Shared bool   // a read lock: the section reads and writes nothing

	Enter, Exit time.Duration

	ReadOK bool          // the read was accepted
	Read   int64         // the value read
	ReadAt time.Duration // when the read took effect

	// ReadAgain is what a shared section read once more at its end:
	// nobody may have written meanwhile. ReadAgainOK tells it was read.
	ReadAgain   int64
	ReadAgainOK bool

	Committed bool          // the write was accepted
	Written   int64         // the value written (Read+1)
	WriteAt   time.Duration // when the write took effect

	Rejected bool // the resource rejected the read or the write as stale (fencing)
	Aborted  bool // the holder's lock was lost or its validity ran out before the write: nothing written
}

// outcome says how the section ended, for reports.
func (s Section) outcome() string {
	switch {
	case s.Committed:
		return "committed"
	case s.Rejected:
		return "rejected"
	case s.Aborted:
		return "aborted (lock lost before the write)"
	case s.Shared:
		return "read"
	}
	return "ended"
}

// completed reports whether the section did what it came for: a write the
// resource accepted, or a read held to the end under a shared lock.
func (s Section) completed() bool {
	return s.Committed || s.Shared && s.ReadOK && !s.Aborted
}

// Overlap is a pair of sections whose [Enter, Exit] intervals intersect,
// not both shared: two clients held the lock at the same time, at least
// one of them for writing.
type Overlap struct {
	First, Second Section       // First entered no later than Second
	Length        time.Duration // how long both were inside
}

// Result is what Check found in a history.
type Result struct {
	Sections  int   // sections recorded
	Committed int   // sections whose write was accepted
	Final     int64 // the resource's value at the end
	Rejected  int   // sections stopped by the resource's fencing check
	// FalseRejections are rejected sections that overlapped no other: the
	// holder's lock was safe, but its token was lower than one seen before.
	FalseRejections int
	Aborted         int // sections that gave up because their lock was lost or its validity ran out
	Reads           int // shared sections that read under a lock held to the end

	Overlaps []Overlap // pairs of sections that held the lock at once
	// ReaderWriterOverlaps counts the Overlaps of a shared section with a
	// writing one.
	ReaderWriterOverlaps int
	// LostUpdates is Committed - Final: increments that were overwritten
	// (negative if the resource holds writes nobody committed), summed
	// over the keys.
	LostUpdates int
	// miscounted is the sum of each key's |Committed - Final|, which a
	// sum over keys cannot cancel out.
	miscounted int
	// StaleReads are committed sections, in write order, whose read did not
	// see the previous committed write, and shared sections held to the
	// end whose value changed while they held the read lock.
	StaleReads []Section
	// Linearizable is porcupine's verdict on the history as operations of a
	// sequential counter (Ok, Illegal, or Unknown after its time limit).
	Linearizable porcupine.CheckResult
}

// Violations counts every problem found: overlaps, lost updates, stale
// reads, and a non-linearizable history.
func (r *Result) Violations() int {
	n := len(r.Overlaps) + r.miscounted + len(r.StaleReads)
	if r.Linearizable == porcupine.Illegal {
		n++
	}
	return n
}

// Miscounted is the sum over keys of |Committed - Final|: the lost (or
// invented) updates, which keys cannot cancel out as in LostUpdates.
func (r *Result) Miscounted() int { return r.miscounted }

// MutualExclusionViolated reports whether two clients ever held the lock at
// once.
func (r *Result) MutualExclusionViolated() bool { return len(r.Overlaps) > 0 }

// DataCorrupted reports whether the resource lost an update or served a
// stale read, or the history is not linearizable.
func (r *Result) DataCorrupted() bool {
	return r.miscounted != 0 || len(r.StaleReads) > 0 || r.Linearizable == porcupine.Illegal
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sections, %d committed, %d shared reads, final %d, %d rejected by fencing (%d falsely), %d aborted; "+
		"%d overlaps (%d reader/writer), %d lost updates, %d stale reads, linearizable: %s",
		r.Sections, r.Committed, r.Reads, r.Final, r.Rejected, r.FalseRejections, r.Aborted,
		len(r.Overlaps), r.ReaderWriterOverlaps, r.miscounted, len(r.StaleReads), r.Linearizable)
	for i, o := range r.Overlaps {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more overlaps", len(r.Overlaps)-i)
			break
		}
		fmt.Fprintf(&b, "\n  overlap %v: client %d [%v, %v] %s and client %d [%v, %v] %s",
			o.Length, o.First.Client, o.First.Enter, o.First.Exit, o.First.outcome(),
			o.Second.Client, o.Second.Enter, o.Second.Exit, o.Second.outcome())
	}
	for i, s := range r.StaleReads {
		if i == 3 {
			fmt.Fprintf(&b, "\n  ... %d more stale reads", len(r.StaleReads)-i)
			break
		}
		fmt.Fprintf(&b, "\n  stale read: client %d read %d at %v, wrote %d at %v", s.Client, s.Read, s.ReadAt, s.Written, s.WriteAt)
	}
	return b.String()
}

func abs(n int) int { return max(n, -n) }

// LinearizabilityTimeout bounds porcupine's search in Check.
const LinearizabilityTimeout = 10 * time.Second

// Check examines a history of sections on a resource that started at 0 and
// ended at final:
//   - overlaps: two sections whose [Enter, Exit] intervals intersect;
//   - lost updates: final != the number of committed writes;
//   - stale reads: in the order the writes took effect, a committed section
//     that did not read the value the previous committed section wrote;
//   - linearizability (porcupine): the sections, each an atomic
//     read-increment-write (or a plain read when its write did not happen)
//     between its read and its write, must be explainable by a sequential
//     counter.
//
// It blocks for at most LinearizabilityTimeout.
func Check(sections []Section, final int64) *Result {
	r := &Result{Sections: len(sections), Final: final}
	byEnter := slices.Clone(sections)
	slices.SortStableFunc(byEnter, func(a, b Section) int { return cmp.Compare(a.Enter, b.Enter) })
	overlapped := make([]bool, len(byEnter))
	for i, a := range byEnter {
		for j, b := range byEnter[i+1:] {
			if b.Enter > a.Exit {
				break
			}
			if a.Shared && b.Shared {
				continue
			}
			if a.Shared || b.Shared {
				r.ReaderWriterOverlaps++
			}
			r.Overlaps = append(r.Overlaps, Overlap{First: a, Second: b, Length: min(a.Exit, b.Exit) - b.Enter})
			if !a.Shared && !b.Shared { // a reader carries no token
				overlapped[i], overlapped[i+1+j] = true, true
			}
		}
	}
	for i, a := range byEnter {
		if a.Rejected {
			r.Rejected++
			if !overlapped[i] {
				r.FalseRejections++
			}
		}
		if a.Aborted {
			r.Aborted++
		}
	}

	var committed []Section
	for _, s := range sections {
		if s.Committed {
			committed = append(committed, s)
		}
	}
	slices.SortStableFunc(committed, func(a, b Section) int { return cmp.Compare(a.WriteAt, b.WriteAt) })
	r.Committed = len(committed)
	r.LostUpdates = r.Committed - int(final)
	r.miscounted = abs(r.LostUpdates)
	var last int64
	for _, s := range committed {
		if s.Read != last {
			r.StaleReads = append(r.StaleReads, s)
		}
		last = s.Written
	}
	for _, s := range sections {
		if !s.Shared || !s.completed() {
			continue
		}
		r.Reads++
		if s.ReadAgainOK && s.ReadAgain != s.Read {
			r.StaleReads = append(r.StaleReads, s)
		}
	}

	r.Linearizable = porcupine.CheckOperationsTimeout(counterModel, operations(sections), LinearizabilityTimeout)
	return r
}

// CheckKeys checks a history of sections on several locks, each with its
// resource: finals[k] is where the resource of key k ended. Sections only
// conflict with sections of their key; the Result sums the keys' findings
// (Final is the sum of finals) and is Linearizable only if every key's
// history is. It blocks for at most LinearizabilityTimeout per key.
func CheckKeys(sections []Section, finals []int64) *Result {
	byKey := make([][]Section, len(finals))
	for _, s := range sections {
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	sum := &Result{Linearizable: porcupine.Ok}
	for k, final := range finals {
		r := Check(byKey[k], final)
		sum.Sections += r.Sections
		sum.Committed += r.Committed
		sum.Final += r.Final
		sum.Rejected += r.Rejected
		sum.FalseRejections += r.FalseRejections
		sum.Aborted += r.Aborted
		sum.Reads += r.Reads
		sum.Overlaps = append(sum.Overlaps, r.Overlaps...)
		sum.ReaderWriterOverlaps += r.ReaderWriterOverlaps
		sum.LostUpdates += r.LostUpdates
		sum.miscounted += r.miscounted
		sum.StaleReads = append(sum.StaleReads, r.StaleReads...)
		if r.Linearizable == porcupine.Illegal || sum.Linearizable == porcupine.Ok {
			sum.Linearizable = r.Linearizable
		}
	}
	return sum
}

// counterOutput is what a section observed: a read, and a write if it
// committed one.
type counterOutput struct {
	read      int64
	committed bool
	written   int64
}

// counterModel is a sequential counter: a committed section read the state
// and wrote state+1; a section that only read must have read the state.
var counterModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		s, out := state.(int64), output.(counterOutput)
		if out.read != s {
			return false, s
		}
		if out.committed {
			return out.written == s+1, out.written
		}
		return true, s
	},
	DescribeOperation: func(_, output any) string {
		out := output.(counterOutput)
		if out.committed {
			return fmt.Sprintf("read %d, wrote %d", out.read, out.written)
		}
		return fmt.Sprintf("read %d", out.read)
	},
}

// operations turns the sections that read something into porcupine
// operations spanning the instants their effects took place.
func operations(sections []Section) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, s := range sections {
		if !s.ReadOK {
			continue
		}
		ret := s.ReadAt
		if s.Committed {
			ret = s.WriteAt
		}
		ops = append(ops, porcupine.Operation{
			ClientId: s.Client,
			Call:     int64(s.ReadAt),
			Return:   int64(ret),
			Output:   counterOutput{read: s.Read, committed: s.Committed, written: s.Written},
		})
	}
	return ops
}
