package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// PortLease reserves a TCP port of 127.0.0.1 for one master, across the
// processes of this machine. A master keeps its port across Kill and
// Restart. While it is down, nothing listens there. Another test binary
// that runs in parallel could then take the port and hold up the restart.
// Every harness user leases its ports, so none picks one leased elsewhere.
//
// The lease is an exclusive flock on a file named after the port, under
// os.TempDir()/redlock-ports. The kernel drops it when its holder dies.
// Release is safe for concurrent use and idempotent.
type PortLease struct {
	port int
	mu   sync.Mutex
	f    *os.File // holds the flock; nil once released; guarded by mu
}

// Port is the leased port.
func (l *PortLease) Port() int { return l.port }

// Release gives the port up: it removes the lock file, then unlocks it.
// A contender that opened the removed file sees that it is gone (see
// lockPort) and tries another port. Later calls do nothing.
func (l *PortLease) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := os.Remove(l.f.Name())
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}

// LeasePort leases a port that was free a moment ago and that no other
// harness user holds. Where the kernel tells its range of ephemeral ports
// (Linux), the port is below it. An outgoing connection takes its local
// port from that range: it could otherwise take a master's port while the
// master is down for a restart, and keep it. It does not block.
func LeasePort() (*PortLease, error) {
	low := ephemeralLow()
	if low <= minFixedPort {
		return leasePort(kernelPort)
	}
	return leasePort(func() (int, error) { return minFixedPort + rand.IntN(low-minFixedPort), nil })
}

// leaseAttempts is how many candidate ports leasePort tries.
const leaseAttempts = 100

// ErrNoFreePort is returned (wrapped) by LeasePort when every port it
// tried was taken or leased.
var ErrNoFreePort = errors.New("no free port to lease")

// leasePort leases the first port pick offers that is neither leased nor
// bound, trying at most leaseAttempts ports.
func leasePort(pick func() (int, error)) (*PortLease, error) {
	dir := filepath.Join(os.TempDir(), "redlock-ports")
	if err := mkdirShared(dir); err != nil {
		return nil, err
	}
	var last error
	for range leaseAttempts {
		port, err := pick()
		if err != nil {
			return nil, err
		}
		l, err := lockPort(dir, port)
		if err != nil {
			last = err
			continue
		}
		// A free lease does not make a free port: another program may
		// listen there.
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = errors.Join(err, l.Release())
			continue
		}
		if err := ln.Close(); err != nil {
			return nil, errors.Join(err, l.Release())
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: %d ports tried, the last: %w", ErrNoFreePort, leaseAttempts, last)
}

// errLeased marks a port that another harness user holds.
var errLeased = errors.New("leased by another harness user")

// lockPort takes the lease of port: an exclusive flock on its file in
// dir, without waiting. It fails with errLeased if another holder has it.
func lockPort(dir string, port int) (*PortLease, error) {
	path := filepath.Join(dir, strconv.Itoa(port))
	// Read-only: flock needs no write access, so users share the files.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	return lockOpened(f, port)
}

// lockOpened is lockPort once f, port's lock file, is open. It closes f
// unless it returns the lease.
func lockOpened(f *os.File, port int) (*PortLease, error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("port %d: %w", port, errLeased)
		}
		return nil, fmt.Errorf("port %d: flock %s: %w", port, f.Name(), err)
	}
	// The holder before us may have removed the file after we opened it.
	// Our lock is then on a file nobody else sees, so it reserves nothing.
	opened, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if now, err := os.Stat(f.Name()); err != nil || !os.SameFile(opened, now) {
		_ = f.Close()
		return nil, fmt.Errorf("port %d: %w (its lock file was replaced)", port, errLeased)
	}
	return &PortLease{port: port, f: f}, nil
}

// mkdirShared creates dir, writable by every user with the sticky bit
// like /tmp, so that users of one machine share the leases.
func mkdirShared(dir string) error {
	err := os.Mkdir(dir, 0o777)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.Chmod(dir, 0o777|os.ModeSticky) // Mkdir's mode passed the umask
}

// kernelPort returns a port the kernel picks, where it does not tell its
// ephemeral range.
func kernelPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// minFixedPort is the lowest port LeasePort picks itself: above the
// well-known and most registered services' ports.
const minFixedPort = 10000

// ephemeralLow returns the lowest ephemeral port of the kernel, 0 where it
// cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
