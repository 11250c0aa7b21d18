package main

import (
	"fmt"
	"io"
)

// semaphoreLibs are BenchmarkSemaphore's libraries, redlock first.
var semaphoreLibs = []string{"redlock-5", "redsync-5", "redislock-1"}

// writeSemaphore: acquire+release pairs per second on one semaphore of
// capacity 4, from 16 and 64 goroutines.
func (r *report) writeSemaphore(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	res := r.res
	p("## Semaphore: capacity 4, 16 and 64 goroutines\n\n")
	p("One counting semaphore of 4 permits; each goroutine has its own holder and loops: acquire (waiting for a permit), release at once. One op is one acquisition and its release. ")
	p("redlock is package `semaphore` (leased permits over five masters, waiters woken by releases, 5-200ms fallback timer). ")
	p("redsync and redislock have no semaphore: four slot locks (`name:0` ... `name:3`) emulate one; an attempt tries each slot once from one at random, then sleeps a 1-8ms backoff (doubling, jittered). ")
	p("Redisson's `RPermitExpirableSemaphore`, the closest peer (leased permits), is Java and cannot run in this Go benchmark; it also runs on one Redis node, not a quorum.\n\n")
	p("| Library | Goroutines | pairs/s | ns/op | allocs/op | client CPU µs/op | server CPU µs/op | server cmds/op | hand-off p50 | hand-off p99 | gave up/op | busiest goroutine's share |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range []int{16, 64} {
		for _, lib := range semaphoreLibs {
			n := fmt.Sprintf("Semaphore/lib=%s/g=%d", lib, g)
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lib, g, fmtNum(res.med(n, "ops/s"), 0), fmtDur(res.med(n, "ns/op")),
				fmtNum(res.med(n, "allocs/op"), 0), fmtNum(res.med(n, "cli-cpu-us/op"), 0), fmtNum(res.med(n, "srv-cpu-us/op"), 0),
				fmtNum(res.med(n, "srv-cmds/op"), 1), fmtDur(res.med(n, "handoff-p50-ns")), fmtDur(res.med(n, "handoff-p99-ns")),
				fmtNum(res.med(n, "fails/op"), 3), fmtNum(res.med(n, "top-share"), 2))
		}
	}
	p("\nHand-off: from a release to the next acquisition that returned, whichever holder it was. A share near 1/g means permits went round the goroutines.\n\n")
}
