package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/mutex"
)

// fairWaiters is how many goroutines wait for the lock at once.
const fairWaiters = 100

// BenchmarkFairHandoff measures the hand-off of one lock among 100
// waiters on five masters: from the holder's release call to the next
// holder's lock call returning. Each waiter locks, releases at once and
// queues again. lib=redlock-fair is mutex.Fair (grants in ticket order,
// wakes the next waiter alone); the peers have no order: lib=redlock is
// mutex.Mutex, lib=redsync redsync's Mutex with its default retries (one
// that gives up counts in errs/op and tries again). All waiters share one
// client, as goroutines of one process. p50-ns and p99-ns are of the
// hand-off; ns/op is the wall time per grant.
func BenchmarkFairHandoff(b *testing.B) {
	_, clients, _ := masters(b, 5)
	for _, lib := range []string{"redlock-fair", Redlock, Redsync} {
		b.Run("lib="+lib, func(b *testing.B) {
			ws := fairContenders(b, lib, clients)
			lat, errs := handoffs(b, ws)
			reportLatency(b, lat, errs)
		})
	}
}

// fairContenders returns fairWaiters Workers of lib, each retrying
// until it holds the lock.
func fairContenders(b *testing.B, lib string, clients []*redis.Client) []Worker {
	b.Helper()
	key := "bench:fair:" + b.Name()
	if lib != "redlock-fair" {
		l := newLocker(b, lib, clients)
		b.Cleanup(func() { _ = l.Close() })
		return contenders(b, l, key, fairWaiters)
	}
	c, err := redlock.New(clients, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	f, err := mutex.NewFair(c, key, &mutex.FairOptions{TTL: TTL})
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]Worker, fairWaiters)
	for i := range ws {
		ws[i] = &fairWorker{f: f}
	}
	return ws
}

type fairWorker struct {
	f *mutex.Fair
	l *redlock.Lock
}

func (w *fairWorker) Lock(ctx context.Context, _ string) error {
	l, err := w.f.Lock(ctx)
	w.l = l
	return err
}

func (w *fairWorker) Unlock(ctx context.Context) error {
	if w.l == nil {
		return errors.New("fair: not locked")
	}
	err := w.l.Release(ctx)
	w.l = nil
	return err
}

// handoffs runs ws on one lock until b.N hand-offs (b.N+1 grants), and
// returns their latencies and the lock calls that failed.
func handoffs(b *testing.B, ws []Worker) ([]time.Duration, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout+time.Duration(b.N)*100*time.Millisecond)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		released time.Time // the last holder's release call; zero at first
		grants   atomic.Int64
		errs     atomic.Int64
		wg       sync.WaitGroup
	)
	b.ResetTimer()
	for _, w := range ws {
		wg.Go(func() {
			for grants.Load() <= int64(b.N) && ctx.Err() == nil {
				if err := w.Lock(ctx, ""); err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				got := time.Now()
				mu.Lock()
				if !released.IsZero() {
					lat = append(lat, got.Sub(released))
				}
				mu.Unlock()
				if grants.Add(1) > int64(b.N) {
					cancel() // the other waiters stop
				}
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				_ = w.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	return lat, errs.Load()
}
