package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/mutex"
)

// TestMain starts the examples' masters as local redis-server processes.
func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

// connect returns a Client on five independent masters, as redlock's
// ExampleNew builds it, and a func that closes it.
func connect() (*redlock.Client, func()) { return exampletest.Connect() }

// A Mutex with AutoRenew stays locked until Unlock, however long the work
// takes; Done tells the work when the lock was lost.
func ExampleMutex() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	m, err := mutex.New(client, "nightly-report", &mutex.Options{TTL: 2 * time.Second, AutoRenew: true})
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil { // waits for the lock, or for ctx
		log.Fatal(err)
	}
	defer func() {
		if err := m.Unlock(ctx); err != nil {
			log.Print(err)
		}
	}()

	lock := m.Current()
	select {
	case <-lock.Done(): // renewal could not reach a quorum in time: stop the work
		log.Fatal(lock.Err())
	case <-time.After(2500 * time.Millisecond): // the work, longer than the TTL
	}
	fmt.Println("done under token", lock.Token() > 0)
	// Output: done under token true
}

// TryLock does not wait.
func ExampleMutex_TryLock() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	a, err := mutex.New(client, "cron:cleanup", nil)
	if err != nil {
		log.Fatal(err)
	}
	b, err := mutex.New(client, "cron:cleanup", nil) // another instance of the job
	if err != nil {
		log.Fatal(err)
	}
	if err := a.TryLock(ctx); err != nil {
		log.Fatal(err)
	}
	err = b.TryLock(ctx)
	fmt.Println("second instance skips:", errors.Is(err, redlock.ErrNotObtained))
	if err := a.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: second instance skips: true
}

// The owner of a Reentrant may lock it again; the last Unlock frees it.
func ExampleReentrant() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	r, err := mutex.NewReentrant(client, "account:7", nil)
	if err != nil {
		log.Fatal(err)
	}
	owner := redlock.NewOwner() // passed on to whatever runs on the owner's behalf
	for range 2 {
		if err := r.Lock(ctx, owner); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("holds:", r.Current(owner).Holds())

	other := redlock.NewOwner()
	fmt.Println("another owner refused:", errors.Is(r.TryLock(ctx, other), redlock.ErrNotObtained))

	for range 2 {
		if err := r.Unlock(ctx, owner); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("free:", r.Current(owner) == nil)
	// Output:
	// holds: 2
	// another owner refused: true
	// free: true
}

// Do runs a job under the lock: it waits for the lock, renews it, ends the
// job's context if the lock is lost, and releases it when the job returns.
func ExampleMutex_Do() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	m, err := mutex.New(client, "invoice-run", nil)
	if err != nil {
		log.Fatal(err)
	}
	err = m.Do(ctx, func(ctx context.Context, lock *redlock.Lock) error {
		// Pass ctx to every call of the job: it ends when the lock is lost.
		// Hand lock.Token() to the resource the lock protects.
		fmt.Println("running under token", lock.Token() > 0)
		return ctx.Err()
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", m.Current() == nil)
	// Output:
	// running under token true
	// released: true
}

// A job that outlives its lock learns why from its context's cause.
func ExampleMutex_Do_lost() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	m, err := mutex.New(client, "reindex", nil)
	if err != nil {
		log.Fatal(err)
	}
	err = m.Do(ctx, func(ctx context.Context, lock *redlock.Lock) error {
		// The lock is lost: here, released from under the job.
		if err := lock.Release(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		fmt.Println("job stopped:", context.Cause(ctx))
		return context.Cause(ctx)
	})
	fmt.Println("Do:", errors.Is(err, redlock.ErrReleased))
	// Output:
	// job stopped: redlock: lock released
	// Do: true
}
