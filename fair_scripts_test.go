package redlock

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// fairScripts runs a fair lock's scripts on the lock key of one master.
type fairScripts struct {
	t   *testing.T
	rdb *redis.Client
	key string
}

func (f fairScripts) run(s *redis.Script, args ...any) int64 {
	f.t.Helper()
	n, err := s.Run(f.t.Context(), f.rdb, []string{f.key}, args...).Int64()
	require.NoError(f.t, err)
	return n
}

func (f fairScripts) enqueue(id string, waitMs int64) int64 {
	return f.run(fairEnqueueScript, id, waitMs)
}

// ahead is the renewal's reply less one: the live waiters ahead of id.
func (f fairScripts) ahead(id string, ticket, waitMs int64) int64 {
	return f.run(fairRenewScript, id, waitMs, ticket) - 1
}

// lock runs a Lock's script s for waiter id of ticket, with the Lock's
// nonce, and its holds after the call.
func (f fairScripts) lock(s *redis.Script, id, nonce string, holds, ticket, waitMs int64, mark ...any) int64 {
	queued := []any{id, 60_000, holds, 0, strconv.FormatInt(ticket, 10) + ":" + strconv.FormatInt(waitMs, 10), nonce}
	return f.run(s, append(queued, mark...)...)
}

// An undo that comes after its waiter left, or after the waiter took the
// lock with a later attempt, finds none of its Lock's hold and queues
// nothing. It fails where the undo queues the entry in any case: the
// waiter behind is held back (Position 1, and refused) for the late
// entry's waiter TTL. An entry a late call does queue (an enqueue after
// its undo) lives one waiter TTL from when it lands, then the next waiter
// is first again. Bound: 300ms; margin 300ms.
func TestFairLateUndoQueuesNothingOnARealMaster(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("late")}
	const wait = 60_000
	q := queueKey(f.key)

	w, v := f.enqueue("w", wait), f.enqueue("v", wait)
	require.Equal(t, int64(1), f.run(fairLeaveScript, "w", wait), "w cancels")
	assert.Equal(t, int64(0), f.lock(fairMode.undo, "w", "n1", 0, w, wait, markMissing),
		"the late undo of w's attempt finds nothing")
	assert.Equal(t, redis.Nil, f.rdb.ZScore(t.Context(), q, "w").Err(), "the cancelled w is queued again")
	assert.Equal(t, int64(0), f.ahead("v", v, wait))

	u := f.enqueue("u", wait)
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "v", "n2", 1, v, wait), "v takes the lock")
	assert.Equal(t, int64(0), f.lock(fairMode.undo, "v", "n0", 0, v, wait, markMissing),
		"the late undo of v's earlier attempt finds nothing")
	assert.Equal(t, int64(0), f.ahead("u", u, wait), "v, the holder, is queued again")
	assert.Equal(t, int64(1), f.lock(fairMode.release, "v", "n2", 0, v, wait))

	// An undo that finds its Lock's hold puts the entry back.
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "u", "n3", 1, u, wait))
	assert.Equal(t, int64(1), f.lock(fairMode.undo, "u", "n3", 0, u, wait, markMissing))
	assert.Equal(t, int64(0), f.ahead("u", u, wait), "u is queued again")
	require.Equal(t, int64(1), f.run(fairLeaveScript, "u", wait))

	// A late enqueue of a waiter that left queues it for one waiter TTL.
	const short = 300
	x := f.enqueue("x", wait)
	f.enqueue("late", short)
	require.Equal(t, int64(1), f.run(fairLeaveScript, "late", short))
	late := f.enqueue("late", short) // the call that lands after the leave
	require.Greater(t, late, x)
	y := f.enqueue("y", wait)
	assert.Equal(t, int64(2), f.ahead("y", y, wait), "x and the late entry")
	time.Sleep((short + 300) * time.Millisecond)
	assert.Equal(t, int64(1), f.ahead("y", y, wait), "the late entry expired")
}

