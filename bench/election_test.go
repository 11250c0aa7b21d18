package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
)

// Failover benchmark settings. The TTL is short so that how=killed, which
// waits for the dead leader's lock to expire, ends fast.
const (
	failoverTTL     = time.Second
	failoverRetry   = 200 * time.Millisecond // election.Options.MaxRetryDelay's default
	failoverName    = "bench:failover"
	envLeaderChild  = "REDLOCK_BENCH_LEADER_MASTERS"
	candidateSettle = 20 * time.Millisecond // a new candidate's first attempt, and its wait
)

// BenchmarkElectionFailover measures how long an election is without a
// leader when the leader goes, on five masters with a 1s TTL: from the
// leader's going to the return of the next candidate's Campaign, which
// waits in another process (another client).
//
//   - how=resign: the leader calls Resign; the release wakes the
//     candidate.
//   - how=killed: the leader is a child process (this test binary, run
//     as TestElectionLeaderProcess) that gets SIGKILL: nothing is
//     released, so the candidate leads once the lock expired, at most a
//     TTL plus one fallback retry (200ms) after the kill.
//
// p50-ns and p99-ns are of that time; ns/op is its mean. ttl-ns is the
// election's TTL. how=killed also reports bound-ns, a TTL plus one retry,
// and late/op, the share of failovers that took longer.
func BenchmarkElectionFailover(b *testing.B) {
	cl, _, _ := masters(b, 5)
	for _, how := range []string{"resign", "killed"} {
		b.Run("how="+how, func(b *testing.B) {
			var lat []time.Duration
			var errs int64
			switch how {
			case "resign":
				lat, errs = failoverResign(b, cl.Addrs())
			case "killed":
				lat, errs = failoverKilled(b, cl.Addrs())
			}
			reportLatency(b, lat, errs)
			b.ReportMetric(float64(failoverTTL.Nanoseconds()), "ttl-ns")
		})
	}
}

// failoverElection returns the benchmark's election on a client of its
// own, as another process would have, closed when b ends.
func failoverElection(b *testing.B, addrs []string) *election.Election {
	b.Helper()
	clients := NewRedisClients(addrs)
	c, err := redlock.New(clients, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = CloseAll(clients)
	})
	e, err := election.New(c, failoverName+":"+b.Name(), &election.Options{TTL: failoverTTL})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// led is a candidate's Campaign as it returned.
type led struct {
	l   *election.Leadership
	err error
	at  time.Time
}

// candidate campaigns on its own goroutine, bounded by wait.
func candidate(e *election.Election, value string, wait time.Duration) <-chan led {
	ch := make(chan led, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		l, err := e.Campaign(ctx, value)
		ch <- led{l, err, time.Now()}
	}()
	return ch
}

// failoverResign: two candidates take turns; each op, the leader resigns
// and the other, waiting, leads.
func failoverResign(b *testing.B, addrs []string) ([]time.Duration, int64) {
	es := [2]*election.Election{failoverElection(b, addrs), failoverElection(b, addrs)}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	leader, err := es[0].Campaign(ctx, "0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = leader.Resign(context.Background()) }()
	lat := make([]time.Duration, 0, b.N)
	var errs int64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		next := candidate(es[(i+1)%2], fmt.Sprint((i+1)%2), runTimeout)
		time.Sleep(candidateSettle)
		b.StartTimer()
		start := time.Now()
		if err := leader.Resign(ctx); err != nil {
			errs++
		}
		r := <-next // bounded by runTimeout
		if r.err != nil {
			b.Fatalf("the next candidate did not lead after Resign: %v", r.err)
		}
		lat = append(lat, r.at.Sub(start))
		leader = r.l
	}
	b.StopTimer()
	return lat, errs
}

// failoverKilled: each op, a child process leads, then gets SIGKILL;
// the candidate here leads once its lock expired.
func failoverKilled(b *testing.B, addrs []string) ([]time.Duration, int64) {
	e := failoverElection(b, addrs)
	lat := make([]time.Duration, 0, b.N)
	var errs, late int64
	defer func() {
		b.ReportMetric(float64(late)/float64(max(len(lat), 1)), "late/op")
		b.ReportMetric(float64((failoverTTL + failoverRetry).Nanoseconds()), "bound-ns")
	}()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		child, drained := startLeader(b, addrs, e.Name())
		next := candidate(e, "parent", 10*failoverTTL)
		time.Sleep(candidateSettle)
		b.StartTimer()
		start := time.Now()
		if err := child.Process.Kill(); err != nil {
			b.Fatal(err)
		}
		r := <-next // bounded by 10 TTLs
		b.StopTimer()
		<-drained // the pipe ends with the child
		_ = child.Wait()
		if r.err != nil {
			b.Fatalf("no candidate led within 10 TTLs of the leader's SIGKILL: %v", r.err)
		}
		d := r.at.Sub(start)
		if d > failoverTTL+failoverRetry {
			late++
		}
		lat = append(lat, d)
		if err := r.l.Resign(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return lat, errs
}

// startLeader runs TestElectionLeaderProcess in a child process, and
// returns once it leads the election named name. drained is closed once
// the child's output ended: then Wait may be called.
func startLeader(b *testing.B, addrs []string, name string) (child *exec.Cmd, drained <-chan struct{}) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestElectionLeaderProcess$", "-test.count=1", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envLeaderChild+"="+strings.Join(addrs, ","), "REDLOCK_BENCH_LEADER_NAME="+name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	leading, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "leading ") {
				leading <- nil
				_, _ = io.Copy(io.Discard, out) // until the child dies
				return
			}
		}
		leading <- errors.Join(errors.New("the leader process ended before it led"), lines.Err())
	}()
	t := time.NewTimer(runTimeout)
	defer t.Stop()
	select {
	case err = <-leading:
	case <-t.C:
		err = fmt.Errorf("the leader process did not lead within %v", runTimeout)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		b.Fatal(err)
	}
	return cmd, done
}

// TestElectionLeaderProcess is the leader that BenchmarkElectionFailover
// kills: it campaigns, prints "leading EPOCH", and waits, renewing, for
// SIGKILL (at most a minute). Run alone, it is skipped.
func TestElectionLeaderProcess(t *testing.T) {
	addrs := os.Getenv(envLeaderChild)
	if addrs == "" {
		t.Skip("runs only as the leader process of BenchmarkElectionFailover")
	}
	clients := NewRedisClients(strings.Split(addrs, ","))
	defer func() { _ = CloseAll(clients) }()
	c, err := redlock.New(clients, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := election.New(c, os.Getenv("REDLOCK_BENCH_LEADER_NAME"), &election.Options{TTL: failoverTTL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := e.Campaign(ctx, "child")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("leading %d\n", l.Epoch())
	select {
	case <-ctx.Done():
	case <-l.Done():
		t.Error(l.Err())
	}
	_ = l.Resign(context.Background())
}
