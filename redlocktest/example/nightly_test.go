package nightly_test

import (
	"testing"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"

	"example.com/nightly"
)

// A user's unit test: five in-process masters, no redis-server needed.
func TestOnlyOneInstanceRuns(t *testing.T) {
	masters := redlocktest.NewMasters(t, 5)
	newRunner := func() *nightly.Runner {
		// Generous: the in-process masters share the test's CPUs, and
		// this test is not about timeouts. Fencing allows at most a
		// quarter of the Runner's 2s TTL.
		c, err := redlock.New(redlocktest.Clients(masters), &redlock.Options{MasterTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		r, err := nightly.NewRunner(c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := newRunner(), newRunner()

	release := make(chan struct{})
	held := make(chan error, 1)
	if ran, err := a.RunOnce(t.Context()); !ran || err != nil {
		t.Fatalf("alone, it runs: %v %v", ran, err)
	}
	go func() { held <- b.Hold(t.Context(), release) }()
	for i := 0; ; i++ {
		ran, err := a.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ran {
			break // b holds the lock now
		}
		if i == 1000 {
			t.Fatal("b never got the lock")
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// Unlock returns once a quorum has released the lock; the other
	// masters get the release in the background.
	for _, m := range masters {
		for i := 0; m.Miniredis().Exists("{nightly-report}"); i++ {
			if i == 500 {
				t.Fatalf("%s still holds the lock after 5s", m.Name())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A master down is survived: three of five remain after two.
	for _, m := range masters[:2] {
		if err := m.Kill(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if ran, err := a.RunOnce(t.Context()); !ran || err != nil {
		t.Fatalf("with two masters down: %v %v", ran, err)
	}
}
