package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// cause is why an acquire or a release failed.
type cause int

const (
	causeHeld     cause = iota // a quorum of masters refused: another worker holds the lock
	causeNoQuorum              // too few masters answered (down, paused, timed out)
	causeExpired               // a quorum agreed, but no validity was left
	causeCtx                   // the run was interrupted
	causeNotHeld               // a release found the lock no longer held by a quorum
	causeOther
	numCauses
)

var causeNames = [numCauses]string{"held", "no-quorum", "expired", "ctx", "not-held", "other"}

// legendFormat explains the counters of the status lines and the summary;
// its arguments are the quorum, the number of masters, the master timeout
// and the PING timeout of "masters up". TestLegend checks that it names
// every cause.
const legendFormat = `--- what the counters mean ---
acquired       a worker took the lock: %[1]d of %[2]d masters agreed within its validity
failed acquire why an attempt did not get the lock (a worker then waits a random backoff):
  held         enough masters refused that no quorum was possible: other workers held the key
               there. The normal outcome of contention. Split votes count here too: several
               workers try at once, each wins some masters and none wins %[1]d (2+2+1 of 5);
               all fail, release what they won and retry. Hence retries after a random
               (jittered) delay, since equal delays would collide again, and Mutex.Lock's
               wake-on-release: waiters retry when the holder releases, one per process at
               a time, instead of polling. (The workers here use TryLock and a jittered
               backoff, so that every failed attempt is counted.)
  no-quorum    too few masters answered within the master timeout (%[3]v) for a quorum:
               masters down, paused or too slow. With a master down, a split vote can end
               here too (2 won, 2 refused, 1 silent).
  expired      a quorum agreed, but the validity (ttl minus the time the attempt took minus
               clock drift) had run out when it was decided: too late to be safe, so undone.
  ctx          the run was stopping (Ctrl-C) during an attempt.
  other        any other error (shown only when there are some, with the first one).
failed release
  not-held     an unlock found fewer than %[1]d masters still holding this worker's lock: it
               had expired, or too few masters answered in time. It is released either way.
masters up     masters answering PING on a new connection within %[4]v, when the line was printed.
overlaps       times a worker entered the critical section while another was inside: mutual
               exclusion violated. Must be 0.
lost updates   the critical section reads a shared counter, pauses, and writes it plus one, so
               overlaps lose increments: critical sections run minus the counter. Must be 0.
`

// classify tells why an acquire failed.
func classify(err error) cause {
	var qe *redlock.QuorumError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return causeCtx // the caller's context: QuorumError matches it only then
	case !errors.As(err, &qe):
		return causeOther
	case qe.Expired:
		return causeExpired
	}
	refused, unreachable := 0, 0
	for _, m := range qe.Masters {
		switch {
		case m.Agreed:
		case errors.Is(m.Err, redlock.ErrHeldElsewhere):
			refused++
		case isUnreachable(m.Err):
			unreachable++
		}
	}
	switch {
	case refused > len(qe.Masters)-qe.Quorum:
		return causeHeld // the refusals alone made a quorum impossible
	case unreachable > 0:
		return causeNoQuorum
	}
	return causeOther
}

// isUnreachable reports whether a master's error says it gave no answer
// (as opposed to an error reply from Redis).
func isUnreachable(err error) bool {
	var reply redis.Error
	switch {
	case errors.Is(err, redlock.ErrMasterTimeout), errors.Is(err, redlock.ErrNoReply):
		return true
	case errors.As(err, &reply):
		return false
	}
	return true // network error, EOF, deadline, pool timeout
}

// stats counts outcomes; it is safe for concurrent use.
type stats struct {
	perWorker []atomic.Int64 // acquisitions
	failed    [numCauses]atomic.Int64
	otherMu   sync.Mutex
	firstErr  error // the first failure classified as other
}

func newStats(workers int) *stats {
	return &stats{perWorker: make([]atomic.Int64, workers)}
}

func (s *stats) acquired(worker int) { s.perWorker[worker].Add(1) }

func (s *stats) acquireFailed(err error) { s.count(classify(err), err) }

func (s *stats) releaseFailed(err error) {
	switch {
	case errors.Is(err, redlock.ErrNotHeld), errors.Is(err, redlock.ErrNoQuorum):
		s.count(causeNotHeld, err) // the legend: expired, or too few answered
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		s.count(causeCtx, err)
	default:
		s.count(causeOther, err)
	}
}

