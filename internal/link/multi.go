package link

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Multi is what package redlock lends package multi: C is
// *redlock.Client and L is *redlock.Lock. A multi-resource lock is a Lock
// of its own mode, on the keys of each name's exclusive lock (see
// "@multi" in scripts.lua). Its methods are safe for concurrent use.
type Multi[C, L any] interface {
	// CheckNames returns names sorted, or an error wrapping
	// redlock.ErrInvalidArgument: no name, an empty one, one given twice,
	// or names a master cannot take in one call (a Redis Cluster master:
	// names in different slots). It does no I/O.
	CheckNames(client C, names []string) ([]string, error)

	// AcquireMulti takes every name for ttl where a quorum of masters
	// each found them all free, in one round. It blocks for one round,
	// and fails as Client.Acquire does; a failure is undone.
	AcquireMulti(ctx context.Context, client C, names []string, ttl time.Duration) (L, error)

	// Names returns the names of a multi-resource lock, sorted; nil for
	// another Lock.
	Names(l L) []string

	// Held returns the names that err's masters found held, where err
	// is an acquire's, sorted, each once; nil if none.
	Held(err error) []string

	// NewWaker watches the releases of each name on client: every one
	// wakes it. A release seen at or after since (zero: none) wakes it at
	// once.
	NewWaker(client C, names []string, since time.Time) Waker
}

// multi is the Multi that RegisterMulti stored.
var multi any

// RegisterMulti stores h; package redlock calls it once, when it
// initializes.
func RegisterMulti[C, L any](h Multi[C, L]) {
	if multi != nil {
		panic("link: Multi registered twice")
	}
	multi = h
}

// GetMulti returns the Multi that RegisterMulti stored, of the same
// types.
func GetMulti[C, L any]() Multi[C, L] {
	h, ok := multi.(Multi[C, L])
	if !ok {
		var c C
		var l L
		panic(fmt.Sprintf("link: no Multi[%T, %T] registered", c, l))
	}
	return h
}

// MultiKey returns the key a multi-resource lock of names (sorted)
// reports, in Lock.Key, errors and events: its names joined by commas. A
// name that holds a comma or starts with a double quote is quoted, as
// strconv.Quote does, so that no two sets of names report one key.
func MultiKey(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		if strings.Contains(n, ",") || strings.HasPrefix(n, `"`) {
			n = strconv.Quote(n)
		}
		b.WriteString(n)
	}
	return b.String()
}
