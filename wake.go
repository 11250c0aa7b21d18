package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is what a master's client needs for wake-on-release; every
// go-redis client has it.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Waker is woken when the lock it watches is released on a master, so that
// a waiter can retry at once instead of polling. Releases publish on the
// lock's channel on every master; a client keeps one subscription per lock
// name, shared by its Wakers. Messages can be missed (a master restarted,
// or the release came before the subscription): waiters keep a fallback
// timer. A Waker is safe for concurrent use; Close it when done waiting.
type Waker struct {
	// C receives a value when the waiter should retry. It is buffered, so a
	// release that comes while the waiter is busy is kept.
	C <-chan struct{}

	c       chan struct{}
	all     bool
	client  *Client
	channel string
	w       *watch
}

// watch is the shared subscription of one lock name.
type watch struct {
	cancel context.CancelFunc // ends subscriptions still dialling
	done   sync.WaitGroup
	refs   int         // guarded by Client.watchMu
	idle   *time.Timer // ends an unused subscription; guarded by Client.watchMu
	window time.Duration

	mu     sync.Mutex
	subs   []*redis.PubSub
	closed bool
	wakers []*Waker // one-wakers rotate: the first is woken next
	last   string   // the last release seen, and when: every master
	lastAt time.Time
}

// NewWaker starts watching releases of the lock named key. With all, every
// release wakes this Waker (for readers, who may share the lock);
// otherwise each release wakes one of the client's waiters that are not
// all-wakers, in turn (one waiter per release avoids a thundering herd).
// Subscribing does not wait for the masters to confirm.
func (c *Client) NewWaker(key string, all bool) *Waker {
	ch := make(chan struct{}, 1)
	channel := "{" + c.prefix + key + "}"
	k := &Waker{C: ch, c: ch, all: all, client: c, channel: channel}
	c.watchMu.Lock()
	w := c.watches[channel]
	if w == nil {
		var ctx context.Context
		w = &watch{window: c.nodeTimeout}
		ctx, w.cancel = context.WithCancel(context.Background())
		for i := range c.nodes {
			if s, ok := c.nodes[i].client.(subscriber); ok {
				w.done.Add(1)
				go w.follow(ctx, s, channel)
			}
		}
		c.watches[channel] = w
	}
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	w.refs++
	c.watchMu.Unlock()
	k.w = w
	w.mu.Lock()
	w.wakers = append(w.wakers, k)
	w.mu.Unlock()
	return k
}

// watchLinger is how long a subscription nobody waits on is kept, so that
// waiters coming and going do not subscribe anew each time.
const watchLinger = 2 * time.Second

// Close stops this Waker. The subscription of a lock name ends a while
// after its last Waker is closed, or at Client.Close.
func (k *Waker) Close() {
	c, w := k.client, k.w
	w.mu.Lock()
	w.wakers = slices.DeleteFunc(w.wakers, func(x *Waker) bool { return x == k })
	w.mu.Unlock()
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if w.refs--; w.refs == 0 {
		w.idle = time.AfterFunc(watchLinger, func() { c.unwatch(k.channel, w) })
	}
}

// unwatch ends the subscription on channel if it is still unused.
func (c *Client) unwatch(channel string, w *watch) {
	c.watchMu.Lock()
	unused := w.refs == 0 && c.watches[channel] == w
	if unused {
		delete(c.watches, channel)
	}
	c.watchMu.Unlock()
	if unused {
		w.close()
	}
}

// closeWatches ends every subscription.
func (c *Client) closeWatches() {
	c.watchMu.Lock()
	ws := c.watches
	c.watches = map[string]*watch{}
	for _, w := range ws {
		if w.idle != nil {
			w.idle.Stop()
		}
	}
	c.watchMu.Unlock()
	for _, w := range ws {
		w.close()
	}
}

func (w *watch) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	w.mu.Unlock()
	w.cancel()
	for _, ps := range subs {
		_ = ps.Close()
	}
	w.done.Wait()
}

// follow subscribes to one master, in the background as a master may be
// slow to dial, and wakes waiters on its messages until the watch closes.
func (w *watch) follow(ctx context.Context, s subscriber, channel string) {
	defer w.done.Done()
	ps := s.Subscribe(ctx, channel)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		_ = ps.Close()
		return
	}
	w.subs = append(w.subs, ps)
	w.mu.Unlock()
	for m := range ps.Channel() {
		w.wake(m.Payload)
	}
}

// wake signals every all-waker and the next one-waker, then rotates it to
// the back. A release publishes on every master with the releasing owner as
// payload: its copies within the window wake nobody again.
func (w *watch) wake(owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if owner == w.last && now.Sub(w.lastAt) < w.window {
		return
	}
	w.last, w.lastAt = owner, now
	one := -1
	for i, k := range w.wakers {
		if k.all || one < 0 {
			select {
			case k.c <- struct{}{}:
			default:
			}
			if !k.all {
				one = i
			}
		}
	}
	if one >= 0 {
		k := w.wakers[one]
		w.wakers = append(slices.Delete(w.wakers, one, one+1), k)
	}
}
