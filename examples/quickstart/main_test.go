package main

import (
	"os"
	"testing"

	"github.com/go-redlock/redlock/internal/harness"
)

// TestMain starts five redis-server masters and puts their addresses in
// addrs, in place of docker-compose's.
func TestMain(m *testing.M) { os.Exit(harness.RunExamples(m, addrs)) }

// Example runs the README's program as it is written, on those masters.
func Example() {
	main()
	// Output:
	// writing the report until 10s
	// leading as worker-1
	// run ended: election "scheduler": run: context deadline exceeded
}
