package mutex_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock/mutex"
)

// Lock queues and waits for the turn; the release wakes the next waiter.
func ExampleFair() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	f, err := mutex.NewFair(client, "settlements", &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := f.Lock(ctx) // Enqueue, then Wait
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding under token", lock.Token() > 0)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: holding under token true
}

// A Ticket tells its place in the queue while it waits.
func ExampleTicket() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	f, err := mutex.NewFair(client, "batch-import", &mutex.FairOptions{TTL: 2 * time.Second, WaiterTTL: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	first, err := f.Enqueue(ctx)
	if err != nil {
		log.Fatal(err)
	}
	second, err := f.Enqueue(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Cancel() // leaves the queue if it never waits
	pos, err := second.Position(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second's position:", pos)

	lock, err := first.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pos, err = second.Position(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("while the first holds:", pos)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// second's position: 1
	// while the first holds: 0
}
