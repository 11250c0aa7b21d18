package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// TestPausedHolderLateWriteIsRejected runs a lock holder in a child process,
// stops it with SIGSTOP while it holds the lock, lets the lock expire and
// another client take it and write, then resumes the child: its late write
// carries an older fencing token, and the resource rejects it.
func TestPausedHolderLateWriteIsRejected(t *testing.T) {
	cl := integration.NewCluster(t, 5)
	var res fencedResource
	srv := httptest(t, &res)

	const ttl = 800 * time.Millisecond // 4*the child's MasterTimeout (200ms): fencing's least
	child := exec.Command(os.Args[0], "-test.run=^TestFencingChildProcess$", "-test.count=1")
	child.Env = append(os.Environ(),
		"REDLOCK_CHILD_MASTERS="+strings.Join(cl.Addrs(), ","),
		"REDLOCK_CHILD_RESOURCE="+srv,
		"REDLOCK_CHILD_TTL="+ttl.String())
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	lines := bufio.NewScanner(stdout)
	childToken := expectLine(t, lines, "acquired ")

	require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
	time.Sleep(ttl + 100*time.Millisecond) // the child's lock expires while it sleeps

	c := newClient(t, cl, nil)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "fenced", 10*time.Second)
	require.NoError(t, err, "the paused holder's lock expired")
	assert.Greater(t, l.Token(), childToken)
	require.True(t, res.write(l.Token()))
	require.NoError(t, l.Release(ctx))

	require.NoError(t, child.Process.Signal(syscall.SIGCONT))
	_, err = fmt.Fprintln(stdin, "write")
	require.NoError(t, err)
	expectLine(t, lines, "rejected ")
	require.NoError(t, child.Wait())
	assert.Equal(t, 1, res.writes)
	assert.Equal(t, 1, res.rejected, "the late write was rejected")
}

// expectLine reads lines until one starts with prefix and returns the
// number after it.
func expectLine(t *testing.T, lines *bufio.Scanner, prefix string) uint64 {
	t.Helper()
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
			n, err := strconv.ParseUint(rest, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("child ended without a line %q: %v", prefix, lines.Err())
	return 0
}

// httptest serves the fenced resource on loopback: POST /write?token=N.
func httptest(t *testing.T, res *fencedResource) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !res.write(token) {
			http.Error(w, "stale token", http.StatusConflict)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestFencingChildProcess is the child of TestPausedHolderLateWriteIsRejected:
// it takes the lock, says so, waits for "write" on stdin, then writes with
// its token and says what the resource answered.
func TestFencingChildProcess(t *testing.T) {
	addrs := os.Getenv("REDLOCK_CHILD_MASTERS")
	if addrs == "" {
		t.Skip("runs only as the child of TestPausedHolderLateWriteIsRejected")
	}
	ttl, err := time.ParseDuration(os.Getenv("REDLOCK_CHILD_TTL"))
	require.NoError(t, err)
	var masters []*redis.Client
	for _, addr := range strings.Split(addrs, ",") {
		m := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer m.Close()
		masters = append(masters, m)
	}
	c, err := redlock.New(masters, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	l, err := c.Acquire(context.Background(), "fenced", ttl)
	require.NoError(t, err)
	fmt.Printf("acquired %d\n", l.Token())

	in := bufio.NewScanner(os.Stdin)
	require.True(t, in.Scan())
	resp, err := http.Post(os.Getenv("REDLOCK_CHILD_RESOURCE")+"/write?token="+strconv.FormatUint(l.Token(), 10), "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode == http.StatusConflict {
		fmt.Printf("rejected %d\n", l.Token())
	} else {
		fmt.Printf("accepted %d\n", l.Token())
	}
}
