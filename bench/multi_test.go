package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/multi"
)

// multiNames is how many names one multi-resource op locks.
const multiNames = 4

// BenchmarkMultiLock measures one uncontended acquire+release of 4
// names, from one goroutine on five masters, each op on fresh names.
// lib=redlock-multi is one multi.Mutex attempt: one round per master for
// all names. lib=redsync-sorted is the peer's way: 4 redsync mutexes taken
// one by one in sorted order (one attempt each), released in reverse.
// ns/op is wall time per op; p50-ns and p99-ns its latency.
func BenchmarkMultiLock(b *testing.B) {
	_, clients, _ := masters(b, 5)
	for _, lib := range []string{"redlock-multi", "redsync-sorted"} {
		b.Run(fmt.Sprintf("lib=%s/names=%d", lib, multiNames), func(b *testing.B) {
			var op func(ctx context.Context, names []string) error
			switch lib {
			case "redlock-multi":
				c, err := redlock.New(clients, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				op = func(ctx context.Context, names []string) error {
					m, err := multi.New(c, names, &multi.Options{TTL: TTL})
					if err != nil {
						return err
					}
					l, err := m.TryAcquire(ctx)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
			default:
				pools := make([]redsyncredis.Pool, len(clients))
				for i, m := range clients {
					pools[i] = goredis.NewPool(m)
				}
				rs := redsync.New(pools...)
				op = func(ctx context.Context, names []string) error {
					sorted := slices.Sorted(slices.Values(names))
					var held []*redsync.Mutex
					defer func() {
						for _, m := range slices.Backward(held) {
							_, _ = m.UnlockContext(ctx)
						}
					}()
					for _, n := range sorted {
						m := rs.NewMutex(n, redsync.WithExpiry(TTL), redsync.WithTries(1))
						if err := m.LockContext(ctx); err != nil {
							return err
						}
						held = append(held, m)
					}
					return nil
				}
			}
			ks := freshKeys(b, b.N*multiNames)
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			lat := make([]time.Duration, 0, b.N)
			var errs int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := range int64(b.N) {
				if ctx.Err() != nil {
					break
				}
				names := make([]string, multiNames)
				for j := range names {
					// Listed in descending order: each library sorts them.
					names[j] = ks.key(i*multiNames+int64(multiNames-1-j), 0)
				}
				start := time.Now()
				if op(ctx, names) != nil {
					errs++
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportLatency(b, lat, errs)
		})
	}
}
