package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/clip"
)

// Errors an operation returns (docs/errors.md).
var (
	// ErrNotObtained means an acquire did not get the lock.
	ErrNotObtained = errors.New("redlock: lock not obtained")
	// ErrNotHeld means the lock is surely not held by a quorum any more.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrNoQuorum: too few masters answered to tell; it may still be held.
	ErrNoQuorum = errors.New("redlock: too few masters answered to decide")
	// ErrInvalidArgument marks a value that cannot work; the message names it.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrUpgrade means a reader asked for the write lock of its name.
	ErrUpgrade = errors.New("redlock: read-to-write upgrade refused: it would deadlock")
	// ErrReleased is Lock.Err after the lock was released.
	ErrReleased = errors.New("redlock: lock released")
	// ErrClosed is returned by operations started after Client.Close.
	ErrClosed = errors.New("redlock: client closed")
)

// A master's errors, in a QuorumError's MasterResult.Err, and Verify's.
// ErrMasterSilent (it stopped answering) and ErrWithdrawn (its call was
// withdrawn) match ErrNoReply.
var (
	ErrHeldElsewhere   = errors.New("redlock: held by another owner")
	ErrNoReply         = errors.New("redlock: no reply before the quorum was decided")
	ErrMasterTimeout   = errors.New("redlock: no reply within the master timeout")
	ErrMasterSilent    = error(silentError{})
	ErrWithdrawn       = error(withdrawnError{})
	ErrNotReplicated   = errors.New("redlock: the write did not reach every replica in time")
	ErrQuarantined     = errors.New("redlock: the master reaches a new server, which counts toward no new lock for the longest TTL")
	ErrReplica         = errors.New("redlock: a replica does not count toward a quorum")
	ErrSameServer      = errors.New("redlock: masters are the same server")
	ErrReplayingClient = errors.New("redlock: the go-redis client may replay a lock call")
)

// withdrawnError is ErrWithdrawn. Like silentError, it matches ErrNoReply
// without repeating its text.
type withdrawnError struct{}

func (withdrawnError) Error() string {
	return "redlock: withdrawn: not sent to a master that was behind"
}

// Is matches ErrNoReply: the round was decided before the call was sent.
func (withdrawnError) Is(target error) bool { return target == ErrNoReply }

// silentError is ErrMasterSilent. It says once why the master told
// nothing, and still matches ErrNoReply: %w would repeat its text.
type silentError struct{}

func (silentError) Error() string { return "redlock: master silent: not asked, or not waited for" }

// Is matches ErrNoReply: a silent master gave the round no reply.
func (silentError) Is(target error) bool { return target == ErrNoReply }

// heldError is a master's refusal of a multi-resource lock that found
// name held. It matches ErrHeldElsewhere and names the name, once.
type heldError struct{ name string }

func (e heldError) Error() string { return "redlock: " + quote(e.name) + " held by another owner" }

// Is matches ErrHeldElsewhere: %w would repeat its text.
func (heldError) Is(target error) bool { return target == ErrHeldElsewhere }

// MasterResult is one master's part in a quorum round.
type MasterResult struct {
	Master  string        // the master's address, or "master<i>" when unknown
	Agreed  bool          // the master applied the operation, and it counts
	Err     error         // why it did not agree, or why its agreement does not count
	Latency time.Duration // its answer's time from the round's start, for an Observer
}

