package redlock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is what a go-redis master's client has for wake-on-release.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// ChannelSubscriber is a master's client, other than go-redis', that can
// follow a channel, so that releases wake waiters (see rueidisadapter).
// Without one, waiters retry on their timers.
type ChannelSubscriber interface {
	// FollowChannel calls subscribed on each confirmed subscription and
	// message on each payload, resubscribing as needed, until ctx ends.
	// It calls neither after it returns, and neither may block.
	FollowChannel(ctx context.Context, channel string, subscribed func(), message func(payload string))
}

// waker is woken when the lock it watches is released on a master, so
// that a waiter can retry at once instead of polling. A release publishes
// on the lock's channel on every master where an acquire was refused
// while the lock was held. A read-write lock's release publishes on every
// master. A client keeps one subscription per lock name, shared by its
// wakers. Messages can be missed: a master restarted, or the release came
// before the subscription. So waiters keep a fallback timer. A waker is
// safe for concurrent use; Close it when done waiting. One made by a
// closed, zero or nil Client is never woken. newWaker sets its fields;
// only closed changes after.
type waker struct {
	c     chan struct{} // buffered: a release while the waiter is busy is kept
	all   bool
	want  string // set: woken only by a publication of want; guarded by watch.mu
	woken string // the release that woke it last, until taken; guarded by watch.mu
	// once: a release wakes it with its first copy alone; guarded by
	// watch.mu. Its waiter does not retry when a later copy comes: it
	// lost the race for what the release freed, or waits for its timer.
	once    bool
	settled bool // the watch existed before this waker: see Settled
	client  *Client
	channel string
	w       *watch // nil if the waker watches nothing
	closed  sync.Once
}

// watchSet is a Client's release subscriptions. Once the Client is closed
// it takes no new one. Close ends them all.
type watchSet struct {
	mu         sync.RWMutex      // guards byChannel, and each watch's refs and idle
	byChannel  map[string]*watch // the shared subscription of each lock name
	unwatching sync.WaitGroup    // subscriptions an idle timer is closing
}

// watch is the shared subscription of one lock name. cancel, window and
// subscribers are set when it is made, then never changed.
type watch struct {
	cancel context.CancelFunc // ends subscriptions still dialling
	done   sync.WaitGroup
	refs   int         // guarded by watchSet.mu
	idle   *time.Timer // ends an unused subscription; guarded by watchSet.mu
	window time.Duration

	// mu guards the fields below. subscribers is set at creation.
	mu     sync.Mutex
	subs   []*redis.PubSub
	closed bool
	// ready is when the last of the watch's subscriptions was confirmed.
	// It is zero until then. It stays zero for a client none of whose
	// masters can subscribe.
	ready       time.Time
	confirmed   int        // subscriptions confirmed
	subscribers int        // masters subscribed to; set at creation
	wakers      []*waker   // one-wakers rotate: the first is woken next
	recent      []released // releases seen within the window, oldest first

	live chan struct{} // closed when ready is set; made with the watch
}

// released is a release seen by a watch: several masters publish it.
type released struct {
	id       string    // the released Lock's nonce: see scripts.lua
	at, last time.Time // its first and its latest copy
	one      *waker    // the one-waker it woke, if any
}

// maxRecent bounds the releases a watch remembers.
const maxRecent = 64

// newWaker starts watching releases of the lock named key. With all,
// every release wakes this waker: readers may share the lock. Otherwise
// each release wakes one of the client's waiters that are not all-wakers,
// in turn. One waiter per release avoids a thundering herd. since is the
// start of the caller's last attempt, or zero for none. A release the
// watch saw at or after since wakes the new waker at once. Subscribing
// does not wait for the masters to confirm. A closed, zero or nil Client
// returns a waker that is never woken.
func (c *Client) newWaker(key string, all bool, since time.Time) *waker {
	if c.check() != nil {
		return &waker{c: make(chan struct{}, 1)}
	}
	return c.wakerOn(lockKey(c.prefix+key), all, since) // where the release scripts publish: KEYS[1]
}

