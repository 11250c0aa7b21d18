package quorum

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// Spec describes one operation: the script every master runs, how its
// calls are sent, what a success needs, and the operation's policy. The
// engine only reads it.
type Spec struct {
	Script *redis.Script
	Keys   pipeline.Keys
	Args   []any
	Send   Send
	// Undo, if set, runs where the script may have applied when the round
	// fails.
	Undo *Undo
	// TTL, if > 0, is the TTL the script sets: a success needs validity left.
	TTL time.Duration
	// Within, if > 0, is the latest the round may be decided.
	Within time.Duration
	// Lossy: an agreement counts even where a failover of its server
	// could lose its write. Undoing what a lost write did must be safe,
	// as a release is: the lock then stays until its TTL. Else the round
	// is durable: see Durability.
	Lossy  bool
	Policy Policy // nil: none
}

// Send says how a round's calls go out.
type Send struct {
	// Must: a call is never shed nor dropped. It is sent even if the
	// caller's context has ended. Its agreements are not held up to
	// identify the server: the identity last learned counts instead.
	Must bool
	// Skip, with Must, is asked whether master i needs the call at all.
	Skip pipeline.Skipper
	// Withdraw: a call still queued to a master that is behind when the
	// round is decided is not sent.
	Withdraw bool
	// Unsent, with Withdraw, collects the masters where the call was
	// surely not sent (bit i for master i). Each bit is set as soon as it
	// is known.
	Unsent *atomic.Uint64
}

// Undo is what reverts a failed round's script on a master. It is sent
// with a fresh context and retried until the master answers.
type Undo struct {
	Script *redis.Script
	Args   []any
	// Mark is Args where the call's outcome is unknown. The undo may
	// overtake the call, so it must leave a marker that refuses it.
	Mark []any
	// KeyTTL is the longest the key it removes can live. Retrying longer
	// is useless.
	KeyTTL time.Duration
}

// Policy is an operation's part in its rounds. The engine calls it where
// the operation, not the quorum, decides what happens.
type Policy interface {
	// Queued runs once the round's calls are queued on every master.
	Queued()
	// Answered runs when master i answered, on its pipeline: it must not
	// block.
	Answered(ctx context.Context, i int, a Answer)
	// Settles reports whether master i's answer needs Settled once a
	// successful round is decided.
	Settles(a Answer) bool
	// Settled runs once a successful round is decided. counted tells
	// whether the decision counted a. It returns what may block, to run
	// on a goroutine of its own, or nil.
	Settled(ctx context.Context, i int, a Answer, counted bool) func()
}

// Judge is a Policy that has its say on each agreement before it
// counts. The engine calls Counts where the policy implements it.
type Judge interface {
	// Counts returns why master i's agreement a must not count, or nil.
	// m tells what is known of the master. It runs on the master's
	// pipeline, or on the goroutine that identified the server: it must
	// not block.
	Counts(i int, a Answer, m MasterState) error
}

// MasterState is what a Judge may ask about a master. It does not block.
type MasterState interface {
	// Quarantine returns why the master must count toward nothing that a
	// lost write would have refused: it reached a new server lately,
	// which may lack earlier writes. Else nil.
	Quarantine() error
}

// noState is the MasterState of a master that cannot be asked.
type noState struct{}

func (noState) Quarantine() error { return nil }

// NoHooks is a Policy that does nothing. A policy embeds it for the
// hooks it does not need.
type NoHooks struct{}

func (NoHooks) Queued()                                           {}
func (NoHooks) Answered(context.Context, int, Answer)             {}
func (NoHooks) Settles(Answer) bool                               { return false }
func (NoHooks) Settled(context.Context, int, Answer, bool) func() { return nil }

// Answer is a master's answer to a round's call.
type Answer struct {
	Val int64
	Err error // the call's error, as its pipeline gave it
}

// Applied reports whether the script applied: the master agreed.
func (a Answer) Applied() bool { return a.Err == nil && a.Val > 0 }

// Refused reports whether the master answered no.
func (a Answer) Refused() bool { return a.Err == nil && a.Val == 0 }

// Unknown reports whether the call's outcome is unknown. It may have
// reached the master, and may still land there.
func (a Answer) Unknown() bool { return Unanswered(a.Err) }

// MayHaveApplied reports whether the script applied or may still.
func (a Answer) MayHaveApplied() bool { return a.Val > 0 || a.Unknown() }

// Unanswered reports whether err leaves a call's outcome unknown. An
// error reply does too: it may come from a proxy that forwarded the call
// and gave up waiting for the server. Only a call its pipeline did not
// send reached nothing.
func Unanswered(err error) bool {
	return err != nil && !errors.Is(err, pipeline.ErrNotSent)
}
