package nemesis_test

import (
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/integration/nemesis"
)

const ms = time.Millisecond

// committed returns a section that read r at enter+1ms and wrote r+1 at
// exit-1ms.
func committed(client int, enter, exit time.Duration, r int64) nemesis.Section {
	return nemesis.Section{
		Client: client, Enter: enter, Exit: exit,
		ReadOK: true, Read: r, ReadAt: enter + ms,
		Committed: true, Written: r + 1, WriteAt: exit - ms,
	}
}

func TestCheckSequentialHistoryIsClean(t *testing.T) {
	h := []nemesis.Section{
		committed(0, 0, 10*ms, 0),
		committed(1, 11*ms, 20*ms, 1),
		committed(2, 21*ms, 30*ms, 2),
		committed(0, 31*ms, 40*ms, 3),
	}
	r := nemesis.Check(h, 4)
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, porcupine.Ok, r.Linearizable)
	assert.Equal(t, 4, r.Committed)
	assert.False(t, r.MutualExclusionViolated())
	assert.False(t, r.DataCorrupted())
}

func TestCheckReportsOverlapAndLostUpdate(t *testing.T) {
	// Client 1 enters while client 0 is inside, reads the same value, and
	// both write 1: one increment is lost.
	h := []nemesis.Section{
		committed(0, 0, 10*ms, 0),
		committed(1, 5*ms, 15*ms, 0),
	}
	r := nemesis.Check(h, 1)
	require.Len(t, r.Overlaps, 1, "%v", r)
	assert.Equal(t, 0, r.Overlaps[0].First.Client)
	assert.Equal(t, 1, r.Overlaps[0].Second.Client)
	assert.Equal(t, 5*ms, r.Overlaps[0].Length)
	assert.Equal(t, 1, r.LostUpdates)
	require.Len(t, r.StaleReads, 1)
	assert.Equal(t, 1, r.StaleReads[0].Client, "client 1 wrote last and did not see client 0's write")
	assert.Equal(t, porcupine.Illegal, r.Linearizable)
	assert.True(t, r.MutualExclusionViolated())
	assert.True(t, r.DataCorrupted())
	assert.Contains(t, r.String(), "overlap")
}

// A report of an overlap says how each section ended: a holder that found
// its lock lost and wrote nothing still overlaps, and the report says so.
func TestCheckReportNamesEachOverlappingSectionsOutcome(t *testing.T) {
	lost := nemesis.Section{Client: 0, Enter: 0, Exit: 10 * ms, ReadOK: true, Aborted: true}
	r := nemesis.Check([]nemesis.Section{lost, committed(1, 5*ms, 15*ms, 0)}, 1)
	require.Len(t, r.Overlaps, 1)
	assert.Contains(t, r.String(), "client 0 [0s, 10ms] aborted (lock lost before the write) and client 1 [5ms, 15ms] committed")
}

func TestCheckReportsOverlapEvenWhenDataSurvives(t *testing.T) {
	// The sections overlap but happened not to interleave their effects.
	a := committed(0, 0, 10*ms, 0)
	a.ReadAt, a.WriteAt = 1*ms, 2*ms
	b := committed(1, 5*ms, 15*ms, 1)
	b.ReadAt, b.WriteAt = 6*ms, 7*ms
	r := nemesis.Check([]nemesis.Section{a, b}, 2)
	assert.Len(t, r.Overlaps, 1)
	assert.Zero(t, r.LostUpdates)
	assert.Empty(t, r.StaleReads)
	assert.Equal(t, porcupine.Ok, r.Linearizable)
	assert.Equal(t, 1, r.Violations())
}

func TestCheckReportsFinalMismatch(t *testing.T) {
	h := []nemesis.Section{committed(0, 0, 10*ms, 0), committed(1, 11*ms, 20*ms, 1)}
	r := nemesis.Check(h, 1) // one write vanished after the fact
	assert.Equal(t, 1, r.LostUpdates)
	assert.NotZero(t, r.Violations())
	r = nemesis.Check(h, 3) // a write nobody committed
	assert.Equal(t, -1, r.LostUpdates)
	assert.NotZero(t, r.Violations())
}

