package redlock

import "time"

// argv is the ARGV that every script of scripts.lua takes. Lock.args
// builds it, in the one order the scripts read.
type argv struct {
	ttl   time.Duration // ARGV[2], in whole milliseconds
	holds int64         // ARGV[3]: the owner's holds after the call
	// fence is ARGV[4]: nil for the Lock's setting ("0" without tokens,
	// "1" with), else a new acquire's proposed token or the counter a last
	// release leaves.
	fence any
	// last is ARGV[7], or nil for none: a release's marker mode, or the
	// token a repair sets.
	last any
}

// Marker modes of a release, its ARGV[7].
const (
	// markMissing leaves a marker where nothing of the Lock is found: an
	// acquire that lands later is refused.
	markMissing = "1"
	// markAlways leaves it wherever the release deletes too: after a
	// repair, another repair may land later.
	markAlways = "2"
)

// args returns a's arguments. Its array has room for withMark.
func (l *Lock) args(a argv) []any {
	b := &l.boxed
	ms := b.ttlMs // boxed once: the TTL is sent again and again
	if a.ttl != b.ttl {
		ms = a.ttl.Milliseconds()
	}
	fence := a.fence
	if fence == nil {
		fence = "0" // boxed without allocating, as a constant
		if l.mode.fenced && l.client.fencing {
			fence = "1"
		}
	}
	args := make([]any, 6, 7)
	args[0], args[1], args[2], args[3], args[4], args[5] = b.value, ms, a.holds, fence, b.writeWait, b.nonce
	if a.last != nil {
		args = append(args, a.last)
	}
	return args
}

// withMark returns args, built without a last argument, with the marker
// mode as ARGV[7]. It shares args' array: an undo and its marked form
// cost one allocation.
func withMark(args []any, mode string) []any { return append(args, mode) }
