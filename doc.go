// Package redlock implements distributed locks on the Redlock algorithm:
// a lock is held by a quorum of independent Redis masters, so that it
// stays safe when a master fails or fails over. It offers exclusive,
// reentrant and read-write locks with fencing tokens, automatic renewal
// and a lost-lock signal; packages mutex and rwmutex block until held,
// package election elects a leader, and package semaphore admits N
// holders.
//
// To start: make a Client on your masters with Dial (or New, from
// go-redis clients). Run work under a lock with mutex.Mutex.Do, or take
// one with Client.Acquire:
//
//	client, err := redlock.Dial([]string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}, nil)
//	lock, err := client.Acquire(ctx, "report:42", 10*time.Second)
//	defer lock.Release(ctx)
//
// README.md has a complete program; docs/ tells how it works, the
// guarantees and the assumptions they rest on.
package redlock
