package bench

import (
	"fmt"
	"testing"
)

// BenchmarkSemaphore measures 16 and 64 goroutines sharing one
// semaphore of Capacity permits, each with its own holder: Lock waits
// for a permit, Unlock releases it at once, and again. One op is one
// acquisition plus its release. redlock is package semaphore (waiters
// woken by releases, 5-200ms fallback timer), on five masters. Redsync
// (five masters) and redislock (one) have no semaphore: Capacity slot
// locks emulate one (NewSemaphore), with a 1-8ms backoff between passes
// over the slots. Redisson's RPermitExpirableSemaphore, the closest
// peer, is Java: it cannot run here.
//
// Extra metrics as BenchmarkContended's: fails/op counts Lock calls that
// gave up; top-share is the busiest goroutine's share of acquisitions.
func BenchmarkSemaphore(b *testing.B) {
	_, clients, cc := masters(b, 5)
	for _, g := range []int{16, 64} {
		for _, c := range []libCase{{Redlock, 5}, {Redsync, 5}, {Redislock, 1}} {
			b.Run(fmt.Sprintf("lib=%s/g=%d", c, g), func(b *testing.B) {
				l, err := NewSemaphore(c.lib, clients[:c.n])
				if err != nil {
					b.Fatal(err)
				}
				ws := workers(b, l, g, true)
				warm(b, l, g)
				m := startInfo(b, cc.Prefix(c.n), l)
				res := contend(b, ws, work{})
				m.finish(res.acquired)
				res.report(b)
			})
		}
	}
}
