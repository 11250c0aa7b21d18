package redlocktest_test

import (
	"context"
	"testing"

	"github.com/go-redlock/redlock/redlocktest"
)

// TestStartMastersOutsideATest: masters started without a test answer,
// and Close stops them for good: Restart fails after it,
// and a second Close does nothing.
func TestStartMastersOutsideATest(t *testing.T) {
	ms, err := redlocktest.StartMasters(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, m := range ms {
		if want := []string{"m0", "m1"}[i]; m.Name() != want {
			t.Errorf("name %q, want %q", m.Name(), want)
		}
		if err := m.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
	}
	for _, m := range ms {
		m.Close()
		m.Close()
		if m.Running() {
			t.Errorf("%s runs after Close", m.Name())
		}
		if err := m.Restart(ctx); err == nil {
			t.Errorf("%s: Restart after Close succeeded", m.Name())
		}
	}
}
