package nemesis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/integration/nemesis"
)

// term returns a resigned term of epoch that wrote, from enter to exit,
// whose validity ran out 500ms after it began.
func term(client int, epoch uint64, enter, exit time.Duration) nemesis.Term {
	return nemesis.Term{
		Section: nemesis.Section{Client: client, Enter: enter, Exit: exit, Committed: true},
		Epoch:   epoch, DoneAt: exit,
		Until: enter + 400*ms, Validity: enter + 500*ms,
	}
}

// seen returns what an observer reports of terms, in order: each leader,
// then its vacancy, 1ms after it began and ended.
func seen(terms ...nemesis.Term) nemesis.Observation {
	o := nemesis.Observation{{At: 0, Vacant: true}}
	for _, t := range terms {
		o = append(o, nemesis.Seen{At: t.Enter + ms, Epoch: t.Epoch}, nemesis.Seen{At: t.Exit + ms, Vacant: true, Epoch: t.Epoch})
	}
	return o
}

func TestCheckElectionCleanHistory(t *testing.T) {
	terms := []nemesis.Term{term(0, 10, 1*ms, 10*ms), term(1, 12, 11*ms, 20*ms), term(0, 13, 21*ms, 30*ms)}
	lapsed := term(2, 20, 31*ms, 440*ms)
	lapsed.Lapsed, lapsed.Committed, lapsed.Aborted = true, false, true
	terms = append(terms, lapsed)
	r := nemesis.CheckElection(terms, []nemesis.Observation{seen(terms...), seen(terms...)})
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, 4, r.Leaderships)
	assert.Equal(t, 1, r.Lapsed)
	assert.Equal(t, 91*ms, r.MinMargin, "validity 531ms, Done seen at 440ms")
	require.Len(t, r.Observers, 2)
	assert.Equal(t, 4, r.Observers[0].Leaders)
	assert.Equal(t, 9, r.Observers[0].Reports)
}

// Epochs must grow in the order the leaders started, whatever order the
// terms were recorded in.
func TestCheckElectionReportsEpochInversion(t *testing.T) {
	a, b, c := term(0, 10, 1*ms, 10*ms), term(1, 9, 11*ms, 20*ms), term(2, 11, 21*ms, 30*ms)
	r := nemesis.CheckElection([]nemesis.Term{c, b, a}, nil)
	require.Len(t, r.Inversions, 1, "%v", r)
	assert.Equal(t, uint64(10), r.Inversions[0].First.Epoch)
	assert.Equal(t, uint64(9), r.Inversions[0].Second.Epoch)
	assert.Equal(t, 1, r.Violations())
	assert.Contains(t, r.String(), "inversion")

	same := term(1, 10, 11*ms, 20*ms)
	assert.Len(t, nemesis.CheckElection([]nemesis.Term{a, same}, nil).Inversions, 1, "an epoch that repeats")
}

// A lead seen to end at or after its validity is a violation; one seen
// to end before it is not, however close.
func TestCheckElectionReportsDonePastValidity(t *testing.T) {
	late := term(0, 10, 0, 510*ms)
	late.Lapsed, late.DoneAt = true, 500*ms // at the validity
	onTime := term(1, 11, 600*ms, 1099*ms)
	onTime.Lapsed = true
	r := nemesis.CheckElection([]nemesis.Term{late, onTime}, nil)
	require.Len(t, r.LateDone, 1, "%v", r)
	assert.Equal(t, 0, r.LateDone[0].Client)
	assert.Equal(t, time.Duration(0), r.MinMargin)
	assert.Contains(t, r.String(), "late")

	unseen := term(0, 10, 0, 900*ms)
	unseen.Until, unseen.Validity, unseen.DoneAt = 0, 0, 900*ms
	assert.Empty(t, nemesis.CheckElection([]nemesis.Term{unseen}, nil).LateDone, "no Until seen: nothing to compare")
}

func TestCheckElectionReportsObserverFaults(t *testing.T) {
	a, b, c := term(0, 10, 1*ms, 10*ms), term(1, 12, 11*ms, 20*ms), term(2, 13, 21*ms, 30*ms)
	terms := []nemesis.Term{a, b, c}

	missed := append(seen(a), seen(c)[1:]...) // b never reported
	backwards := seen(a, c, b)
	r := nemesis.CheckElection(terms, []nemesis.Observation{missed, backwards})
	require.Len(t, r.Observers, 2)
	assert.Equal(t, []uint64{12}, r.Observers[0].Missed, "%v", r)
	assert.Zero(t, r.Observers[0].OutOfOrder)
	assert.Empty(t, r.Observers[1].Missed)
	assert.Equal(t, 2, r.Observers[1].OutOfOrder, "b's report and its vacancy come after c's")
	assert.Equal(t, 1, r.Missed())
	assert.Equal(t, 2, r.OutOfOrder())
	assert.Equal(t, 3, r.Violations())
	assert.Contains(t, r.String(), "missed epochs [12]")

	// A leader that started before the observer's first report, or wrote
	// nothing, is not missed.
	aborted := b
	aborted.Committed, aborted.Aborted = false, true
	late := nemesis.Observation{{At: 10 * ms, Vacant: true, Epoch: 10}}
	late = append(late, seen(c)[1:]...)
	r = nemesis.CheckElection([]nemesis.Term{a, aborted, c}, []nemesis.Observation{late})
	assert.Zero(t, r.Violations(), "%v", r)

	// A win of no recorded term (its Campaign failed for the caller) is
	// listed beside a missed one, not counted.
	phantom := append(seen(a), nemesis.Seen{At: 15 * ms, Epoch: 11})
	phantom = append(phantom, seen(c)[1:]...)
	r = nemesis.CheckElection(terms, []nemesis.Observation{phantom})
	assert.Equal(t, []uint64{11}, r.Observers[0].Unrecorded, "%v", r)
	assert.Equal(t, 1, r.Violations(), "b missed")
	assert.Contains(t, r.String(), "of no term: [11]")
}