// A grant drops its waiter's entry, but its round may fail and its undo
// put the entry back under the same ticket: until then a later enqueue
// must still count above that ticket, even where the queue is left empty
// (the grant took the last entry, or the waiter behind left or expired).
// Every master of a quorum runs the same scripts, so one master shows it.
// It fails where the counter goes with the last entry: the later waiter
// gets ticket 1, queues ahead of the earlier one, and takes the lock
// first ("Why the order holds", 1).
func TestFairGrantInFlightKeepsTheCounter(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("inflight")}
	const wait = 60_000
	q := queueKey(f.key)

	f.enqueue("z", wait)
	b := f.enqueue("b", wait) // ticket 2
	require.Equal(t, int64(1), f.run(fairLeaveScript, "z", wait))
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n1", 1, b, wait), "b's attempt is granted here")
	a := f.enqueue("a", wait)
	assert.Greater(t, a, b, "a queued after b, which still waits")
	require.Equal(t, int64(1), f.lock(fairMode.undo, "b", "n1", 0, b, wait, markMissing), "b's round failed")
	assert.Equal(t, int64(0), f.ahead("b", b, wait), "b is first again")
	assert.Equal(t, int64(replyQueued), f.lock(fairMode.acquire, "a", "n2", 1, a, wait), "a is refused: b is ahead")
	require.Equal(t, int64(1), f.run(fairLeaveScript, "a", wait))

	// The waiter behind leaves, or expires, while b's grant is in flight.
	w := f.enqueue("w", wait)
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n3", 1, b, wait))
	require.Equal(t, int64(1), f.run(fairLeaveScript, "w", wait))
	a = f.enqueue("a", wait)
	assert.Greater(t, a, b, "after a leave")
	require.Equal(t, int64(1), f.run(fairLeaveScript, "a", wait))
	f.enqueue("e", 1)
	time.Sleep(5 * time.Millisecond) // e expires: the next script drops it
	a = f.enqueue("a", wait)
	assert.Greater(t, a, b, "after an expiry")
	require.Equal(t, int64(1), f.run(fairLeaveScript, "a", wait))
	require.Equal(t, int64(1), f.lock(fairMode.undo, "b", "n3", 0, b, wait, markMissing))
	assert.Less(t, w, a)

	// A grant that holds: its release leaves only the counter, to expire.
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n4", 1, b, wait))
	require.Equal(t, int64(1), f.lock(fairMode.release, "b", "n4", 0, b, wait))
	assertOnlyCounter(t, f, q, wait)
}

// A grant that its round then undoes keeps the ticket counter: a waiter
// that queues between the two gets a ticket after the undone waiter's,
// not a counter restarted at 1 that puts it ahead once the undo queued
// the first waiter again. It fails where the grant, or another waiter's
// leave while the lock is held, deletes the counter of the queue it left
// empty: the later waiter gets ticket 1 and passes. The counter expires
// a waiter TTL after its last renewal.
func TestFairUndoneGrantKeepsTheCounter(t *testing.T) {
	for _, other := range []bool{false, true} {
		name := "grant empties the queue"
		if other {
			name = "a leave empties it"
		}
		t.Run(name, func(t *testing.T) {
			cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
			f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("undone")}
			const wait = 60_000
			q := queueKey(f.key)

			w, b := f.enqueue("w", wait), f.enqueue("b", wait)
			require.Equal(t, int64(1), f.lock(fairMode.acquire, "w", "n0", 1, w, wait), "w takes the lock")
			if other {
				f.enqueue("c", wait)
			}
			require.Equal(t, int64(1), f.lock(fairMode.release, "w", "n0", 0, w, wait))
			require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n1", 1, b, wait), "b's grant, which its round will undo")
			if other {
				require.Equal(t, int64(1), f.run(fairLeaveScript, "c", wait), "c leaves the queue empty")
			}
			a := f.enqueue("a", wait) // queued after b, which still waits
			assert.Greater(t, a, b, "a's ticket")
			require.Equal(t, int64(1), f.lock(fairMode.undo, "b", "n1", 0, b, wait, markMissing), "b's undo")
			assert.Equal(t, int64(0), f.ahead("b", b, wait), "b is first again")
			assert.Equal(t, int64(1), f.ahead("a", a, wait), "b is ahead of a")
			assert.Equal(t, int64(replyQueued), f.lock(fairMode.acquire, "a", "n2", 1, a, wait), "a is refused")

			require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n3", 1, b, wait))
			require.Equal(t, int64(1), f.run(fairLeaveScript, "a", wait))
			n, err := f.rdb.Exists(t.Context(), q+"c").Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "the counter while b holds the lock")
			require.Equal(t, int64(1), f.lock(fairMode.release, "b", "n3", 0, b, wait))
			assertOnlyCounter(t, f, q, wait)
		})
	}
}

