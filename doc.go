// Package redlock implements distributed locks on the Redlock algorithm:
// a quorum of independent Redis masters holds each lock, so that it stays
// safe when a master fails or fails over. It has exclusive, reentrant and
// read-write locks with fencing tokens, renewal and a lost-lock signal;
// packages mutex, rwmutex, election and semaphore add blocking locks,
// elections and a semaphore.
//
// To start, Dial the masters, then run work under a lock with
// mutex.Mutex.Do, or take one with Client.Acquire:
//
//	client, err := redlock.Dial([]string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}, nil)
//	lock, err := client.Acquire(ctx, "report:42", 10*time.Second)
//	defer lock.Release(ctx)
//
// README.md has a complete program; docs/ how it works and its guarantees.
package redlock
