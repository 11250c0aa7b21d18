package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrNotObtained means an acquire did not get the lock: it is held
	// elsewhere, too few masters answered, or the validity ran out before a
	// quorum agreed.
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrNotHeld means an extend or release found that the lock is no longer
	// held with this value by a quorum of masters: it expired, was released,
	// or too few masters answered to tell.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrInvalidArgument marks an option, key, TTL or context that cannot
	// work; the wrapping message names the value and why. Every method
	// refuses a nil context with it before it changes anything.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// ErrUpgrade means an owner holding a read lock asked for the write
	// lock of the same name: granting it would wait for its own read lock
	// forever. Release the read lock first.
	ErrUpgrade = errors.New("redlock: read-to-write upgrade refused: it would deadlock")

	// ErrReleased is Lock.Err after the lock was released.
	ErrReleased = errors.New("redlock: lock released")

	// ErrClosed is returned by operations started after Client.Close.
	ErrClosed = errors.New("redlock: client closed")

	// ErrHeldElsewhere is a master's error in a QuorumError when it refused
	// an acquire: another owner holds the lock there (for a read lock,
	// also: a writer waits).
	ErrHeldElsewhere = errors.New("redlock: held by another owner")

	// ErrNoReply is a master's error in a QuorumError when the round was
	// decided before that master answered.
	ErrNoReply = errors.New("redlock: no reply before the quorum was decided")

	// ErrMasterTimeout is a master's error in a QuorumError when it did not
	// answer within Options.MasterTimeout. (With go-redis' default dial
	// retries, five 100ms apart, a master that refuses connections ends
	// here too; DialerRetries: 1 reports the refusal itself.)
	// Client.Verify wraps it for a master that did not answer within
	// 4*MasterTimeout.
	ErrMasterTimeout = errors.New("redlock: no reply within the master timeout")
)

// MasterResult is one master's part in a quorum round.
type MasterResult struct {
	Master string // the master's address, or "master<i>" when unknown
	Agreed bool   // the master applied the operation, and it counts
	// Err says why the master did not agree: ErrHeldElsewhere when it
	// refused an acquire, ErrNotHeld when it refused a re-entry, extend or
	// release (the lock is not ours there), ErrUpgrade, ErrMasterTimeout,
	// ErrNoReply, the caller's context error, or the master's own error. A
	// master whose agreement does not count has ErrReplica or a
	// *SameServerError here.
	Err error
	// Latency is how long the master took to answer, from the round's
	// start; 0 if it had not answered when the round was decided. Set
	// only for an Observer (Options.Observer).
	Latency time.Duration
}

// QuorumError is returned when a round did not reach its quorum, or reached
// it too late. errors.Is matches it against ErrNotObtained (acquire) or
// ErrNotHeld (extend, release), and against the caller's context error when
// the context ended during the round.
type QuorumError struct {
	Op      string         // "acquire", "extend", "renew" (AutoRenew), "release", or "fence" (the second round of an acquire)
	Key     string         // the lock key, without prefix
	Quorum  int            // how many masters had to agree
	Agreed  int            // how many agreed, counting replies seen while undoing an acquire
	Expired bool           // a quorum agreed, but no validity was left (a fencing acquire: decided after a quarter of the TTL)
	Elapsed time.Duration  // from the first request to the decision
	Masters []MasterResult // one per master, in the order given to New

	sentinel error // ErrNotObtained or ErrNotHeld
	ctxErr   error // the caller's context error, if it ended
	upgrade  bool  // a master refused an upgrade
	late     bool  // Expired: a fencing acquire decided after a quarter of its TTL
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s %q: ", e.sentinel, e.Op, e.Key)
	if e.late {
		fmt.Fprintf(&b, "%d of %d masters agreed, but only after %v, more than a quarter of the TTL: too late for a fencing token", e.Agreed, len(e.Masters), e.Elapsed)
	} else if e.Expired {
		fmt.Fprintf(&b, "%d of %d masters agreed, but the validity ran out after %v", e.Agreed, len(e.Masters), e.Elapsed)
	} else {
		fmt.Fprintf(&b, "%d of %d masters agreed, %d needed", e.Agreed, len(e.Masters), e.Quorum)
	}
	if e.ctxErr != nil {
		fmt.Fprintf(&b, ": %v", e.ctxErr)
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

// Unwrap exposes the sentinel and, if the caller's context ended, its error.
// Per-master errors stay in Masters: a timeout on one master says nothing
// about the caller's context.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.sentinel}
	if e.upgrade {
		errs = append(errs, ErrUpgrade)
	}
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
// state: a panic halfway would leave the client or the lock broken.
func checkContext(ctx context.Context, op string) error {
	if ctx == nil {
		return invalidf("%s: nil context", op)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// errClosedOp is the error of operation op on key once Client.Close has
// begun.
func errClosedOp(op, key string) error {
	return fmt.Errorf("%w: %s %q", ErrClosed, op, key)
}
