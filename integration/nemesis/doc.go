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
//
// With Kind Election the clients are candidates of one election, each
// leadership a section fenced by its epoch, and two observers follow it.
// CheckElection adds what an election must keep: epochs that grow in the
// order leaders started, a lead seen to end before its lock's validity,
// and observers that report every leader, in epoch order. PauseLeader
// stalls one leader's own links for longer than the TTL.
//
// With Kind Semaphore the clients hold permits of one semaphore, each
// section fenced by its token on the counter of its slot. CheckSemaphore
// adds what a semaphore must keep: never more permits held at once than
// the largest capacity given by one of them, and tokens that grow from
// one Acquire to the next.
package nemesis
