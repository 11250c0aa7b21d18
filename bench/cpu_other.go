//go:build !unix

package bench

import "time"

// ProcessCPU returns 0: this platform has no getrusage.
func ProcessCPU() time.Duration { return 0 }
