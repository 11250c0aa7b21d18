package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/election"
	"github.com/go-redlock/redlock/mutex"
)

// addrs are five independent Redis masters (no replication between them).
var addrs = []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"}

func main() {
	// Dial's go-redis clients never replay a lock call; Close closes them.
	client, err := redlock.Dial(addrs, nil) // a quorum of 3 of 5 masters
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	// Do waits for the lock, renews it while the job runs, cancels the
	// job's ctx if the lock is lost, and releases it when the job returns.
	m, err := mutex.New(client, "nightly-report", nil) // TTL 10s
	if err != nil {
		log.Fatal(err)
	}
	err = m.Do(ctx, func(ctx context.Context, lock *redlock.Lock) error {
		fmt.Println("writing the report until", time.Until(lock.Until()).Round(time.Second))
		return nil // pass ctx and lock.Token() (a fencing token) to the work
	})
	if err != nil {
		log.Fatal(err)
	}

	// Run campaigns, calls fn while this process leads (fn's ctx ends when
	// the lead is lost), and campaigns again, until Run's ctx ends.
	e, err := election.New(client, "scheduler", nil)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(ctx, 2*time.Second) // a service runs until it stops
	defer stop()
	err = e.Run(runCtx, "worker-1", func(ctx context.Context, l *election.Leadership) error {
		fmt.Println("leading as", l.Value())
		<-ctx.Done() // the leader's work, until the lead or the run ends
		return nil
	})
	fmt.Println("run ended:", err)
}