// A failed attempt of waiter b that two of three masters granted drops
// b's entry there until its undo lands, which a cut can delay for as long
// as the cut lasts; meanwhile b's renewals count those masters, where it
// holds the lock, so b stays queued. A waiter a that queues meanwhile,
// on those two masters (the third is cut), must still get a ticket after
// b's. It fails where a master deletes its counter once its queue is
// empty: a gets ticket 1, behind b's 2 in arrival but ahead of it in the
// queue, and takes the lock first once b's undo lands.
func TestFairTicketsFollowArrivalAcrossAFailedGrant(t *testing.T) {
	cl := harness.NewProcessCluster(t, 3, harness.ProcessOptions{})
	const wait = 60_000
	m := make([]fairScripts, 3)
	for i := range m {
		m[i] = fairScripts{t: t, rdb: cl.Admin(i), key: lockKey("arrival")}
	}
	var b int64
	for _, s := range m {
		s.enqueue("x", wait)
		b = s.enqueue("b", wait)
		s.run(fairLeaveScript, "x", wait)
	}
	require.Equal(t, int64(2), b)

	// b's attempt lands on m0 and m1, whose replies are lost: the round
	// fails, and its undo waits for the cut to heal.
	for _, s := range m[:2] {
		require.Equal(t, int64(1), s.lock(fairMode.acquire, "b", "n1", 1, b, wait), "b's grant drops its entry")
		assert.Equal(t, int64(0), s.ahead("b", b, wait), "b's renewal: b holds the lock here")
	}
	var a int64
	for _, s := range m[:2] { // m2 is cut
		a = max(a, s.enqueue("a", wait))
	}
	assert.Greater(t, a, b, "a queued after b, which is still queued")

	for _, s := range m[:2] {
		require.Equal(t, int64(1), s.lock(fairMode.undo, "b", "n1", 0, b, wait, markMissing), "the undo lands after the heal")
		assert.Equal(t, int64(replyQueued), s.lock(fairMode.acquire, "a", "n2", 1, a, wait), "a is refused: b is ahead")
	}
}

// A renewal that counts a master where the waiter holds the lock (a failed
// attempt's grant whose undo has not landed) keeps the ticket counter
// there at least at the ticket for the waiter TTL, as it would with an
// entry. It fails where it leaves the counter to the TTL of the entry
// the grant dropped (here 1s), which can run out while the renewals count
// the master: a later waiter would get a smaller ticket.
func TestFairRenewalWhereHeldKeepsTheCounter(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("held")}
	const short, wait = 1_000, 60_000
	qc := queueKey(f.key) + "c"
	b := f.enqueue("b", short)
	require.Equal(t, int64(1), f.lock(fairMode.acquire, "b", "n1", 1, b, short))
	require.Equal(t, redis.Nil, f.rdb.ZScore(t.Context(), queueKey(f.key), "b").Err(), "the grant dropped b's entry")
	assert.Equal(t, int64(0), f.ahead("b", b, wait), "b holds the lock here")
	left, err := f.rdb.PTTL(t.Context(), qc).Result()
	require.NoError(t, err)
	assert.Greater(t, left, time.Duration(short)*time.Millisecond, "the counter lives the renewal's waiter TTL")
	n, err := f.rdb.Get(t.Context(), qc).Int64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, b)
}

// assertOnlyCounter asserts that of queue q only its counter is left,
// expiring within wait ms.
func assertOnlyCounter(t *testing.T, f fairScripts, q string, wait int64) {
	t.Helper()
	n, err := f.rdb.Exists(t.Context(), q, q+"e").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "queue keys left once the queue is empty and the lock free")
	left, err := f.rdb.PTTL(t.Context(), q+"c").Result()
	require.NoError(t, err)
	assert.True(t, left > 0 && left <= time.Duration(wait)*time.Millisecond, "the counter expires: %v", left)
}

