package main

import (
	"bytes"
	"strings"
	"testing"
)

// The failover section and targets read BenchmarkElectionFailover's
// metrics as the benchmark prints them.
func TestFailoverSection(t *testing.T) {
	raw := `goos: linux
BenchmarkElectionFailover/how=resign-2   200   3382703 ns/op   0 errs/op   3191485 p50-ns   4015383 p99-ns   1000000000 ttl-ns
BenchmarkElectionFailover/how=killed-2    30  1072261914 ns/op   0 errs/op   0 late/op   1101617568 p50-ns   1113316238 p99-ns   1000000000 ttl-ns   1200000000 bound-ns
`
	res, err := readResults(strings.NewReader(raw), "bench.txt")
	if err != nil {
		t.Fatal(err)
	}
	r := &report{res: res}
	var b bytes.Buffer
	r.writeFailover(&b)
	for _, want := range []string{
		"| resign | 3.19 ms | 4.02 ms | 3.38 ms | - | - | 200 |",
		"| killed | 1101.62 ms | 1113.32 ms | 1072.26 ms | 1200.00 ms | 0.00 | 30 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, b.String())
		}
	}
	ts := failoverTargets(res)
	if len(ts) != 2 || !ts[0].known || !ts[0].met || !ts[1].known || !ts[1].met {
		t.Errorf("targets %+v: want both known and met", ts)
	}
	if ts := failoverTargets(&results{samples: map[string]map[string][]float64{}}); ts[0].known || ts[1].known {
		t.Errorf("targets without results %+v: want unknown", ts)
	}
}
