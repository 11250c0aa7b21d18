package link

import (
	"context"
	"fmt"
	"time"
)

// Elections is what package redlock lends package election: C is
// *redlock.Client and L is *redlock.Lock. An election is the exclusive
// lock of its name plus a history of what its leaders proclaimed (see
// "@election" in scripts.lua). Its methods are safe for concurrent use.
type Elections[C, L any] interface {
	// Check returns an error wrapping redlock.ErrInvalidArgument where
	// client cannot hold elections: nil, zero, or without fencing tokens
	// (the epochs).
	Check(client C) error

	// Append adds an entry to the history of the election whose lock l
	// holds, under l's token and seq: value, or a resignation. It is a
	// quorum round, written only where l holds the lock. keep is how long
	// the history lives after it, limit its longest length. A refusal
	// that proves the lock lost ends l, as Extend's does. It blocks for
	// one round.
	Append(ctx context.Context, l L, e Entry, keep time.Duration, limit int) error

	// Read reads the election named name on every master at once, each
	// bounded by the client's MasterTimeout: the lock, and the history's
	// entries after ID after ("" for none), at most count. It blocks until
	// every master answered or timed out.
	Read(ctx context.Context, client C, name, after string, count int) View

	// Deadline is when a lock set at start for ttl on a master stops
	// being safe: start + ttl, less the client's drift allowance.
	Deadline(client C, start time.Time, ttl time.Duration) time.Time
}

// Entry is one entry of an election's history.
type Entry struct {
	Epoch    uint64 // the leader's fencing token
	Seq      uint64 // 0 for the win, n for the n-th proclaim after it
	Resigned bool   // the leader resigned: Value is ""
	Value    string
}

// ID is the entry's stream ID, "epoch-seq".
func (e Entry) ID() string { return fmt.Sprintf("%d-%d", e.Epoch, e.Seq) }

// Before reports whether e comes before o in the history.
func (e Entry) Before(o Entry) bool {
	return e.Epoch < o.Epoch || e.Epoch == o.Epoch && e.Seq < o.Seq
}

// View is an election as every master showed it to one Read.
type View struct {
	Start   time.Time    // when the reads were sent
	Masters []MasterView // in the client's order of masters
}

// MasterView is one master's part of a View.
type MasterView struct {
	Err     error         // no usable answer; nothing else is set
	Lock    string        // the lock key's value, "" for none
	TTL     time.Duration // what is left of the lock key's TTL; <= 0 for none
	Entries []Entry       // after the ID asked for, in order
	Last    *Entry        // the history's last entry; nil for none
}

// elections is the Elections that RegisterElections stored.
var elections any

// RegisterElections stores h; package redlock calls it once, when it
// initializes.
func RegisterElections[C, L any](h Elections[C, L]) {
	if elections != nil {
		panic("link: Elections registered twice")
	}
	elections = h
}

// GetElections returns the Elections that RegisterElections stored, of
// the same types.
func GetElections[C, L any]() Elections[C, L] {
	h, ok := elections.(Elections[C, L])
	if !ok {
		var c C
		var l L
		panic(fmt.Sprintf("link: no Elections[%T, %T] registered", c, l))
	}
	return h
}
