package nemesis

import "github.com/go-redlock/redlock"

// FencingFunc returns the fencing token of the lock a section holds, and
// false if it has none. The runner calls it right after the lock is taken
// and presents the token to the Resource with every read and write.
type FencingFunc func(l *redlock.Lock) (token uint64, ok bool)

// LockFencing reads the lock's token (Lock.Token). Read locks, and locks
// of a client built with redlock.Options.NoFencing, have token 0: no token.
func LockFencing(l *redlock.Lock) (uint64, bool) {
	if l == nil || l.Token() == 0 {
		return 0, false
	}
	return l.Token(), true
}