// QuorumError is a round that did not reach its quorum in time. It
// matches ErrNotObtained for an acquire, ErrNotHeld or ErrNoQuorum for an
// extend or release, and the caller's context error if that ended.
type QuorumError struct {
	Op      string         // "acquire", "fence", "extend", "renew", "release" or "resume"
	Key     string         // the lock key, without prefix
	Quorum  int            // how many masters had to agree
	Agreed  int            // how many agreed by the decision
	Expired bool           // a quorum agreed, but no validity was left
	Elapsed time.Duration  // from the first request to the decision
	Masters []MasterResult // one per master, in the order given to New

	sentinel error // ErrNotObtained, ErrNotHeld or ErrNoQuorum
	ctxErr   error // the caller's context error, if it ended
	upgrade  bool  // a master refused an upgrade
	late     bool  // Expired: a fencing acquire decided after a quarter of its TTL

	// held are the verdicts (ErrNotReplicated, ErrQuarantined) of the
	// agreements that did not count, where counting them would have
	// made the quorum.
	held []error

	// named are the masters' refusals that named something, by master
	// index: a permit's free slot (see sem_acquire in scripts.lua). nil
	// where no refusal did.
	named []int64

	// lostBy, if set, says why a round that too few masters answered
	// (ErrNoQuorum) still matches ErrNotHeld. The lock is lost anyway.
	lostBy string
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s %s: ", e.sentinel, e.Op, quote(e.Key))
	if e.late {
		fmt.Fprintf(&b, "%d of %d masters agreed, but only after %v, more than a quarter of the TTL: too late for a fencing token", e.Agreed, len(e.Masters), e.Elapsed)
	} else if e.Expired {
		fmt.Fprintf(&b, "%d of %d masters agreed, but the validity ran out after %v", e.Agreed, len(e.Masters), e.Elapsed)
	} else {
		// What decided the round: the agreements, the refusals, the
		// agreements that do not count, the error replies, and the
		// masters that told nothing.
		refused, uncounted, failed := 0, 0, 0
		for _, m := range e.Masters {
			switch {
			case m.Agreed:
			case isRefusal(m.Err):
				refused++
			case isUncounted(m.Err), errors.Is(m.Err, ErrNotReplicated), errors.Is(m.Err, ErrQuarantined):
				uncounted++
			case isReply(m.Err):
				failed++
			}
		}
		fmt.Fprintf(&b, "%d of %d masters agreed, %d needed", e.Agreed, len(e.Masters), e.Quorum)
		for _, part := range []struct {
			n    int
			what string
		}{
			{refused, "refused"},
			{uncounted, "did not count"},
			{failed, "failed"},
			{len(e.Masters) - e.Agreed - refused - uncounted - failed, "gave no answer"},
		} {
			if part.n > 0 {
				fmt.Fprintf(&b, ", %d %s", part.n, part.what)
			}
		}
	}
	if e.ctxErr != nil {
		fmt.Fprintf(&b, ": %v", e.ctxErr)
	}
	switch {
	case e.sentinel == ErrNoQuorum:
		b.WriteString("; the lock may still be held")
	case e.lostBy != "":
		b.WriteString("; " + e.lostBy)
	}
	sep := " ("
	for _, m := range e.Masters {
		if m.Agreed || (e.ctxErr != nil && m.Err == e.ctxErr) { // said once above
			continue
		}
		reason := "no answer"
		if m.Err != nil { // every sentinel says "redlock:" already
			reason = strings.TrimPrefix(m.Err.Error(), "redlock: ")
		}
		fmt.Fprintf(&b, "%s%s: %s", sep, m.Master, reason)
		sep = "; "
	}
	if sep != " (" {
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap exposes the sentinel, the caller's context error, and any
// ErrNotReplicated or ErrQuarantined that cost the quorum.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.sentinel}
	if e.lostBy != "" {
		errs = append(errs, ErrNoQuorum)
	}
	if e.upgrade {
		errs = append(errs, ErrUpgrade)
	}
	errs = append(errs, e.held...)
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}

// Failed returns the masters that did not agree.
func (e *QuorumError) Failed() []MasterResult {
	var out []MasterResult
	for _, m := range e.Masters {
		if !m.Agreed {
			out = append(out, m)
		}
	}
	return out
}

// checkContext rejects a nil context before an operation touches any
// state. A panic halfway would leave the client or the lock broken.
func checkContext(ctx context.Context, op string) error {
	if ctx == nil {
		return invalidf("%s: nil context", op)
	}
	return nil
}

// isRefusal reports whether a master's error in a QuorumError says it
// answered no, as opposed to giving no usable answer.
func isRefusal(err error) bool {
	_, held := err.(heldError)
	return held || err == ErrNotHeld || err == ErrHeldElsewhere || err == ErrUpgrade
}

// isUncounted reports whether a master's error says it agreed, but its
// agreement does not count. It is a replica, or a server that counted
// already. It never will.
func isUncounted(err error) bool {
	return errors.Is(err, ErrSameServer) || errors.Is(err, ErrReplica)
}

// heldBack returns the sentinels of the agreements that did not count
// only because a failover could lose them, where they cost the quorum.
// They did if, counted, they and the other agreements seen make one. An
// agreement heard after the decision is one: the held-back ones ended
// the round before it.
func (e *QuorumError) heldBack() []error {
	if e.Expired || e.Agreed >= e.Quorum {
		return nil
	}
	var held []error
	n := 0
	for _, m := range e.Masters {
		if m.Err == errAgreedLate {
			n++
		}
	}
	for _, target := range []error{ErrNotReplicated, ErrQuarantined} {
		found := false
		for _, m := range e.Masters {
			if !m.Agreed && errors.Is(m.Err, target) {
				n++
				found = true
			}
		}
		if found {
			held = append(held, target)
		}
	}
	if e.Agreed+n < e.Quorum {
		return nil
	}
	return held
}

// refusedQuorum reports whether the others cannot make a quorum. That is
// when too many masters answered that they do not hold the lock
// (ErrNotHeld), or do not count.
func (e *QuorumError) refusedQuorum() bool {
	refused := 0
	for _, m := range e.Masters {
		if m.Err == ErrNotHeld || isUncounted(m.Err) {
			refused++
		}
	}
	return refused > len(e.Masters)-e.Quorum
}

// lost returns e, a round that too few masters answered (ErrNoQuorum),
// as the error of a lock lost anyway. why says the reason. The result
// matches ErrNotHeld, and still ErrNoQuorum. Other errors are returned as
// they are.
func (e *QuorumError) lost(why string) *QuorumError {
	if e.sentinel != ErrNoQuorum {
		return e
	}
	l := *e
	l.sentinel, l.lostBy = ErrNotHeld, why
	return &l
}

// errAgreedLate is the error of a master whose agreement to an acquire
// came after the round was decided and failed. It did not count, and is
// undone.
var errAgreedLate = fmt.Errorf("%w (it agreed later: undone)", ErrNoReply)

// quote quotes a key or value for an error message, cut short.
func quote(s string) string { return clip.Quote(s) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// errClosedOp is the error of operation op on key once Client.Close has
// begun.
func errClosedOp(op, key string) error {
	return fmt.Errorf("%w: %s %s", ErrClosed, op, quote(key))
}
