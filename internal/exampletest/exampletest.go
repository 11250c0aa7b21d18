// Package exampletest is what the examples of packages redlock, mutex and
// rwmutex share: five masters started for them, and a client on those.
package exampletest

import (
	"log"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
)

// Addrs are the examples' masters: placeholders until Main has started
// local redis-server processes and written their addresses here.
var Addrs = []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"}

// Main is the TestMain of a package with examples (see harness.RunExamples).
func Main(m *testing.M) int { return harness.RunExamples(m, Addrs) }

// Connect returns a Client on Addrs, built as redlock's ExampleNew shows,
// and a func that closes it and its go-redis clients.
func Connect() (*redlock.Client, func()) {
	var masters []*redis.Client
	for _, addr := range Addrs {
		masters = append(masters, redis.NewClient(&redis.Options{
			Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		}))
	}
	client, err := redlock.New(masters, &redlock.Options{MasterTimeout: 200 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	return client, func() {
		client.Close()
		for _, m := range masters {
			m.Close()
		}
	}
}