func TestCheckTouchingSectionsOverlap(t *testing.T) {
	// Intervals are closed: an exit and an enter at the same instant overlap.
	h := []nemesis.Section{committed(0, 0, 10*ms, 0), committed(1, 10*ms, 20*ms, 1)}
	assert.Len(t, nemesis.Check(h, 2).Overlaps, 1)
}

func TestCheckOverlapsOfThree(t *testing.T) {
	h := []nemesis.Section{
		committed(0, 0, 100*ms, 0),
		committed(1, 10*ms, 20*ms, 1),
		committed(2, 30*ms, 40*ms, 2),
		committed(3, 200*ms, 210*ms, 3),
	}
	r := nemesis.Check(h, 4)
	assert.Len(t, r.Overlaps, 2, "client 0's long section overlaps two others")
}

// TestResourceFencingRejectsStaleWrite replays Kleppmann's scenario: the
// old holder's write comes after a newer holder has used the resource.
func TestResourceFencingRejectsStaleWrite(t *testing.T) {
	rec := nemesis.NewRecorder()
	res := nemesis.NewResource(rec)
	old, young := nemesis.Fence{Token: 33, Valid: true}, nemesis.Fence{Token: 34, Valid: true}

	var a, b nemesis.Section
	a = nemesis.Section{Client: 0, Fence: old, Enter: rec.Now()}
	v, at, err := res.Read(old)
	require.NoError(t, err)
	a.ReadOK, a.Read, a.ReadAt = true, v, at

	b = nemesis.Section{Client: 1, Fence: young, Enter: rec.Now()}
	v, at, err = res.Read(young)
	require.NoError(t, err)
	b.ReadOK, b.Read, b.ReadAt = true, v, at

	_, err = res.Write(old, a.Read+1)
	require.ErrorIs(t, err, nemesis.ErrStaleToken)
	a.Rejected, a.Exit = true, rec.Now()

	at, err = res.Write(young, b.Read+1)
	require.NoError(t, err)
	b.Committed, b.Written, b.WriteAt, b.Exit = true, b.Read+1, at, rec.Now()

	_, _, err = res.Read(old)
	require.ErrorIs(t, err, nemesis.ErrStaleToken, "reads are fenced too")
	assert.Equal(t, 2, res.Rejected())

	r := nemesis.Check([]nemesis.Section{a, b}, res.Value())
	assert.Len(t, r.Overlaps, 1, "the lock was held twice")
	assert.Equal(t, 1, r.Rejected)
	assert.False(t, r.DataCorrupted(), "fencing kept the data right: %v", r)
	assert.Equal(t, porcupine.Ok, r.Linearizable)
}

func TestResourceWithoutFencingLosesTheUpdate(t *testing.T) {
	rec := nemesis.NewRecorder()
	res := nemesis.NewResource(rec)
	none := nemesis.Fence{}
	va, ra, _ := res.Read(none)
	vb, rb, _ := res.Read(none)
	wa, err := res.Write(none, va+1)
	require.NoError(t, err)
	wb, err := res.Write(none, vb+1)
	require.NoError(t, err)
	h := []nemesis.Section{
		{Client: 0, Enter: ra, Exit: wa, ReadOK: true, Read: va, ReadAt: ra, Committed: true, Written: va + 1, WriteAt: wa},
		{Client: 1, Enter: rb, Exit: wb, ReadOK: true, Read: vb, ReadAt: rb, Committed: true, Written: vb + 1, WriteAt: wb},
	}
	r := nemesis.Check(h, res.Value())
	assert.Equal(t, 1, r.LostUpdates)
	assert.True(t, r.DataCorrupted())
	assert.Zero(t, res.Rejected())
}

func TestClockFileSpec(t *testing.T) {
	c, err := nemesis.NewClockFile(t.TempDir())
	require.NoError(t, err)
	for offset, want := range map[time.Duration]string{
		10500 * ms: "+10.500s\n",
		-2250 * ms: "-2.250s\n",
		0:          "+0.000s\n",
	} {
		require.NoError(t, c.Set(offset))
		b, err := os.ReadFile(c.Path())
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}
}

