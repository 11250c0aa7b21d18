package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/semaphore"
)

// Three workers at most share a rate-limited API. A fourth permit waits
// for a release; each permit carries its own fencing token.
func ExampleSemaphore_Acquire() {
	client, done := exampletest.Connect()
	defer done()
	ctx := context.Background()

	s, err := semaphore.New(client, "api-quota", &semaphore.Options{TTL: 2 * time.Second, AutoRenew: true})
	if err != nil {
		log.Fatal(err)
	}
	var permits []*redlock.Lock
	for range 3 {
		p, err := s.Acquire(ctx, 3) // at most 3 holders of "api-quota"
		if err != nil {
			log.Fatal(err)
		}
		permits = append(permits, p)
	}
	_, err = s.TryAcquire(ctx, 3)
	fmt.Println("fourth permit refused:", errors.Is(err, redlock.ErrNotObtained))
	fmt.Println("tokens increase:", permits[0].Token() < permits[1].Token() && permits[1].Token() < permits[2].Token())

	if err := permits[0].Release(ctx); err != nil { // wakes a waiter, if any
		log.Fatal(err)
	}
	p, err := s.Acquire(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fourth permit after a release:", p.Held())
	for _, p := range append(permits[1:], p) {
		if err := p.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// fourth permit refused: true
	// tokens increase: true
	// fourth permit after a release: true
}
