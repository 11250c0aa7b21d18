package harness

import (
	"testing"
	"time"
)

// Within runs f in a goroutine and returns its result, or fails the test
// if f panics or does not return within 5s (zero values of the lock types
// must never hang or panic).
func Within[T any](t testing.TB, name string, f func() T) T {
	t.Helper()
	type result struct {
		v     T
		panic any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			r.panic = recover()
			done <- r
		}()
		r.v = f()
	}()
	select {
	case r := <-done:
		if r.panic != nil {
			t.Errorf("%s panicked: %v", name, r.panic)
		}
		return r.v
	case <-time.After(5 * time.Second):
		t.Errorf("%s did not return within 5s", name)
		var zero T
		return zero
	}
}
