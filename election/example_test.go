package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/internal/exampletest"
)

// connect returns a Client on five independent masters, as redlock's
// ExampleNew builds it, and a func that closes it.
func connect() (*redlock.Client, func()) { return exampletest.Connect() }

// A candidate campaigns with its address, leads, changes the address it
// publishes, and resigns.
func ExampleElection_Campaign() {
	client, done := connect()
	defer done()
	ctx := context.Background()

	e, err := election.New(client, "scheduler", &election.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	l, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until this candidate leads
	if err != nil {
		log.Fatal(err)
	}
	info, err := e.Leader(ctx) // what any process reads
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", info.Value, "epoch is mine:", info.Epoch == l.Epoch())

	if err := l.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		log.Fatal(err)
	}
	info, _ = e.Leader(ctx)
	fmt.Println("leader:", info.Value)

	if err := l.Resign(ctx); err != nil { // the next candidate leads at once
		log.Fatal(err)
	}
	_, err = e.Leader(ctx)
	fmt.Println("after resign:", errors.Is(err, election.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080 epoch is mine: true
	// leader: 10.0.0.7:9090
	// after resign: true
}

// An observer sees every leader and every value, in epoch order, and
// the vacancies between them.
func ExampleElection_Observe() {
	client, done := connect()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	e, err := election.New(client, "primary", &election.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	changes := e.Observe(ctx) // closed when ctx ends
	show := func() {
		info := <-changes
		if info.Vacant {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", info.Value)
	}
	show() // the current state comes first

	for _, addr := range []string{"db-1", "db-2"} {
		l, err := e.Campaign(ctx, addr)
		if err != nil {
			log.Fatal(err)
		}
		show()
		if err := l.Resign(ctx); err != nil {
			log.Fatal(err)
		}
		show()
	}
	// Output:
	// no leader
	// leader: db-1
	// no leader
	// leader: db-2
	// no leader
}

// Run keeps a job running on one candidate at a time: it campaigns,
// runs the job while it leads, and campaigns again when the job returns,
// until its context ends.
func ExampleElection_Run() {
	client, done := connect()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	e, err := election.New(client, "compactor", &election.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	rounds := 0
	err = e.Run(ctx, "worker-1", func(ctx context.Context, l *election.Leadership) error {
		// ctx ends when the lead is lost: stop writing then. Pass
		// l.Epoch() to the storage as a fencing token.
		rounds++
		fmt.Println("leading, round", rounds, "fenced:", l.Epoch() > 0)
		if rounds == 2 {
			stop() // the service shuts down
		}
		return nil // resign; Run campaigns again
	})
	fmt.Println("run ended:", errors.Is(err, context.Canceled))
	// Output:
	// leading, round 1 fenced: true
	// leading, round 2 fenced: true
	// run ended: true
}

// A leader keeps its Owner where its next process finds it (a file, say).
// After a restart, that process resumes the lead: same epoch, and its
// Proclaims go on from the last.
func ExampleElection_Resume() {
	client, done := connect()
	defer done()
	ctx := context.Background()
	e, err := election.New(client, "resumed-scheduler", &election.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	l, err := e.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	owner := l.Owner() // kept as a secret: it takes the lead

	// ... the process restarts; a new one, with a client of its own ...
	again, err := e.Resume(ctx, owner)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same epoch:", again.Epoch() == l.Epoch(), "value:", again.Value())
	if err := again.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		log.Fatal(err)
	}
	info, _ := e.Leader(ctx)
	fmt.Println("leader:", info.Value, "seq:", info.Seq)
	if err := again.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// same epoch: true value: 10.0.0.7:8080
	// leader: 10.0.0.7:9090 seq: 1
}
