package nemesis

import "github.com/go-redlock/redlock/mutex"

// FencingFunc returns the fencing token of the lock m currently holds, and
// false if it has none. The runner calls it right after Lock returns and
// presents the token to the Resource with every read and write.
type FencingFunc func(m *mutex.Mutex) (token uint64, ok bool)

// MutexFencing reads the token of the lock a mutex holds (Lock.Token). A
// client built with redlock.Options.NoFencing has token 0: no token.
func MutexFencing(m *mutex.Mutex) (uint64, bool) {
	l := m.Current()
	if l == nil || l.Token() == 0 {
		return 0, false
	}
	return l.Token(), true
}
