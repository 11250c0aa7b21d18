package multi_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/multi"
)

// A transfer locks both accounts at once, in whatever order the caller
// lists them. A plain lock on one of the accounts waits meanwhile.
func ExampleMutex_Do() {
	client, done := exampletest.Connect()
	defer done()
	ctx := context.Background()

	m, err := multi.New(client, []string{"account:9", "account:7"}, &multi.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = m.Do(ctx, func(ctx context.Context, lock *redlock.Lock) error {
		fmt.Println("holding", multi.Names(lock))
		_, err := client.Acquire(ctx, "account:7", time.Second)
		fmt.Println("account:7 alone refused:", errors.Is(err, redlock.ErrNotObtained))
		return nil // pass lock.Token(), every name's fencing token, to the work
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding [account:7 account:9]
	// account:7 alone refused: true
}

// TryAcquire makes one attempt; a held name refuses the whole set, and
// nothing is left taken.
func ExampleMutex_TryAcquire() {
	client, done := exampletest.Connect()
	defer done()
	ctx := context.Background()

	held, err := client.Acquire(ctx, "printer", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	m, err := multi.New(client, []string{"scanner", "printer"}, &multi.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_, err = m.TryAcquire(ctx)
	fmt.Println("refused:", errors.Is(err, redlock.ErrNotObtained))
	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
	l, err := m.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token larger than the plain lock's:", l.Token() > held.Token())
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// refused: true
	// token larger than the plain lock's: true
}
