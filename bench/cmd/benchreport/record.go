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
	NProc, GOMAXPROCS, CPU, Go, Redis, Kernel, Date, Commit, Load string
	Took                                                          time.Duration
	Suites                                                        []suiteRecord
}

type suiteRecord struct {
	Bench, Benchtime string
	Count            int
}

// recordFile is the runRecord of the raw output at rawPath.
func recordFile(rawPath string) string {
	return filepath.Join(filepath.Dir(rawPath), "run.json")
}

func (r *report) record() runRecord {
	m := r.machine
	rec := runRecord{NProc: m.nproc, GOMAXPROCS: m.gomaxprocs, CPU: m.cpu, Go: m.goVersion, Redis: m.redis,
		Kernel: m.kernel, Date: m.date, Commit: m.commit, Load: m.load, Took: r.took}
	for _, s := range r.suites {
		rec.Suites = append(rec.Suites, suiteRecord{s.bench, s.benchtime, s.count})
	}
	return rec
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
	r.machine = machine{nproc: rec.NProc, gomaxprocs: rec.GOMAXPROCS, cpu: rec.CPU, goVersion: rec.Go, redis: rec.Redis,
		kernel: rec.Kernel, date: rec.Date, commit: rec.Commit, load: rec.Load}
	r.took, r.suites = rec.Took, nil
	for _, s := range rec.Suites {
		r.suites = append(r.suites, suite{s.Bench, s.Benchtime, s.Count})
	}
	return nil
}
