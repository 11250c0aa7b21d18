package harness

import (
	"runtime/pprof"
	"strings"
	"testing"
)

// GoroutineLabels returns the pprof labels ("# labels: {...}" lines of a
// goroutine profile) of the goroutines whose stack has fn, a function
// name as the profile prints it, such as "pkg.(*T).method+".
func GoroutineLabels(t testing.TB, fn string) []string {
	t.Helper()
	var profile strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&profile, 1); err != nil {
		t.Fatalf("harness: goroutine profile: %v", err)
	}
	var labels []string
	for _, g := range strings.Split(profile.String(), "\n\n") {
		if !strings.Contains(g, fn) {
			continue
		}
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "# labels:") {
				labels = append(labels, line)
			}
		}
	}
	return labels
}