// wakerOn is newWaker for the releases published on channel, the first
// key of the Locks it waits for. c must be checked.
func (c *Client) wakerOn(channel string, all bool, since time.Time) *waker {
	return c.wakerInto(make(chan struct{}, 1), channel, all, since)
}

// wakerInto is wakerOn with ch, buffered, as the waker's channel: wakers
// of several channels may share one.
func (c *Client) wakerInto(ch chan struct{}, channel string, all bool, since time.Time) *waker {
	k := &waker{c: ch, all: all, client: c, channel: channel}
	ws := &c.watches
	ws.mu.Lock()
	if c.gate.closed() { // Close ends every watch once closed
		ws.mu.Unlock()
		return &waker{c: ch}
	}
	if ws.byChannel == nil {
		ws.byChannel = map[string]*watch{}
	}
	w := ws.byChannel[channel]
	if w == nil {
		var ctx context.Context
		// A release's copies come from several masters. The last one
		// comes up to the bound of a call decided without it.
		w = &watch{window: lateCallFactor * c.masterTimeout, live: make(chan struct{})}
		ctx, w.cancel = context.WithCancel(context.Background())
		var follows []func()
		for i := range c.nodes {
			switch s := c.nodes[i].client.(type) {
			case subscriber:
				follows = append(follows, func() { w.follow(ctx, s, channel) })
			case ChannelSubscriber:
				confirm := sync.OnceFunc(w.confirm)
				follows = append(follows, func() { s.FollowChannel(ctx, channel, confirm, w.wake) })
			}
		}
		w.subscribers = len(follows) // before any follow reads it
		for _, f := range follows {
			w.done.Go(f)
		}
		ws.byChannel[channel] = w
	}
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	w.refs++
	ws.mu.Unlock()
	k.w = w
	w.mu.Lock()
	w.wakers = append(w.wakers, k)
	if !since.IsZero() {
		k.settled = !w.ready.IsZero() && w.ready.Before(since)
		if i := slices.IndexFunc(w.recent, func(r released) bool { return !r.last.Before(since) }); i >= 0 {
			k.woken = w.recent[i].id
			select { // a shared channel may be full already: it wakes all the same
			case k.c <- struct{}{}:
			default:
			}
		}
	}
	w.mu.Unlock()
	return k
}

// takeWoken returns the identifier of the release that woke k last,
// and forgets it. It returns "" where no release woke k since the last
// call. A permit's tells the slot it freed.
func (k *waker) takeWoken() string {
	if k.w == nil {
		return ""
	}
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	id := k.woken
	k.woken = ""
	return id
}

// Settled reports whether every master had confirmed the watch's
// subscription before the caller's last attempt began. A release since
// then reaches the waker, unless a connection broke meanwhile. So the
// caller may wait without trying again first.
func (k *waker) Settled() bool { return k.settled }

// Live returns a channel closed once every master confirmed the watch's
// subscription: from then on a release reaches the waker, unless a
// connection broke. A waker that watches nothing is never live.
func (k *waker) Live() <-chan struct{} {
	if k.w == nil {
		return nil
	}
	return k.w.live
}

// releasing wakes this client's waiters for the lock on channel. It wakes
// them as the first published copy of a release would. It runs when the
// last release of the Lock with nonce id hands the lock on. That is as
// soon as the release's calls are queued, where the waiter's acquire,
// sent next, reaches each master after them. Else it is once the
// release's round is decided. The acquire may overtake the release all
// the same: a call answered NOSCRIPT, say. It is then refused there. The
// release finds it waited for, and publishes. Copies that come within the
// watch's window wake the same waiter again, where the master's client
// can subscribe.
func (c *Client) releasing(channel, id string) {
	c.watches.mu.RLock() // every last release comes here: releases do not wait on each other
	w := c.watches.byChannel[channel]
	c.watches.mu.RUnlock()
	if w != nil {
		w.wake(id)
	}
}

// watchLinger is how long a subscription nobody waits on is kept, so that
// waiters coming and going do not subscribe anew each time.
const watchLinger = 2 * time.Second

