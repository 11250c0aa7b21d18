package main

import (
	"fmt"
	"io"
)

// fairHandoff is the name of a BenchmarkFairHandoff case.
func fairHandoff(lib string) string { return "FairHandoff/lib=" + lib }

// writeFairHandoff: how long one lock takes to pass from a holder to the
// next among 100 waiters, in ticket order or in none.
func (r *report) writeFairHandoff(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	res := r.res
	p("## Fair lock hand-off\n\n")
	p("One lock on five masters, 100 waiters (goroutines of one client), each locking, releasing at once and queueing again. From the holder's release call to the next holder's lock call returning. ")
	p("`redlock-fair` is `mutex.Fair`: grants in ticket order, the release wakes the next ticket alone. ")
	p("The peers keep no order: `redlock` is `mutex.Mutex` (this process's waiters take turns, woken by the release), `redsync` its `Mutex` with default retries (32 tries, 50-250ms apart; a call that gives up counts in errs/op).\n\n")
	p("| Library | p50 | p99 | mean per grant | errs/op | samples (b.N) |\n|---|---|---|---|---|---|\n")
	for _, lib := range []string{"redlock-fair", "redlock", "redsync"} {
		n := fairHandoff(lib)
		if !res.get(n, "p50-ns").ok() {
			continue
		}
		p("| %s | %s | %s | %s | %s | %s |\n", lib, fmtDur(res.med(n, "p50-ns")), fmtDur(res.med(n, "p99-ns")),
			fmtDur(res.med(n, "ns/op")), fmtNum(res.med(n, "errs/op"), 2), iterRange(res.iters[n]))
	}
	p("\n")
}
