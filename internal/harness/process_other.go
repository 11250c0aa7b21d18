//go:build !linux

package harness

import (
	"context"
	"syscall"
)

// sysProcAttr has no parent-death signal outside Linux: masters of a test
// binary that dies without Close keep running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot observe the process state outside Linux; the signal
// has been sent, which usually takes effect at once.
func waitStopped(ctx context.Context, pid int, stopped bool) error { return nil }