// A fair acquire tells its refusals apart: a live waiter ahead of the
// ticket (replyQueued), or the lock held with no one ahead (0); a try
// learns from it whether to try at the next release. A refusal that
// names a waiter ahead counts as such only where the others cannot make
// a quorum. It fails where both refusals reply 0: the waiter behind
// cannot tell, and tries at every release.
func TestFairAcquireNamesTheWaiterAhead(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("named")}
	const wait = 60_000
	a := f.enqueue("a", wait)
	b := f.enqueue("b", wait)
	held := f.run(exclusiveMode.acquire, "m", 60_000, 1, 0, 0, "n0") // a Mutex of the name
	require.Equal(t, int64(1), held)
	assert.Equal(t, int64(0), f.lock(fairMode.acquire, "a", "n1", 1, a, wait), "a is first: the lock is held")
	assert.Equal(t, int64(replyQueued), f.lock(fairMode.acquire, "b", "n2", 1, b, wait), "a is ahead of b")

	refused := func(named ...int64) error {
		return &QuorumError{Quorum: 3, Masters: make([]MasterResult, 5), sentinel: ErrNotObtained, named: named}
	}
	assert.Equal(t, 1, queuedAhead(refused(replyQueued, replyQueued, replyQueued, 0, 0)), "the other two cannot make a quorum")
	assert.Equal(t, 0, queuedAhead(refused(replyQueued, replyQueued, 0, 0, 0)), "three may grant at the next release")
	assert.Equal(t, 0, queuedAhead(refused()), "no refusal named anything")
	assert.Equal(t, -1, queuedAhead(ErrNotObtained), "no round's")
}

// A renewal that counts a master where the waiter holds the lock (a
// failed attempt's grant whose undo never landed: its retries gave up)
// counts it for the whole waiter TTL, but the lock refuses later waiters
// there only until it expires. Where it expires sooner, the renewal
// queues the waiter again, so that the master refuses a later ticket
// through the renewal's lease as a queued waiter would. It fails where
// the renewal keeps only the counter: once the 300ms lock expired, the
// later waiter a is granted the lock here while b's lease (60s) runs; a
// quorum that shares only this master with b's renewal grants a first.
func TestFairRenewalWhereHeldBrieflyQueuesAgain(t *testing.T) {
	cl := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	f := fairScripts{t: t, rdb: cl.Admin(0), key: lockKey("brief")}
	const lockTTL, wait = 300, 60_000
	queued := func(ticket int64) string { return strconv.FormatInt(ticket, 10) + ":" + strconv.FormatInt(wait, 10) }
	b := f.enqueue("b", wait)
	require.Equal(t, int64(1), f.run(fairMode.acquire, "b", lockTTL, 1, 0, queued(b), "n1"), "b's failed attempt, never undone")
	assert.Equal(t, int64(0), f.ahead("b", b, wait), "b's renewal: b holds the lock here")
	time.Sleep((lockTTL + 200) * time.Millisecond) // the lock expires; b's lease runs
	a := f.enqueue("a", wait)
	assert.Greater(t, a, b, "a queued after b")
	assert.Equal(t, int64(replyQueued), f.lock(fairMode.acquire, "a", "n2", 1, a, wait), "a is refused: b is still queued")

	// Where the lock outlives the renewal's lease, the lock refuses alone.
	c := f.enqueue("c", wait)
	require.Equal(t, int64(1), f.run(fairLeaveScript, "b", wait))
	require.Equal(t, int64(1), f.run(fairLeaveScript, "a", wait))
	require.Equal(t, int64(1), f.run(fairMode.acquire, "c", 2*wait, 1, 0, queued(c), "n3"))
	assert.Equal(t, int64(0), f.ahead("c", c, wait), "c holds the lock here")
	assert.Equal(t, redis.Nil, f.rdb.ZScore(t.Context(), queueKey(f.key), "c").Err(), "c is not queued again")
}
