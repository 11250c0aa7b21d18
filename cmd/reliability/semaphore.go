package main

import (
	"fmt"
	"io"
	"strings"
)

// renderSemaphores writes the table of the semaphore's runs.
func renderSemaphores(w io.Writer, results []outcome) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`## Semaphore

The semaphore's runs (package ` + "`semaphore`" + `) use the same runner with more
clients than permits: each client acquires a permit of one name
(` + "`Acquire`" + ` with capacity 3, bounded by the lock timeout), and while it holds
it reads the counter of the permit's slot, holds, writes it back with the
permit's token as fencing token, and releases. A permit is recorded on the
runner's clock from the moment ` + "`Acquire`" + ` returned to the moment ` + "`Release`" + ` was
called, bounded by its validity for a holder that found it lost, as a
lock's section is. The slot is read from a master once the permit is held
(its nonce, in the semaphore's sorted set). Tokens are per name, not per
slot: one counter per permit would see the tokens of the other slots'
permits, legitimately held at the same time, and reject them. Each slot is
an exclusive lock of its own (docs/semaphore.md), so each slot gets its own
fenced counter, and the counter's checks (overlaps, lost updates, stale
reads, linearizable, rejections) run per slot. On top, the checker reports:

- **crowds**: instants at which, for some capacity c, more permits given
  c or less were held than c, one per episode. Each permit holds its own
  slot, below its capacity; so all of them number at most the largest
  capacity given (3; the mixed run gives a third of its acquires 2);
- **token inversions**: permits whose token is not larger than the token
  of every permit whose ` + "`Acquire`" + ` returned before their own ` + "`Acquire`" + ` was
  called.

The broken run (restart without delay, fresh clients) must show a crowd,
a slot overlap or a lost update: any one is the broken assumption caught.

`)
	cols := []string{"Nemesis", "Assumptions", "Clients", "Capacities", "Acquires", "Availability", "Permits", "Most held", "Slot unknown", "Locks lost", "Faults",
		"Crowds", "Token inversions", "Slot overlaps", "Lost updates", "Stale reads", "Linearizable", "Stale writes rejected", "Verdict"}
	header(w, cols)
	for _, o := range results {
		kept := o.assumptions()
		if o.err != nil {
			failedRow(w, o, len(cols))
			continue
		}
		r, rep, s := o.rep.Result, o.rep, o.rep.Semaphore
		capacities := make([]string, len(s.Capacities))
		for i, c := range s.Capacities {
			capacities[i] = fmt.Sprint(c)
		}
		p("| %s | %s | %d | %s | %d | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n",
			o.sc.Name, kept, rep.Config.Clients, strings.Join(capacities, ", "), rep.LockCalls, availability(rep), s.Permits, s.MaxHeld, s.UnknownSlots, r.Aborted, rep.Faults,
			len(s.Crowds), len(s.Inversions), len(r.Overlaps), r.Miscounted(), len(r.StaleReads), r.Linearizable, rep.FencingColumn(), o.verdict())
	}
	p("\n\"Acquires\": `Acquire` calls; \"Availability\": the share that got a permit within the lock timeout. \"Most held\": the most permits held at one instant. \"Slot unknown\": permits whose slot no master told in time; they held without a counter, and count for crowds and tokens only. \"Locks lost\": permits lost before their write. \"Slot overlaps\": two permits of one slot held at once.\n\n")
}
