package pipeline

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RunValues runs s on the master, alone, and returns its reply as
// integers: an integer reply is one, an array reply gives one per element.
// It suits a script that answers many items at once. Its reply is too
// large to batch with others, and it is never shed nor queued behind
// other calls: it takes a connection of its own from the client's pool.
// It sends FCALL, EVALSHA or EVAL as the Pipeline's other calls go. Of
// opts, only Wait, WaitUntil and Role apply: WAIT and ROLE follow the
// call on its connection, and what they told is returned. It blocks
// until the reply or until ctx ends, which cuts the call off. Once the
// Pipeline is closed it returns ErrClosed. Close waits for it. It is
// safe for concurrent use.
func (p *Pipeline) RunValues(ctx context.Context, s *redis.Script, keys Keys, args []any, opts Options) ([]int64, Replication, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, Replication{}, ErrClosed
	}
	p.probeLocked()
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	if err := ctx.Err(); err != nil {
		return nil, Replication{}, notSent(err)
	}
	c := &call{script: s, keys: keys, args: args}
	c.Wait, c.WaitUntil, c.Role = opts.Wait, opts.WaitUntil, opts.Role
	if p.proc != nil {
		c.cmd = p.build(ctx, c, s, keys, args)
	}
	cmd := p.runCmd(ctx, c)
	if c.Role && p.piper == nil {
		c.rep.Role.Err = errNoRole
	}
	vals, err := values(cmd)
	return vals, c.rep, err
}

// values returns cmd's reply as integers (see RunValues).
func values(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				return nil, fmt.Errorf("redlock: reply %d of %d is %T, not an integer", i, len(v), e)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("redlock: reply is %T, not an integer nor an array", v)
}