// TestCheckCountsFalseRejections: a rejected section that overlapped no
// other was a safe holder with a low token; one that overlapped was not.
func TestCheckCountsFalseRejections(t *testing.T) {
	rejected := func(client int, enter, exit time.Duration) nemesis.Section {
		return nemesis.Section{Client: client, Enter: enter, Exit: exit, Rejected: true}
	}
	h := []nemesis.Section{
		committed(0, 0, 10*ms, 0),
		rejected(1, 5*ms, 15*ms), // overlaps client 0
		committed(2, 20*ms, 30*ms, 1),
		rejected(0, 31*ms, 40*ms), // alone
	}
	r := nemesis.Check(h, 2)
	assert.Equal(t, 2, r.Rejected)
	assert.Equal(t, 1, r.FalseRejections)
	assert.Len(t, r.Overlaps, 1)
}

// TestCheckSharedSections: readers may overlap each other, not a writer;
// a reader must see the last write before its read.
func TestCheckSharedSections(t *testing.T) {
	read := func(client int, enter, exit time.Duration, v int64) nemesis.Section {
		return nemesis.Section{Client: client, Enter: enter, Exit: exit, Shared: true, ReadOK: true, Read: v, ReadAt: enter + ms,
			ReadAgainOK: true, ReadAgain: v}
	}
	clean := []nemesis.Section{
		committed(0, 0, 10*ms, 0),
		read(1, 11*ms, 20*ms, 1),
		read(2, 12*ms, 22*ms, 1), // overlaps the other reader: fine
		committed(0, 23*ms, 30*ms, 1),
	}
	r := nemesis.Check(clean, 2)
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, 2, r.Reads)

	changed := read(1, 5*ms, 15*ms, 0) // inside the writer's section, which wrote 1 at 9ms
	changed.ReadAgain = 1
	bad := []nemesis.Section{committed(0, 0, 10*ms, 0), changed}
	r = nemesis.Check(bad, 1)
	assert.Len(t, r.Overlaps, 1)
	assert.Equal(t, 1, r.ReaderWriterOverlaps)
	require.Len(t, r.StaleReads, 1, "the value changed under the read lock")
	assert.Equal(t, 1, r.StaleReads[0].Client)
}

// onKey returns s as a section of key k.
func onKey(k int, s nemesis.Section) nemesis.Section {
	s.Key = k
	return s
}

func TestCheckKeysChecksEachKeyOnItsOwn(t *testing.T) {
	// Sections of different keys overlap in time: that is no violation,
	// and each key's counter counts from 0.
	h := []nemesis.Section{
		onKey(0, committed(0, 0, 10*ms, 0)),
		onKey(1, committed(1, 5*ms, 15*ms, 0)),
		onKey(0, committed(1, 16*ms, 20*ms, 1)),
		onKey(1, committed(0, 16*ms, 20*ms, 1)),
	}
	r := nemesis.CheckKeys(h, []int64{2, 2})
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, porcupine.Ok, r.Linearizable)
	assert.Equal(t, 4, r.Committed)
	assert.Equal(t, int64(4), r.Final)

	// The same history checked as one key is full of violations.
	assert.Positive(t, nemesis.Check(h, 4).Violations())
}

func TestCheckKeysFindsAViolationOnOneKey(t *testing.T) {
	h := []nemesis.Section{
		onKey(0, committed(0, 0, 10*ms, 0)),
		onKey(1, committed(1, 0, 10*ms, 0)),
		onKey(1, committed(2, 5*ms, 15*ms, 0)), // overlaps client 1 on key 1
	}
	r := nemesis.CheckKeys(h, []int64{1, 1})
	require.Len(t, r.Overlaps, 1, "%v", r)
	assert.Equal(t, 1, r.Overlaps[0].First.Key)
	assert.Equal(t, 1, r.LostUpdates)
	assert.Equal(t, porcupine.Illegal, r.Linearizable)
}

func TestCheckKeysDoesNotLetKeysCancelOut(t *testing.T) {
	// Key 0 lost an update, key 1 holds one nobody committed: the sum of
	// the differences is 0, the violations are not.
	h := []nemesis.Section{
		onKey(0, committed(0, 0, 10*ms, 0)),
		onKey(1, committed(1, 0, 10*ms, 0)),
	}
	r := nemesis.CheckKeys(h, []int64{0, 2})
	assert.Zero(t, r.LostUpdates)
	assert.Equal(t, 2, r.Miscounted())
	assert.Equal(t, 2, r.Violations(), "%v", r)
	assert.True(t, r.DataCorrupted())
}