// Wake receives a value when the waiter should retry.
func (k *waker) Wake() <-chan struct{} { return k.c }

// Close stops this waker. The subscription of a lock name ends a while
// after its last waker is closed, or at Client.Close. Closing a waker
// again does nothing.
func (k *waker) Close() {
	if k.w != nil {
		k.closed.Do(func() { k.stop(false) })
	}
}

// GiveUp is Close for a waiter that leaves without the lock. A release
// that woke it wakes the next one-waker with its later copies. The next
// waiter of this process may have been refused on the masters those come
// from. After Close, a release's later copies wake no other: its waiter
// has the lock.
func (k *waker) GiveUp() {
	if k.w != nil {
		k.closed.Do(func() { k.stop(true) })
	}
}

func (k *waker) stop(gaveUp bool) {
	c, w := k.client, k.w
	w.mu.Lock()
	w.wakers = slices.DeleteFunc(w.wakers, func(x *waker) bool { return x == k })
	if gaveUp {
		for i := range w.recent {
			if w.recent[i].one == k {
				w.recent[i].one = nil // the next copy chooses
			}
		}
	}
	w.mu.Unlock()
	c.watches.mu.Lock()
	defer c.watches.mu.Unlock()
	if w.refs--; w.refs == 0 && !c.gate.closed() {
		w.idle = time.AfterFunc(watchLinger, func() { c.unwatch(k.channel, w) })
	}
}

// unwatch ends the subscription on channel if it is still unused.
func (c *Client) unwatch(channel string, w *watch) {
	ws := &c.watches
	ws.mu.Lock()
	unused := w.refs == 0 && ws.byChannel[channel] == w
	if unused {
		delete(ws.byChannel, channel)
		ws.unwatching.Add(1) // Close waits for it
	}
	ws.mu.Unlock()
	if unused {
		w.close()
		ws.unwatching.Done()
	}
}

// closeWatches ends every subscription. The Client must be closed, so
// that none starts any more.
func (c *Client) closeWatches() {
	set := &c.watches
	set.mu.Lock()
	ws := set.byChannel
	set.byChannel = nil
	for _, w := range ws {
		if w.idle != nil {
			w.idle.Stop()
		}
	}
	set.mu.Unlock()
	for _, w := range ws { // all at once: a master that does not answer holds each
		w.end()
	}
	for _, w := range ws {
		w.done.Wait()
	}
	set.unwatching.Wait()
}

// close ends the watch's subscriptions and waits for them.
func (w *watch) close() {
	w.end()
	w.done.Wait()
}

// end ends the watch's subscriptions without waiting for them.
func (w *watch) end() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	w.mu.Unlock()
	w.cancel()
	for _, ps := range subs {
		_ = ps.Close()
	}
}

// follow subscribes to one go-redis master and wakes waiters on its
// messages until the watch closes. It runs in the background, as a master
// may be slow to dial.
func (w *watch) follow(ctx context.Context, s subscriber, channel string) {
	ps := s.Subscribe(ctx, channel)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		_ = ps.Close()
		return
	}
	w.subs = append(w.subs, ps)
	w.mu.Unlock()
	// The first reply confirms the subscription. From then on, no release
	// published on this master is missed while the connection lasts. An
	// error (a master down) leaves the watch unconfirmed. Channel goes on
	// reconnecting.
	if _, err := ps.Receive(ctx); err == nil {
		w.confirm()
	}
	for m := range ps.Channel() {
		w.wake(m.Payload)
	}
}

// confirm counts the first confirmation of one master's subscription.
func (w *watch) confirm() {
	w.mu.Lock()
	if w.confirmed++; w.confirmed == w.subscribers {
		w.ready = time.Now()
		close(w.live)
	}
	w.mu.Unlock()
}

