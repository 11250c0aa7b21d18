package nemesis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvFaketimeLib overrides the path of libfaketime.so.1.
const EnvFaketimeLib = "REDLOCK_FAKETIME_LIB"

// ErrNoFaketime is returned (wrapped) when libfaketime cannot be found.
var ErrNoFaketime = errors.New("libfaketime not found; install it with `apt-get install -y faketime` or set " + EnvFaketimeLib)

// Where Debian-like and other distributions install the library and glibc.
var (
	faketimeCandidates = []string{
		"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/lib64/faketime/libfaketime.so.1",
	}
	libcCandidates = []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/lib/aarch64-linux-gnu/libc.so.6",
		"/lib64/libc.so.6",
		"/lib/libc.so.6",
	}
)

// Faketime is the environment that loads libfaketime into a redis-server.
// glibc is preloaded after libfaketime: Debian's redis-server uses jemalloc,
// which otherwise deadlocks libfaketime's start-up.
type Faketime struct {
	Lib  string // path of libfaketime.so.1
	Libc string // path of libc.so.6, preloaded after it
}

// FindFaketime locates libfaketime (EnvFaketimeLib first) and glibc. It
// returns an error wrapping ErrNoFaketime if either is missing.
func FindFaketime() (Faketime, error) {
	lib := os.Getenv(EnvFaketimeLib)
	cands := faketimeCandidates
	if lib != "" {
		cands = []string{lib}
	}
	var ft Faketime
	for _, c := range cands {
		if fileExists(c) {
			ft.Lib = c
			break
		}
	}
	for _, c := range libcCandidates {
		if fileExists(c) {
			ft.Libc = c
			break
		}
	}
	if ft.Lib == "" || ft.Libc == "" {
		return Faketime{}, fmt.Errorf("%w (looked for %s and glibc)", ErrNoFaketime, strings.Join(cands, ", "))
	}
	return ft, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func (f Faketime) preload() string { return "LD_PRELOAD=" + f.Lib + ":" + f.Libc }

// Rate returns the environment of a process whose clock runs rate times as
// fast as the real one from its start (FAKETIME="+0 x<rate>"). Redis key
// expiry follows that clock: with rate 2, a PX 1000 key lives 500ms.
func (f Faketime) Rate(rate float64) []string {
	return []string{f.preload(), "FAKETIME=+0 x" + strconv.FormatFloat(rate, 'f', -1, 64)}
}

// Jumpable returns the environment of a process whose clock follows the
// given ClockFile, re-read on every call (FAKETIME_NO_CACHE=1).
func (f Faketime) Jumpable(c *ClockFile) []string {
	return []string{f.preload(), "FAKETIME_TIMESTAMP_FILE=" + c.Path(), "FAKETIME_NO_CACHE=1"}
}

// ClockFile is a libfaketime timestamp file: writing an offset to it moves
// the clock of every process started with Faketime.Jumpable(c) at once.
// Methods are safe for concurrent use (each write replaces the file
// atomically).
type ClockFile struct{ path string }

// NewClockFile creates a timestamp file in dir with offset 0.
func NewClockFile(dir string) (*ClockFile, error) {
	c := &ClockFile{path: filepath.Join(dir, "faketime.rc")}
	return c, c.Set(0)
}

// Path returns the file's path.
func (c *ClockFile) Path() string { return c.path }

// Set makes the clock read real time plus offset (which may be negative),
// at whole-millisecond precision. It replaces the file by a rename, so a
// process reading it never sees it half-written.
func (c *ClockFile) Set(offset time.Duration) error {
	spec := fmt.Sprintf("%+.3fs\n", offset.Seconds())
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}
