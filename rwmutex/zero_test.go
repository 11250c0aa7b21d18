package rwmutex_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/harness"
	"github.com/go-redlock/redlock/rwmutex"
)

func TestZeroRWMutex(t *testing.T) {
	var m rwmutex.RWMutex
	ctx := context.Background() // never ends: a zero RWMutex must not wait
	owner := redlock.NewOwner()
	for op, f := range map[string]func() error{
		"RLock":    func() error { return m.RLock(ctx, owner) },
		"TryRLock": func() error { return m.TryRLock(ctx, owner) },
		"Lock":     func() error { return m.Lock(ctx, owner) },
		"TryLock":  func() error { return m.TryLock(ctx, owner) },
		"RUnlock":  func() error { return m.RUnlock(ctx, owner) },
		"Unlock":   func() error { return m.Unlock(ctx, owner) },
	} {
		err := harness.Within(t, op, f)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, op)
		assert.ErrorContains(t, err, "zero RWMutex: use rwmutex.New", op)
	}
	assert.Nil(t, harness.Within(t, "Reader", func() *redlock.Lock { return m.Reader(owner) }))
	assert.Nil(t, harness.Within(t, "Writer", func() *redlock.Lock { return m.Writer(owner) }))
}
