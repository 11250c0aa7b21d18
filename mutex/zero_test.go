package mutex_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/mutex"
)

func TestZeroMutex(t *testing.T) {
	var m mutex.Mutex
	ctx := context.Background() // never ends: a zero Mutex must not wait
	for op, f := range map[string]func() error{
		"Lock":    func() error { return m.Lock(ctx) },
		"TryLock": func() error { return m.TryLock(ctx) },
		"Unlock":  func() error { return m.Unlock(ctx) },
		"Extend":  func() error { return m.Extend(ctx) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "zero Mutex: use mutex.New", op)
	}
	assert.Empty(t, harness.Within(t, "Key", m.Key))
	assert.Nil(t, harness.Within(t, "Current", m.Current))
}

func TestZeroReentrant(t *testing.T) {
	var r mutex.Reentrant
	ctx := context.Background()
	owner := redlock.NewOwner()
	for op, f := range map[string]func() error{
		"Lock":    func() error { return r.Lock(ctx, owner) },
		"TryLock": func() error { return r.TryLock(ctx, owner) },
		"Unlock":  func() error { return r.Unlock(ctx, owner) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "zero Reentrant: use mutex.NewReentrant", op)
	}
	assert.Nil(t, harness.Within(t, "Current", func() *redlock.Lock { return r.Current(owner) }))
}
