package main

import (
	"bytes"
	"strings"
	"testing"
)

// The fair hand-off section reads BenchmarkFairHandoff's metrics as the
// benchmark prints them, and leaves out a library that did not run.
func TestFairHandoffSection(t *testing.T) {
	raw := `goos: linux
BenchmarkFairHandoff/lib=redlock-fair-2   300   2500000 ns/op   0 errs/op   2100000 p50-ns   4000000 p99-ns
BenchmarkFairHandoff/lib=redlock-2        300    900000 ns/op   0 errs/op    880000 p50-ns   3000000 p99-ns
`
	res, err := readResults(strings.NewReader(raw), "bench.txt")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	(&report{res: res}).writeFairHandoff(&b)
	for _, want := range []string{
		"| redlock-fair | 2.10 ms | 4.00 ms | 2.50 ms | 0.00 | 300 |",
		"| redlock | 880 µs | 3.00 ms | 900 µs | 0.00 | 300 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "| redsync |") {
		t.Errorf("a library that did not run has a row:\n%s", b.String())
	}
}
