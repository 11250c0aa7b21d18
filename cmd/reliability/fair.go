package main

import (
	"fmt"
	"io"
)

// renderFair writes the table of the fair lock's runs.
func renderFair(w io.Writer, results []outcome) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`## Fair lock

The fair lock's runs (` + "`mutex.Fair`" + `) use the same runner on one key: each lock call
does what ` + "`Fair.Lock`" + ` does, within the lock timeout: it takes a ticket (` + "`Enqueue`" + `,
tried again after a failure) and waits for its turn (` + "`Wait`" + `; a lost ticket is replaced
by a new one), then reads the counter, holds, writes it back with its fencing token and
releases. So "Lock calls" and "Availability" mean what they mean in the other tables:
calls as a user makes them, and the share that got the lock within the lock timeout.
Each ticket is recorded on the runner's clock: when it was settled, when its wait began
and ended, and whether it got the lock or was lost (no quorum renewed it within its
waiter TTL). On top of the counter's checks, the checker reports:

- **passed**: a grant to a ticket while a smaller ticket of the same key was surely
  queued throughout the grant's wait (settled before it began, not lost, still waiting
  after it ended); equal tickets, ordered by the waiters' ids, are not compared;
- **arrivals out of order**: a ticket not larger than that of a waiter that had finished
  queueing before it began, and was still queued when it finished (still waiting, and
  its grant, if any, not yet begun).

Lost tickets are left out of the order: their place was not kept.

`)
	cols := []string{"Nemesis", "Assumptions", "Clients", "Lock calls", "Availability", "Waiters", "Granted", "Tickets lost", "Enqueues failed", "Faults",
		"Overlaps", "Lost updates", "Stale reads", "Linearizable", "Stale writes rejected", "Passed", "Arrivals out of order", "Verdict"}
	header(w, cols)
	for _, o := range results {
		kept := o.assumptions()
		if o.err != nil || o.rep.Fair == nil {
			failedRow(w, o, len(cols))
			continue
		}
		r, rep, f := o.rep.Result, o.rep, o.rep.Fair
		p("| %s | %s | %d | %d | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %d | %d | %s |\n",
			o.sc.Name, kept, rep.Config.Clients, rep.LockCalls, availability(rep), f.Waiters, f.Granted, f.Lost, f.EnqueueFails, rep.Faults,
			len(r.Overlaps), r.Miscounted(), len(r.StaleReads), r.Linearizable, rep.FencingColumn(), len(f.Passed), len(f.Arrivals), o.verdict())
	}
	p("\n\"Waiters\": tickets taken; \"Granted\": those that got the lock. \"Enqueues failed\": `Enqueue` calls that got no ticket, which their lock call tried again.\n\n")
}
