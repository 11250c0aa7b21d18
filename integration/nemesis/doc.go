// Package nemesis injects faults into a set of Redis masters while several
// Redlock clients compete for one lock, records every critical section, and
// checks the history for violations.
//
// Faults: process faults through integration.Master (kill, pause, restart
// without data), network faults through toxiproxy embedded in the test
// process (Proxies: latency, black hole, reset, cut), and clock faults
// through libfaketime (Faketime, ClockFile).
//
// The checker (Check) reports overlapping critical sections, lost updates
// and stale reads on the shared Resource, and whether the history is
// linearizable (porcupine). Run drives one scenario; Scenarios lists those
// the tests and cmd/reliability run, including two that break Redlock's
// assumptions on purpose, so that the checker is seen to fail.
package nemesis
