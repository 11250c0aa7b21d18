// Package nightly is how a user's code might use redlock: a job that must
// not run on two instances at once.
package nightly

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/mutex"
)

// Runner runs the nightly report under a lock. Only its goroutine uses it.
type Runner struct {
	lock *mutex.Mutex
	Runs int
}

// NewRunner returns a Runner that locks through client.
func NewRunner(client *redlock.Client) (*Runner, error) {
	m, err := mutex.New(client, "nightly-report", &mutex.Options{TTL: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	return &Runner{lock: m}, nil
}

// RunOnce runs the report, and reports false if another instance holds
// the lock.
func (r *Runner) RunOnce(ctx context.Context) (bool, error) {
	if err := r.lock.TryLock(ctx); err != nil {
		if errors.Is(err, redlock.ErrNotObtained) {
			return false, nil
		}
		return false, fmt.Errorf("nightly: %w", err)
	}
	defer func() { _ = r.lock.Unlock(context.WithoutCancel(ctx)) }()
	r.Runs++
	return true, nil
}

// Hold takes the lock until release is closed: another instance at work.
func (r *Runner) Hold(ctx context.Context, release <-chan struct{}) error {
	if err := r.lock.Lock(ctx); err != nil {
		return err
	}
	<-release
	return r.lock.Unlock(context.WithoutCancel(ctx))
}
