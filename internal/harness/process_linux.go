package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL a master when the thread that started
// it dies, so masters do not outlive a crashed or killed test binary. (The Go
// runtime does not retire its threads in normal operation.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped polls /proc until the process is stopped (stopped == true) or
// no longer stopped, bounded by ctx. It fails if the process has exited.
func waitStopped(ctx context.Context, pid int, stopped bool) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The format is "pid (comm) state ...", and comm may contain ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("unexpected %s: %q", path, b)
		}
		switch state := b[i+2]; {
		case state == 'Z' || state == 'X':
			return fmt.Errorf("pid %d has exited", pid)
		case (state == 'T') == stopped:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pid %d (stopped=%v): %w", pid, stopped, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
