package quorum

import "time"

// minDrift is added to every drift allowance. It is 1ms for the precision
// of Redis expiry plus 1ms of minimum drift. It dominates for short TTLs.
const minDrift = 2 * time.Millisecond

// Drift returns the clock-drift allowance for a lock of the given TTL:
// ttl*factor + minDrift, the factor part rounded up to the nanosecond.
func Drift(ttl time.Duration, factor float64) time.Duration {
	d := float64(ttl) * factor
	part := time.Duration(d)
	if float64(part) < d {
		part++
	}
	return part + minDrift
}

// Validity returns how long a lock of the given TTL stays safely held
// after it took elapsed to reach a quorum. elapsed is measured on the
// monotonic clock, from before the first request to the deciding reply:
//
//	ttl - elapsed - (ttl*factor + minDrift)
//
// The lock counts as obtained only when the result is positive.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}
