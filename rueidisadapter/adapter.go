// Package rueidisadapter lets a redlock.Client use rueidis clients as its
// masters. rueidis pipelines concurrent calls to one server on its own (its
// auto-pipelining), so redlock sends each call straight through.
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
//	...
//	client, err := redlock.New([]redis.Scripter{rueidisadapter.New(c), ...}, nil)
//
// redlock identifies go-redis masters (INFO) to count two masters that are
// one server once, and a replica not at all; it cannot do so through this
// adapter: run Client.Verify's checks yourself, or give each master once.
// The waiters of mutex and rwmutex are woken by releases through the
// client's own subscriptions (see Scripter.FollowChannel).
package rueidisadapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Scripter runs redlock's scripts on one rueidis client, and is a
// redlock.ChannelSubscriber. It is safe for concurrent use, as the client
// is.
type Scripter struct {
	client rueidis.Client
}

var _ redis.Scripter = (*Scripter)(nil)

// New returns a Scripter on c, which should reach one server (a client made
// with ForceSingleClient, say). Closing c is the caller's job.
func New(c rueidis.Client) *Scripter { return &Scripter{client: c} }

// Eval runs EVAL. The context bounds the call as rueidis does: its
// deadline, or its cancellation, ends the wait.
func (s *Scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	b := s.client.B()
	return s.do(ctx, b.Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

// EvalSha runs EVALSHA; a master without the script replies NOSCRIPT, which
// redis.Script.Run answers with Eval.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	b := s.client.B()
	return s.do(ctx, b.Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

// EvalRO runs EVAL_RO.
func (s *Scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	b := s.client.B()
	return s.do(ctx, b.EvalRo().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

// EvalShaRO runs EVALSHA_RO.
func (s *Scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	b := s.client.B()
	return s.do(ctx, b.EvalshaRo().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

// ScriptExists runs SCRIPT EXISTS.
func (s *Scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	ns, err := s.client.Do(ctx, s.client.B().ScriptExists().Sha1(hashes...).Build()).AsIntSlice()
	out := make([]bool, len(ns))
	for i, n := range ns {
		out[i] = n == 1
	}
	return redis.NewBoolSliceResult(out, convert(err))
}

// ScriptLoad runs SCRIPT LOAD.
func (s *Scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	sha, err := s.client.Do(ctx, s.client.B().ScriptLoad().Script(script).Build()).ToString()
	return redis.NewStringResult(sha, convert(err))
}

// Bounds of FollowChannel's waits: between two subscriptions that failed,
// which double from the first to the second, and for the UNSUBSCRIBE that
// ends one (redlock.Client.Close waits for it).
const (
	minResubscribeDelay = 50 * time.Millisecond
	maxResubscribeDelay = 2 * time.Second
	unsubscribeTimeout  = 100 * time.Millisecond
)

// FollowChannel subscribes to channel, for redlock's wake-on-release (see
// redlock.ChannelSubscriber), and blocks until ctx ends. rueidis
// resubscribes after a reconnect; where the subscription fails or ends
// otherwise, FollowChannel subscribes again after a delay: 50ms after a
// subscription that was confirmed, doubling up to 2s while none is. When
// ctx ends it unsubscribes the client's connection from channel (waiting
// up to 100ms for the reply), which also ends another subscription to
// channel on the same rueidis client (of a second redlock.Client, or of
// the next watch of the same one); that one subscribes again after 50ms,
// and its waiters' timers cover the gap. While the UNSUBSCRIBE is under
// way, more than 16 messages on channel (a burst of releases of a hot
// lock) hold up the connection's other replies until it is answered, up to
// 100ms; rueidis, not the adapter, then waits for the late reply.
func (s *Scripter) FollowChannel(ctx context.Context, channel string, subscribed func(), message func(payload string)) {
	var up atomic.Bool // the last subscription was confirmed
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(p rueidis.PubSubSubscription) {
		if p.Kind == "subscribe" && p.Channel == channel {
			up.Store(true)
			subscribed()
		}
	})
	ctx = rueidis.WithOnReceiveReturnHook(ctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil { // leaving: the server would go on sending
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unsubscribeTimeout)
			defer cancel()
			_ = c.Do(uctx, c.B().Unsubscribe().Channel(channel).Build()).Error()
		}
		return err
	})
	delay := minResubscribeDelay
	for {
		up.Store(false)
		err := s.client.Receive(ctx, s.client.B().Subscribe().Channel(channel).Build(),
			func(m rueidis.PubSubMessage) { message(m.Message) })
		if ctx.Err() != nil || errors.Is(err, rueidis.ErrClosing) {
			return
		}
		if up.Load() {
			delay = minResubscribeDelay
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, maxResubscribeDelay)
	}
}

// do runs a script command; its reply is an integer or a string (redlock's
// scripts return fencing tokens as decimal text).
func (s *Scripter) do(ctx context.Context, cmd rueidis.Completed) *redis.Cmd {
	msg, err := s.client.Do(ctx, cmd).ToMessage()
	if err != nil {
		return redis.NewCmdResult(nil, convert(err))
	}
	if msg.IsInt64() {
		v, _ := msg.AsInt64()
		return redis.NewCmdResult(v, nil)
	}
	v, err := msg.ToAny()
	return redis.NewCmdResult(v, convert(err))
}

// replyError is an error the server replied with. It is a redis.Error, as
// go-redis's own: redis.Script.Run recognizes NOSCRIPT by it, and redlock
// tells a reply (the call's outcome is known) from a network error.
type replyError struct{ msg string }

func (e *replyError) Error() string { return e.msg }

// RedisError marks e as a reply of the server (see redis.Error).
func (e *replyError) RedisError() {}

// convert returns err with a server's error reply as a redis.Error, and
// rueidis' nil reply as redis.Nil; other errors unchanged.
func convert(err error) error {
	if err == nil {
		return nil
	}
	if rueidis.IsRedisNil(err) {
		return redis.Nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return &replyError{msg: re.Error()}
	}
	return err
}

// strs formats script arguments as go-redis does for the types redlock
// sends; any other value is formatted with fmt.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case int:
			out[i] = strconv.Itoa(v)
		case []byte:
			out[i] = string(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}
