package main

import (
	"bytes"
	"strings"
	"testing"
)

// The semaphore section reads BenchmarkSemaphore's metrics as the
// benchmark prints them; a missing case prints dashes.
func TestSemaphoreSection(t *testing.T) {
	raw := `goos: linux
BenchmarkSemaphore/lib=redlock-5/g=16-2   1000   1000000 ns/op   700 cli-cpu-us/op   0 errs/op   0 fails/op   260000 handoff-p50-ns   900000 handoff-p99-ns   1000 ops/s   12.5 srv-cmds/op   900 srv-cpu-us/op   0.0700 top-share   9000 B/op   90 allocs/op
`
	res, err := readResults(strings.NewReader(raw), "bench.txt")
	if err != nil {
		t.Fatal(err)
	}
	r := &report{res: res}
	var b bytes.Buffer
	r.writeSemaphore(&b)
	for _, want := range []string{
		"| redlock-5 | 16 | 1000 | 1.00 ms | 90 | 700 | 900 | 12.5 | 260 µs | 900 µs | 0.000 | 0.07 |",
		"| redsync-5 | 64 | – |",
		"cannot run",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, b.String())
		}
	}
}
