package main

import (
	"path/filepath"
	"testing"
	"time"
)

// A report rendered again with -from describes the run that wrote its
// record, not the machine and commit it is rendered on.
func TestRunRecordRoundTrip(t *testing.T) {
	run := &report{
		machine: machine{NProc: "2", GOMAXPROCS: "2", CPU: "cpu", Go: "go", Redis: "redis", Kernel: "kernel",
			Date: "2026-11-25 19:56 UTC", Commit: "eddd5ee", Load: "0.73 at the start, 2.73 at the end"},
		suites: []suite{{"BenchmarkLockUnlock", "1s", 5}, {"BenchmarkCommands", "300x", 1}},
		took:   6*time.Minute + 24*time.Second,
	}
	path := recordFile(filepath.Join(t.TempDir(), "bench.txt"))
	if err := writeRecord(path, run.record()); err != nil {
		t.Fatal(err)
	}
	again := &report{machine: machine{Commit: "later with uncommitted changes"}}
	if err := again.applyRecord(path); err != nil {
		t.Fatal(err)
	}
	if again.machine != run.machine || again.took != run.took || len(again.suites) != 2 || again.suites[1] != run.suites[1] {
		t.Errorf("rendered again with %+v, %v, %v; the run was %+v, %v, %v", again.machine, again.took, again.suites, run.machine, run.took, run.suites)
	}
	none := &report{machine: machine{Commit: "now"}}
	if err := none.applyRecord(filepath.Join(t.TempDir(), "run.json")); err != nil || none.machine.Commit != "now" {
		t.Errorf("without a record: %v, commit %q; want the machine as it is", err, none.machine.Commit)
	}
}
