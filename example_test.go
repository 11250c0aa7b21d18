package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/exampletest"
	"github.com/go-redlock/redlock/slogobserver"
)

// addrs are the independent Redis masters the examples lock on. When go
// test runs the examples, TestMain starts them as local redis-server
// processes and puts their addresses here.
var addrs = exampletest.Addrs

func TestMain(m *testing.M) { os.Exit(exampletest.Main(m)) }

// connect returns a Client on the masters at addrs, as redlock's ExampleNew
// builds it, and a func that closes it.
func connect() (*redlock.Client, func()) { return exampletest.Connect() }

func ExampleNew() {
	// One go-redis client per independent master: no replication between
	// them. ContextTimeoutEnabled bounds a call by redlock's deadline;
	// MaxRetries -1 keeps go-redis from replaying a lock call, and
	// DialerRetries 1 reports a refused connection at once.
	var masters []*redis.Client
	for _, addr := range addrs {
		masters = append(masters, redis.NewClient(&redis.Options{
			Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		}))
	}
	client, err := redlock.New(masters, nil) // quorum 3 of 5, 50ms per master
	if err != nil {
		log.Fatal(err) // errors.Is(err, redlock.ErrInvalidArgument); the message names the value
	}
	defer client.Close()

	// Verify checks once that every master answers, is a master, and is a
	// server of its own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Verify(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("quorum", client.Quorum(), "of", len(client.Masters()))
	// Output: quorum 3 of 5
}

func ExampleDial() {
	// One address per independent master: no replication between them.
	// Dial builds go-redis clients that never replay a lock call (MaxRetries
	// -1), end each call at redlock's deadline and dial once; Close closes them.
	client, err := redlock.Dial(addrs, nil) // quorum 3 of 5, 50ms per master
	if err != nil {
		log.Fatal(err) // errors.Is(err, redlock.ErrInvalidArgument); the message names the value
	}
	defer client.Close()

	// Verify checks once that every master answers, is a master, is a server
	// of its own, and has a client that cannot replay a call.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Verify(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("quorum", client.Quorum(), "of", len(client.Masters()))
	// Output: quorum 3 of 5
}

func ExampleClient_Acquire() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "report:42", 10*time.Second)
	if errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("someone else is writing the report")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	// Release runs even if ctx has ended, and deletes the lock on every
	// master that holds it.
	defer func() {
		if err := lock.Release(ctx); err != nil {
			log.Print(err) // ErrNotHeld: it expired first; ErrNoQuorum: too few masters answered
		}
	}()
	fmt.Println("writing the report until", time.Until(lock.Until()).Round(time.Second))
	// Output: writing the report until 10s
}

// A lock taken elsewhere is refused with ErrNotObtained; the QuorumError
// says what each master answered.
func ExampleQuorumError() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	held, err := client.Acquire(ctx, "invoice:7", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(ctx)

	_, err = client.Acquire(ctx, "invoice:7", 10*time.Second)
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Println("not obtained:", errors.Is(err, redlock.ErrNotObtained))
		fmt.Printf("%s: fewer than %d of %d masters agreed: %v\n", qe.Op, qe.Quorum, len(qe.Masters), qe.Agreed < qe.Quorum)
		for _, m := range qe.Masters {
			if errors.Is(m.Err, redlock.ErrHeldElsewhere) {
				fmt.Println("held elsewhere on a master")
				break
			}
		}
	}

	// A context that ends first is reported as such, too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = client.Acquire(cctx, "invoice:8", 10*time.Second)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained), errors.Is(err, context.Canceled))
	// Output:
	// not obtained: true
	// acquire: fewer than 3 of 5 masters agreed: true
	// held elsewhere on a master
	// true true
}

// Fencing tokens grow with every acquisition of a lock name. The protected
// resource remembers the largest token it has seen and rejects older ones,
// so a holder that paused past its lock's validity cannot overwrite newer
// work.
func ExampleLock_Token() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	var newest uint64 // kept by the resource, e.g. a column next to the data
	write := func(token uint64) error {
		if token < newest {
			return fmt.Errorf("stale token %d: %d was seen", token, newest)
		}
		newest = token
		return nil
	}

	first, err := client.Acquire(ctx, "ledger", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	firstToken := first.Token()
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := client.Acquire(ctx, "ledger", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)

	fmt.Println("second token larger:", second.Token() > firstToken)
	fmt.Println("second writes:", write(second.Token()) == nil)
	fmt.Println("late first write rejected:", write(firstToken) != nil)
	// Output:
	// second token larger: true
	// second writes: true
	// late first write rejected: true
}

// Done closes when the lock is lost; work under the lock selects on it.
func ExampleLock_AutoRenew() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "compaction", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	lock.AutoRenew() // extends by the TTL every third of it, until the last Release

	select {
	case <-lock.Done(): // renewal could not reach a quorum in time
		log.Fatal(lock.Err())
	case <-time.After(3 * time.Second): // work outlasting the 2s TTL
	}
	fmt.Println("still held:", lock.Held())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	<-lock.Done()
	fmt.Println(lock.Err())
	// Output:
	// still held: true
	// redlock: lock released
}

// A process that restarts takes its lock over again with Resume: same
// token, the validity the masters have left, and a new Lock.
func ExampleClient_Resume() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	owner := redlock.NewOwner() // kept where the restarted process finds it
	old, err := client.AcquireAs(ctx, "migration", owner, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// ... the process restarts, and old is gone with it ...
	lock, err := client.Resume(ctx, "migration", owner, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same token:", lock.Token() == old.Token())
	// Until comes from the TTLs the masters have left, never from the 10s.
	fmt.Println("validity within the TTL left:", time.Until(lock.Until()) < 10*time.Second)
	lock.AutoRenew()
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// same token: true
	// validity within the TTL left: true
}

// outcomes prints the outcome of each acquire and release round.
type outcomes struct{}

func (outcomes) ObserveRound(_ context.Context, r redlock.Round) {
	if r.Op == "acquire" || r.Op == "release" {
		fmt.Println(r.Op, redlock.Outcome(r.Err))
	}
}

func (outcomes) ObserveEvent(context.Context, redlock.Event) {}

// Observers hands every round and event to several observers: here a
// log of warnings (a lost lock, masters down) and a metric of outcomes.
// A refused acquire is contention, not a failure.
func ExampleObservers() {
	var masters []*redis.Client
	for _, addr := range addrs {
		masters = append(masters, redis.NewClient(&redis.Options{
			Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		}))
	}
	defer func() {
		for _, m := range masters {
			m.Close()
		}
	}()
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	obs := redlock.Observers(slogobserver.New(warnings), outcomes{}) // and otelredlock.New's
	client, err := redlock.New(masters, &redlock.Options{Observer: obs, MasterTimeout: 200 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "observed", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Acquire(ctx, "observed", 10*time.Second); !errors.Is(err, redlock.ErrNotObtained) {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// acquire ok
	// acquire contended
	// release ok
}
