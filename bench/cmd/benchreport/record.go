package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// runRecord is what a run knows that its raw output does not: the machine
// and commit it ran on, its load, how long it took and its suites. A run
// writes it beside the raw output, and -from renders with it, so that a
// report rendered again still describes the run, not the rendering.
type runRecord struct {
	machine
	Took   time.Duration
	Suites []suite
}

// recordFile is the runRecord of the raw output at rawPath.
func recordFile(rawPath string) string {
	return filepath.Join(filepath.Dir(rawPath), "run.json")
}

func (r *report) record() runRecord {
	return runRecord{machine: r.machine, Took: r.took, Suites: r.suites}
}

func writeRecord(path string, rec runRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// applyRecord sets the report's run description from the record at path,
// if there is one (runs before it was kept have none).
func (r *report) applyRecord(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec runRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return err
	}
	r.machine, r.took, r.suites = rec.machine, rec.Took, rec.Suites
	return nil
}