// wake signals every all-waker and the next one-waker, then rotates it to
// the back. A release publishes on each master where it was waited for.
// Its payload is an identifier of its own. Its copies come as it reaches
// the masters. A copy within the window wakes the same waiters again, and
// no other one. A waiter that retried between two copies found the lock
// still held on the masters the release had not reached yet. It retries
// once more. A release that woke no one-waker wakes the next with its
// later copies. Every other release, even by the same owner, wakes the
// next one-waker.
func (w *watch) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.wakers { // a fair lock's next waiter
		if k.want != "" && k.want == id {
			select {
			case k.c <- struct{}{}:
			default:
			}
		}
	}
	now := time.Now()
	old := 0
	for old < len(w.recent) && now.Sub(w.recent[old].at) >= w.window {
		old++
	}
	w.recent = slices.Delete(w.recent, 0, old)
	if i := slices.IndexFunc(w.recent, func(r released) bool { return r.id == id }); i >= 0 {
		r := &w.recent[i]
		r.last = now
		one := r.one
		if one == nil { // a waiter that came since may have met the release half done
			r.one = w.nextOne()
			one = r.one
		} else if one.once {
			one = nil // every all-waker still
		}
		w.signal(one, id)
		return
	}
	if len(w.recent) == maxRecent {
		w.recent = slices.Delete(w.recent, 0, 1)
	}
	one := w.nextOne()
	w.recent = append(w.recent, released{id: id, at: now, last: now, one: one})
	w.signal(one, id)
}

// nextOne returns the next one-waker, rotated to the back, or nil if
// there is none. w.mu must be held.
func (w *watch) nextOne() *waker {
	i := slices.IndexFunc(w.wakers, func(k *waker) bool { return !k.all && k.want == "" })
	if i < 0 {
		return nil
	}
	one := w.wakers[i]
	w.wakers = append(slices.Delete(w.wakers, i, i+1), one)
	return one
}

// signal wakes every all-waker and one, if it is still watching, for
// the release id. w.mu must be held.
func (w *watch) signal(one *waker, id string) {
	for _, k := range w.wakers {
		if k.all || k == one {
			k.woken = id
			select {
			case k.c <- struct{}{}:
			default:
			}
		}
	}
}

// contestedSet is the channels of the locks whose last release by this
// client found that another client had waited.
type contestedSet struct {
	mu  sync.Mutex // guards set
	set map[string]struct{}
	n   atomic.Int32 // len(set), read without the lock
}

// maxContested bounds the channels Client.contested remembers. Past it
// they are forgotten, which costs at most one early hand-off each.
const maxContested = 4096

// isContested reports whether this client's last release of the lock on
// channel found that another client had waited for it. Then the next
// release hands the lock on to this client's waiters only once its round
// is decided. It does not hand it on as soon as its calls are queued. The
// other client's waiters, woken by the release's publication, then race
// this client's on equal terms. An acquire queued behind the release on
// each master would win every time.
func (c *Client) isContested(channel string) bool {
	cs := &c.contested
	if cs.n.Load() == 0 {
		return false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	_, ok := cs.set[channel]
	return ok
}

// contest records whether a last release of the lock on channel found that
// another client had waited.
func (c *Client) contest(channel string, waited bool) {
	cs := &c.contested
	if !waited && cs.n.Load() == 0 {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch {
	case !waited:
		delete(cs.set, channel)
	case cs.set == nil:
		cs.set = map[string]struct{}{}
	case len(cs.set) >= maxContested:
		clear(cs.set)
	}
	if waited {
		cs.set[channel] = struct{}{}
	}
	cs.n.Store(int32(len(cs.set)))
}

// wakerOnce is wakerOn for a waiter that a release wakes once: not again
// with its later copies.
func (c *Client) wakerOnce(channel string, since time.Time) *waker {
	k := c.wakerOn(channel, false, since)
	if k.w != nil {
		k.w.mu.Lock()
		k.once = true
		k.w.mu.Unlock()
	}
	return k
}

// wakerFor watches channel for publications of want alone: a fair lock's
// waiter, woken when it is next. A closed Client's is never woken.
func (c *Client) wakerFor(channel, want string) *waker {
	k := c.wakerOn(channel, false, time.Time{})
	if k.w != nil {
		k.w.mu.Lock()
		k.want = want
		k.w.mu.Unlock()
	}
	return k
}
