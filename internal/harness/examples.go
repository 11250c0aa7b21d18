package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// RunExamples is the TestMain of a package whose examples lock on real
// masters: it starts len(addrs) redis-server processes, writes their
// addresses into addrs, runs the package's tests and examples, stops the
// masters and returns the exit code for os.Exit. It fails the run if
// goroutines started by the tests are still running 10s after them (the
// root module cannot use goleak).
//
// Without redis-server the examples are skipped (their output could not
// match) and the other tests run; with REDLOCK_REQUIRE_INTEGRATION=1 that
// is a failure instead.
func RunExamples(m *testing.M, addrs []string) int {
	flag.Parse()
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartProcesses(ctx, len(addrs), ProcessOptions{})
	switch {
	case errors.Is(err, ErrNoRedisServer) && os.Getenv(EnvRequire) != "1":
		fmt.Fprintf(os.Stderr, "harness: examples skipped: %v\n", err)
		skip := "^Example"
		if old := flag.Lookup("test.skip").Value.String(); old != "" {
			skip = old + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
		return leakCheck(m.Run(), before)
	case err != nil:
		fmt.Fprintf(os.Stderr, "harness: starting masters for the examples: %v\n", err)
		return 1
	}
	copy(addrs, c.Addrs())
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: stopping the masters: %v\n", err)
	}
	return leakCheck(code, before)
}

// leakCheck turns a passing run's exit code into a failure if more
// goroutines run than before it, once they have had 10s to end.
func leakCheck(code, before int) int {
	if code != 0 {
		return code
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "harness: %d goroutines leaked by the tests (%d before):\n%s\n",
				runtime.NumGoroutine()-before, before, buf[:runtime.Stack(buf, true)])
			return 1
		}
	}
	return code
}
