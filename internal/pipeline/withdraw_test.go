package pipeline

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Withdraw takes back the queued calls of its group, and only those, once
// the master has been busy for at least behind: each sets its bit in
// unsent before Withdraw returns, is answered ErrWithdrawn and never
// reaches the master; so is a call of the group made afterwards. Other
// calls, and the same group's calls on a master busy for less than behind,
// are sent.
func TestPipelineWithdraw(t *testing.T) {
	m, admin, p := startMaster(t)
	occupied := occupy(t, m, p)
	groupA, groupB := new(Group), new(Group)
	var unsentA, unsentB atomic.Uint64
	type result struct {
		err error
		key string
	}
	results := make(chan result, 4)
	run := func(key string, group *Group, unsent *atomic.Uint64, index int) {
		_, err := goWait(t.Context(), p, incrScript, NewKeys(key), Options{Group: group, Unsent: unsent, Index: index})
		results <- result{err, key}
	}
	go run("a1", groupA, &unsentA, 1)
	go run("a3", groupA, &unsentA, 3)
	go run("b", groupB, &unsentB, 2)
	go func() {
		_, err := p.Run(t.Context(), incrScript, NewKeys("plain"), nil, false)
		results <- result{err, "plain"}
	}()
	poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 4 })

	p.Withdraw(groupA, time.Hour) // not busy for that long: nothing
	assert.Equal(t, 4, queueLen(p))
	assert.Zero(t, unsentA.Load())

	time.Sleep(2 * time.Millisecond)
	p.Withdraw(groupA, time.Millisecond)
	assert.Equal(t, uint64(1<<1|1<<3), unsentA.Load(), "set before Withdraw returns")
	assert.Zero(t, unsentB.Load())
	assert.Equal(t, 2, queueLen(p))
	for range 2 {
		r := <-results
		assert.Contains(t, []string{"a1", "a3"}, r.key)
		assert.ErrorIs(t, r.err, ErrWithdrawn)
		assert.ErrorIs(t, r.err, ErrNotSent)
	}

	// Made after Withdraw: not queued at all.
	_, err := goWait(t.Context(), p, incrScript, NewKeys("a0"), Options{Group: groupA, Unsent: &unsentA})
	assert.ErrorIs(t, err, ErrWithdrawn)
	assert.Equal(t, uint64(1<<0|1<<1|1<<3), unsentA.Load())

	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-occupied)
	for range 2 {
		assert.NoError(t, (<-results).err)
	}
	// The master is idle once the sender has ended its last batch (which
	// may take a while after its replies on a busy machine): a call of the
	// same group goes out.
	poll(t, 5*time.Second, "idle", func() bool { return idle(p) })
	_, err = goWait(t.Context(), p, incrScript, NewKeys("a4"), Options{Group: groupA, Unsent: &unsentA, Index: 4})
	assert.NoError(t, err)
	assert.Equal(t, int64(1), getInt(t, admin, "a4"))
	assert.Zero(t, getInt(t, admin, "a0"))
	assert.Zero(t, getInt(t, admin, "a1"))
	assert.Zero(t, getInt(t, admin, "a3"))
	assert.Equal(t, int64(1), getInt(t, admin, "b"))
	assert.Equal(t, int64(1), getInt(t, admin, "plain"))
	s := statsOf(p)
	assert.Equal(t, 3, s.withdrawn)
	assert.Zero(t, p.loose)
}

// A call made by a caller that the sender has just answered, while the
// sender lets it run before taking the next batch, is not behind a call in
// flight, however long the last batch took: it is queued and sent, not
// withdrawn. One P (GOMAXPROCS 1) makes the caller run in that yield.
func TestPipelineNothingBehindWhileTheSenderYields(t *testing.T) {
	_, admin, p := startMaster(t)
	p.slowYield = time.Hour // it yields whatever a busy machine does
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	group := new(Group)
	var unsent atomic.Uint64
	answered := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		<-answered // readied by the first call's Completion, on the sender
		p.Withdraw(group, time.Nanosecond)
		_, err := goWait(t.Context(), p, incrScript, NewKeys("next"), Options{Group: group, Unsent: &unsent})
		result <- err
	}()
	p.Go(t.Context(), incrScript, NewKeys("first"), nil, Options{}, completion(func(int64, error) { close(answered) }))
	require.NoError(t, <-result)
	assert.Zero(t, unsent.Load())
	assert.Equal(t, int64(1), getInt(t, admin, "next"))
	assert.Zero(t, statsOf(p).withdrawn)
}

type skipIndex int

func (s skipIndex) Skip(i int) bool { return i == int(s) }

// A kept call whose Skipper says so is answered 0 without being sent,
// whether it would go alone or in a batch; the Skipper is asked when the
// call would be sent, not when it is made.
func TestPipelineKeptCallSkipped(t *testing.T) {
	m, admin, p := startMaster(t)
	v, err := goWait(t.Context(), p, incrScript, NewKeys("alone"), Options{MustSend: true, Skip: skipIndex(1), Index: 1})
	require.NoError(t, err)
	assert.Zero(t, v)
	v, err = goWait(t.Context(), p, incrScript, NewKeys("alone"), Options{MustSend: true, Skip: skipIndex(1), Index: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(1), v, "not skipped: sent")

	occupied := occupy(t, m, p)
	var skipNow atomic.Bool
	lateSkip := skipper(func(int) bool { return skipNow.Load() })
	done := make(chan int64, 2)
	go func() {
		v, _ := goWait(context.Background(), p, incrScript, NewKeys("queued"), Options{MustSend: true, Skip: lateSkip})
		done <- v
	}()
	go func() {
		v, _ := goWait(context.Background(), p, incrScript, NewKeys("queued"), Options{MustSend: true, Skip: skipIndex(1)})
		done <- v
	}()
	poll(t, 5*time.Second, "both queued", func() bool { return queueLen(p) == 2 })
	skipNow.Store(true)
	require.NoError(t, m.Resume(t.Context()))
	require.NoError(t, <-occupied)
	assert.ElementsMatch(t, []int64{0, 1}, []int64{<-done, <-done})
	assert.Equal(t, int64(1), getInt(t, admin, "queued"), "only the call not skipped")
	assert.Equal(t, 2, statsOf(p).skipped)
}

type skipper func(int) bool

func (s skipper) Skip(i int) bool { return s(i) }
