package rwmutex_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/rwmutex"
)

// TestMain starts the examples' masters as local redis-server processes.
func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

// connect returns a Client on five independent masters, as redlock's
// ExampleNew builds it, and a func that closes it.
func connect() (*redlock.Client, func()) { return exampletest.Connect() }

// Readers share the lock; a writer waits for them and keeps new readers out
// meanwhile; a writer may downgrade to a reader; a reader may not upgrade.
func ExampleRWMutex() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	rw, err := rwmutex.New(client, "catalog", nil)
	if err != nil {
		log.Fatal(err)
	}
	alice, bob, writer := redlock.NewOwner(), redlock.NewOwner(), redlock.NewOwner()

	for _, reader := range []string{alice, bob} { // readers share the lock
		if err := rw.RLock(ctx, reader); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("writer refused while reading:", errors.Is(rw.TryLock(ctx, writer), redlock.ErrNotObtained))
	fmt.Println("reader cannot upgrade:", errors.Is(rw.Lock(ctx, alice), redlock.ErrUpgrade))

	// Lock waits until both readers are gone; new readers wait for it.
	locked := make(chan error, 1)
	go func() { locked <- rw.Lock(ctx, writer) }()
	for _, reader := range []string{alice, bob} {
		if err := rw.RUnlock(ctx, reader); err != nil {
			log.Fatal(err)
		}
	}
	if err := <-locked; err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing under token", rw.Writer(writer).Token() > 0)

	// A downgrade: read, then give up the write lock.
	if err := rw.RLock(ctx, writer); err != nil {
		log.Fatal(err)
	}
	if err := rw.Unlock(ctx, writer); err != nil {
		log.Fatal(err)
	}
	fmt.Println("downgraded; others may read:", rw.RLock(ctx, alice) == nil)
	for _, reader := range []string{writer, alice} {
		if err := rw.RUnlock(ctx, reader); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// writer refused while reading: true
	// reader cannot upgrade: true
	// writing under token true
	// downgraded; others may read: true
}

// Do and RDo run work under the write and the read lock.
func ExampleRWMutex_Do() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	rw, err := rwmutex.New(client, "prices", nil)
	if err != nil {
		log.Fatal(err)
	}
	owner := redlock.NewOwner()
	err = rw.Do(ctx, owner, func(ctx context.Context, lock *redlock.Lock) error {
		fmt.Println("writing under token", lock.Token() > 0)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	err = rw.RDo(ctx, owner, func(ctx context.Context, lock *redlock.Lock) error {
		fmt.Println("reading")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// writing under token true
	// reading
}