func (s *stats) count(c cause, err error) {
	s.failed[c].Add(1)
	if c == causeOther {
		s.otherMu.Lock()
		if s.firstErr == nil {
			s.firstErr = err
		}
		s.otherMu.Unlock()
	}
}

// snapshot is a moment's view of the counters.
type snapshot struct {
	acquired  int64
	perWorker []int64
	failed    [numCauses]int64
	overlaps  int64
	done      int64 // completed critical sections
	value     int64 // the shared counter
	lost      int64 // done - value: exact once the workers stopped
}

// snapshot reads the counters and the resource. While workers run, lost
// counts only updates lost for sure (done is read before value).
func (s *stats) snapshot(r *resource) snapshot {
	var out snapshot
	out.done = r.done.Load()
	out.value = r.value.Load()
	out.overlaps = r.overlaps.Load()
	out.lost = max(0, out.done-out.value)
	for i := range s.perWorker {
		n := s.perWorker[i].Load()
		out.perWorker = append(out.perWorker, n)
		out.acquired += n
	}
	for c := range s.failed {
		out.failed[c] = s.failed[c].Load()
	}
	return out
}

// failures formats the failure counts; "other" only when there are some.
func (s snapshot) failures() string {
	var b strings.Builder
	for c := range numCauses {
		if c == causeOther && s.failed[c] == 0 {
			continue
		}
		if c > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", causeNames[c], s.failed[c])
	}
	return b.String()
}

// summary is the outcome of a run.
type summary struct {
	snapshot
	elapsed     time.Duration
	interrupted bool
	cfg         config
	masters     string
	numMasters  int
	events      []string
	firstOther  error
}

// ok reports whether the lock was taken at all and mutual exclusion held:
// no overlap, no lost update.
func (s summary) ok() bool { return s.acquired > 0 && s.overlaps == 0 && s.lost == 0 }

// summary collects the outcome; call it after the workers stopped.
func (d *demo) summary(interrupted bool) summary {
	d.stats.otherMu.Lock()
	firstOther := d.stats.firstErr
	d.stats.otherMu.Unlock()
	d.eventMu.Lock()
	events := append([]string(nil), d.events...)
	d.eventMu.Unlock()
	s := summary{
		snapshot:    d.stats.snapshot(&d.res),
		elapsed:     time.Since(d.start),
		interrupted: interrupted,
		cfg:         d.cfg,
		masters:     d.ms.desc,
		numMasters:  len(d.ms.addrs),
		events:      events,
		firstOther:  firstOther,
	}
	s.lost = s.done - s.value // exact now; negative would be a bug in the demo
	return s
}

func (s summary) write(w *lineWriter) {
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-16s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, legendFormat, s.numMasters/2+1, s.numMasters, redlock.DefaultMasterTimeout, pingTimeout)
	b.WriteString("--- summary ---\n")
	run := fmt.Sprintf("%.1fs, %d workers on key %q, ttl %v, %s", s.elapsed.Seconds(), s.cfg.workers, s.cfg.key, s.cfg.ttl, s.masters)
	if s.interrupted {
		run += " (interrupted)"
	}
	line("run", "%s", run)
	lo, hi := minMax(s.perWorker)
	line("acquisitions", "%d (%.0f/s); per worker min %d max %d", s.acquired, float64(s.acquired)/s.elapsed.Seconds(), lo, hi)
	line("failed acquire", "held=%d no-quorum=%d expired=%d ctx=%d",
		s.failed[causeHeld], s.failed[causeNoQuorum], s.failed[causeExpired], s.failed[causeCtx])
	line("failed release", "not-held=%d", s.failed[causeNotHeld])
	if s.failed[causeOther] > 0 {
		line("other errors", "%d, first: %v", s.failed[causeOther], s.firstOther)
	}
	if len(s.events) == 0 {
		line("master events", "none")
	}
	for i, e := range s.events {
		label := ""
		if i == 0 {
			label = "master events"
		}
		line(label, "%s", e)
	}
	line("overlaps", "%d", s.overlaps)
	line("lost updates", "%d (counter %d, critical sections %d)", s.lost, s.value, s.done)
	switch {
	case s.ok():
		line("result", "PASS: no overlapping critical sections, no lost updates")
	case s.acquired == 0:
		line("result", "FAIL: the lock was never acquired")
	default:
		line("result", "FAIL: mutual exclusion was violated")
	}
	w.printf("%s", b.String())
}

func minMax(v []int64) (lo, hi int64) {
	for i, x := range v {
		if i == 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	return lo, hi
}
