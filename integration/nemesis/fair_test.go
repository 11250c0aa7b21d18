package nemesis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/integration/nemesis"
)

// waiter returns a waiter of key 0 that queued from at to at+1ms, waited
// until end, and got the lock or not, in a round that began at end.
func waiter(client int, ticket uint64, at, end time.Duration, granted bool) nemesis.Waiter {
	w := nemesis.Waiter{Client: client, Ticket: ticket, EnqueueAt: at, EnqueuedAt: at + ms, WaitAt: at + ms, End: end, Granted: granted}
	if granted {
		w.GrantFrom = end
	}
	return w
}

func TestCheckFairCleanHistory(t *testing.T) {
	r := nemesis.CheckFair([]nemesis.Waiter{
		waiter(0, 1, 0, 10*ms, true),
		waiter(1, 2, 2*ms, 20*ms, true),
		waiter(2, 3, 3*ms, 30*ms, true),
		waiter(0, 4, 11*ms, 25*ms, false), // gave up before its turn
		waiter(1, 5, 21*ms, 40*ms, true),
	})
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, 5, r.Waiters)
	assert.Equal(t, 4, r.Granted)
}

// A later ticket granted while an earlier one surely waited is reported.
func TestCheckFairReportsPassing(t *testing.T) {
	r := nemesis.CheckFair([]nemesis.Waiter{
		waiter(0, 1, 0, 30*ms, true), // got it only after ticket 2
		waiter(1, 2, 2*ms, 10*ms, true),
	})
	assert.Len(t, r.Passed, 1, "%v", r)
	assert.Equal(t, uint64(2), r.Passed[0].Later.Ticket)
	assert.Equal(t, 1, r.Violations())
}

// A waiter that queued after the grant began may not be passed: it was
// not queued throughout. Nor a lost ticket, nor one of another key.
func TestCheckFairAccountsForExpiredTickets(t *testing.T) {
	late := waiter(0, 1, 5*ms, 30*ms, true)
	lost := waiter(2, 1, 0, 30*ms, false)
	lost.Lost = true
	other := waiter(3, 1, 0, 30*ms, false)
	other.Key = 1
	r := nemesis.CheckFair([]nemesis.Waiter{late, lost, other, waiter(1, 2, 0, 10*ms, true)})
	assert.Empty(t, r.Passed, "%v", r)
	assert.Equal(t, 1, r.Lost)
}

// A waiter that queued after another finished queueing, while that one
// waited, must get a larger ticket; an equal one is reported too.
func TestCheckFairReportsArrivalOrder(t *testing.T) {
	r := nemesis.CheckFair([]nemesis.Waiter{
		waiter(0, 5, 0, 30*ms, false),
		waiter(1, 5, 10*ms, 20*ms, false),
		waiter(2, 3, 12*ms, 20*ms, false),
	})
	assert.Len(t, r.Arrivals, 3, "%v", r) // each later pair
	// Once the first stopped waiting, its counter may restart: no order.
	r = nemesis.CheckFair([]nemesis.Waiter{waiter(0, 5, 0, 5*ms, true), waiter(1, 1, 10*ms, 20*ms, true)})
	assert.Zero(t, r.Violations(), "%v", r)
}

// A granted waiter left the queue when its grant's round ran, before its
// Wait returned: a waiter that queued meanwhile may find the queue empty
// and get ticket 1 again. It is reported only where the grant's round
// began after that one had queued. It fails where the checker takes the
// end of the granted Wait for the time it was still queued.
func TestCheckFairArrivalAfterGrantBegan(t *testing.T) {
	granted := waiter(0, 4, 0, 10*ms, true)
	granted.GrantFrom = 7 * ms
	again := waiter(1, 1, 8*ms, 20*ms, true) // queued 8-9ms: after the grant began
	again.GrantFrom = 15 * ms
	r := nemesis.CheckFair([]nemesis.Waiter{granted, again})
	assert.Zero(t, r.Violations(), "%v", r)
	granted.GrantFrom = 9*ms + ms/2 // still queued when the later one was
	r = nemesis.CheckFair([]nemesis.Waiter{granted, again})
	assert.Len(t, r.Arrivals, 1, "%v", r)
}

// A fair lock call tries until its lock timeout, as a Mutex's Lock does: a
// failed Enqueue is retried, not counted as a failed call. A majority is
// down for 1.5s (3 of 5 killed, restarted empty after more than the 1s
// TTL), so that every Enqueue then fails. A failed call cannot end before
// its 500ms timeout, so each client fails at most Duration/LockTimeout+1
// times, however slow the machine. It fails where one failed Enqueue
// ends the lock call: each client then fails hundreds of times.
func TestFairLockCallsTryUntilTheirTimeout(t *testing.T) {
	sc := scenario(t, "fair: none")
	sc.Name = "fair: majority down"
	sc.Config.Duration, sc.Config.LockTimeout = 6*time.Second, 500*time.Millisecond
	sc.Nemesis = nemesis.KillMinority{Count: 3, Down: 1500 * time.Millisecond, Up: 3 * time.Second}
	rep := runScenario(t, sc)
	f := rep.Fair
	require.NotNil(t, f)
	t.Logf("fair: %v", f)
	assert.Zero(t, rep.Result.Violations(), "%v", rep.Result)
	assert.Zero(t, f.Violations(), "%v", f)
	assert.Positive(t, f.EnqueueFails, "no Enqueue failed: the majority was never down")
	most := sc.Config.Clients * int(sc.Config.Duration/sc.Config.LockTimeout+1)
	assert.LessOrEqual(t, rep.LockFails, most, "lock calls failed before their timeout")
	// The restarted masters count again 1s after their restart: the lock
	// works for about 2s of the run, hundreds of hand-offs.
	assert.Positive(t, f.Granted, "no fair waiter got the lock")
}
