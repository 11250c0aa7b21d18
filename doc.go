// Package redlock implements distributed locks on the Redlock algorithm:
// a lock is held by a quorum of independent Redis masters, so that it
// stays safe when a master fails or fails over. It offers exclusive,
// reentrant and read-write locks with fencing tokens, automatic renewal
// and a lost-lock signal; packages mutex and rwmutex block until held,
// and package election elects a leader.
//
// To start: make a Client on five masters with New, and run work under a
// lock with mutex.Mutex.Do, or take one with Client.Acquire:
//
//	client, err := redlock.New(masters, nil) // one *redis.Client per master
//	lock, err := client.Acquire(ctx, "report:42", 10*time.Second)
//	defer lock.Release(ctx)
//
// README.md has a complete program; docs/ tells how it works, the
// guarantees and the assumptions they rest on.
package redlock
