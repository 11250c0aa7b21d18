package pipeline

import (
	"bytes"
	"context"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

var (
	// failScript writes, then fails: a call of it that runs twice shows.
	failScript = redis.NewScript("redis.call('INCR', KEYS[1]) return redis.error_reply('failed after a write')")
	// pexpireScript only sets a TTL, which a master out of memory allows.
	pexpireScript = redis.NewScript("return redis.call('PEXPIRE', KEYS[1], 100000)")
)

// testFunctions runs the scripts above, echoScript and incrScript as
// functions; otherScript has none, so it always goes as EVALSHA.
var testFunctions = NewFunctions("#!lua name=pipelinetest\n"+
	"redis.register_function('t_echo', function(KEYS, ARGV) return tonumber(ARGV[1]) end)\n"+
	"redis.register_function('t_incr', function(KEYS, ARGV) return redis.call('INCR', KEYS[1]) end)\n"+
	"redis.register_function('t_fail', function(KEYS, ARGV) redis.call('INCR', KEYS[1]) return redis.error_reply('failed after a write') end)\n"+
	"redis.register_function('t_pexpire', function(KEYS, ARGV) return redis.call('PEXPIRE', KEYS[1], 100000) end)\n",
	map[*redis.Script]string{echoScript: "t_echo", incrScript: "t_incr", failScript: "t_fail", pexpireScript: "t_pexpire"})

// commandStats returns how many times the master ran each command so far,
// and how many it turned away before running them, from INFO commandstats
// ("fcall", "evalsha", "function|load"...).
func commandStats(t *testing.T, admin *redis.Client) (calls, rejected map[string]int) {
	t.Helper()
	info, err := admin.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	calls, rejected = map[string]int{}, map[string]int{}
	re := regexp.MustCompile(`cmdstat_([a-z|]+):calls=(\d+),.*rejected_calls=(\d+)`)
	for _, m := range re.FindAllStringSubmatch(info, -1) {
		calls[m[1]], _ = strconv.Atoi(m[2])
		rejected[m[1]], _ = strconv.Atoi(m[3])
	}
	return calls, rejected
}

// batchOfEchoes sends n echo calls as one batch: behind a call that holds
// p busy on a paused m (otherScript: EVALSHA), and checks every reply.
func batchOfEchoes(t *testing.T, m harness.Master, p *Pipeline, n, base int) {
	t.Helper()
	occupied := occupy(t, m, p)
	echoAll(t, p, n, base, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == n })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
}

// inBatch makes n calls at once, each with call, as one batch: behind a
// call that holds p busy on a paused m (otherScript: EVALSHA).
func inBatch(t *testing.T, m harness.Master, p *Pipeline, n int, call func()) {
	t.Helper()
	occupied := occupy(t, m, p)
	var wg sync.WaitGroup
	for range n {
		wg.Go(call)
	}
	poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == n })
	require.NoError(t, m.Resume(t.Context()))
	wg.Wait()
	require.NoError(t, <-occupied)
}

// The first call goes as EVALSHA and loads the library in the background;
// later calls go as FCALL, alone and in batches; a master that lost its
// functions gets them again, from a call sent alone and from a batch, and
// no call fails meanwhile.
func TestPipelineFunctions(t *testing.T) {
	m, admin, p := startMaster(t)
	p.UseFunctions(testFunctions)
	// The first call starts the load before it builds its command. A load
	// answered in between would rightly make it an FCALL. So the master
	// stays stopped until the call is built.
	require.NoError(t, m.Pause(t.Context()))
	first := make(chan answer, 1)
	go func() {
		v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
		first <- answer{val: v, err: err}
	}()
	poll(t, 5*time.Second, "sending the first call", func() bool { return statsOf(p).alone == 1 })
	require.NoError(t, m.Resume(t.Context()))
	a := <-first
	v, err := a.val, a.err
	require.NoError(t, err)
	assert.Equal(t, int64(1), v)
	poll(t, 5*time.Second, "loaded", func() bool { return p.fnState.Load() == fnOn })
	calls, _ := commandStats(t, admin)
	assert.Equal(t, 1, calls["function|load"])
	assert.Zero(t, calls["fcall"])

	v, err = p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err)
	assert.Equal(t, int64(2), v)
	batchOfEchoes(t, m, p, 10, 100)
	calls, _ = commandStats(t, admin)
	assert.Equal(t, 11, calls["fcall"], "alone and in a batch")

	require.NoError(t, admin.FunctionFlush(t.Context()).Err())
	v, err = p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err, "alone, after FUNCTION FLUSH")
	assert.Equal(t, int64(3), v)
	calls, _ = commandStats(t, admin)
	assert.Equal(t, 2, calls["function|load"])

	require.NoError(t, admin.FunctionFlush(t.Context()).Err())
	resent := statsOf(p).resent
	batchOfEchoes(t, m, p, 10, 200)
	calls, _ = commandStats(t, admin)
	assert.Equal(t, 3, calls["function|load"], "one load for the whole batch")
	assert.Equal(t, resent+1, statsOf(p).resent, "one more write for the whole batch")
	assert.Equal(t, fnOn, p.fnState.Load())
}

// A function that fails after a write runs once: its error reply is not
// taken for a call that did not run, alone or in a batch.
func TestPipelineFunctionErrorRunsOnce(t *testing.T) {
	m, admin, p := startMaster(t)
	p.UseFunctions(testFunctions)
	require.NoError(t, p.LoadFunctions(t.Context()))
	require.Equal(t, fnOn, p.fnState.Load())
	_, err := p.Run(t.Context(), failScript, NewKeys("n"), nil, false)
	require.ErrorContains(t, err, "failed after a write")
	assert.Equal(t, int64(1), getInt(t, admin, "n"), "alone")

	inBatch(t, m, p, 5, func() {
		_, err := p.Run(t.Context(), failScript, NewKeys("n"), nil, false)
		assert.ErrorContains(t, err, "failed after a write")
	})
	assert.Equal(t, int64(6), getInt(t, admin, "n"), "in a batch")
	assert.Equal(t, fnOn, p.fnState.Load())
}

// pipelineAs returns a Pipeline with testFunctions over a client of m that
// logs in as a user with the ACL rules given.
func pipelineAs(t *testing.T, m harness.Master, admin *redis.Client, rules ...any) *Pipeline {
	t.Helper()
	args := append([]any{"acl", "setuser", "limited", "reset", "on", ">secret", "~*", "&*", "+@all"}, rules...)
	require.NoError(t, admin.Do(t.Context(), args...).Err())
	opt := harness.MasterOptions(m.Addr())
	opt.Username, opt.Password = "limited", "secret"
	opt.ReadTimeout, opt.WriteTimeout = testLimit, testLimit
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	p := New(client, testLimit, 1)
	p.UseFunctions(testFunctions)
	t.Cleanup(p.Close)
	return p
}

// A master that refuses FUNCTION LOAD (here an ACL; Redis 6 does not know
// it) gets scripts, for good, and no FCALL is tried.
func TestPipelineFunctionsRefused(t *testing.T) {
	m, admin, _ := startMaster(t)
	p := pipelineAs(t, m, admin, "-function", "-fcall")
	require.NoError(t, p.LoadFunctions(t.Context()), "a refusal is not an error")
	assert.Equal(t, fnOff, p.fnState.Load())

	p = pipelineAs(t, m, admin, "-function", "-fcall")
	for range 3 {
		v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
		require.NoError(t, err)
		assert.Positive(t, v)
	}
	poll(t, 5*time.Second, "refused", func() bool { return p.fnState.Load() == fnOff })
	calls, rejected := commandStats(t, admin)
	assert.Zero(t, rejected["fcall"])
	assert.Equal(t, 2, rejected["function|load"], "one load per Pipeline")
	assert.Positive(t, calls["evalsha"])
}

// A master that takes the library but refuses FCALL (an ACL, a proxy that
// does not know it) gets the call again as EVAL, alone or in a batch, and
// scripts from then on.
func TestPipelineFcallRefused(t *testing.T) {
	for _, refusal := range []string{"NOPERM", "unknown command"} {
		t.Run(refusal, func(t *testing.T) {
			var m harness.Master
			var admin *redis.Client
			var pipe func() *Pipeline
			if refusal == "NOPERM" {
				m, admin, _ = startMaster(t)
				pipe = func() *Pipeline { return pipelineAs(t, m, admin, "-fcall") }
			} else {
				m, admin, _ = startMaster(t, "--rename-command", "fcall", "")
				pipe = func() *Pipeline { return pipelineAs(t, m, admin) }
			}
			p := pipe()
			require.NoError(t, p.LoadFunctions(t.Context()))
			require.Equal(t, fnOn, p.fnState.Load())
			v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
			require.NoError(t, err, "alone")
			assert.Equal(t, int64(1), v)
			assert.Equal(t, fnOff, p.fnState.Load())

			p = pipe()
			require.NoError(t, p.LoadFunctions(t.Context()))
			require.Equal(t, fnOn, p.fnState.Load())
			batchOfEchoes(t, m, p, 10, 100)
			assert.Equal(t, 1, statsOf(p).resent)
			assert.Equal(t, fnOff, p.fnState.Load())
			if refusal == "NOPERM" {
				_, rejected := commandStats(t, admin)
				assert.Equal(t, 11, rejected["fcall"], "each FCALL was tried once")
			}
		})
	}
}

// A batch whose functions are gone, on a master that then refuses to load
// them again, goes a second time, as EVAL.
func TestPipelineReloadRefusedInBatch(t *testing.T) {
	m, admin, _ := startMaster(t)
	p := pipelineAs(t, m, admin, "-function")
	require.NoError(t, admin.FunctionLoad(t.Context(), testFunctions.Code()).Err())
	p.fnState.Store(fnOn) // as if this user had loaded them
	require.NoError(t, admin.FunctionFlush(t.Context()).Err())
	batchOfEchoes(t, m, p, 10, 100)
	assert.Equal(t, fnOff, p.fnState.Load())
	_, rejected := commandStats(t, admin)
	assert.Equal(t, 1, rejected["function|load"])
}

// A master out of memory turns an FCALL of a function that may write away
// before it runs, where the same script sent as EVAL runs until a write
// that needs memory: a PEXPIRE, as in an extend, still passes.
func TestPipelineFunctionOutOfMemory(t *testing.T) {
	m, admin, p := startMaster(t)
	p.UseFunctions(testFunctions)
	require.NoError(t, p.LoadFunctions(t.Context()))
	require.NoError(t, admin.Set(t.Context(), "k", "v", 0).Err())
	require.NoError(t, admin.ConfigSet(t.Context(), "maxmemory", "1").Err())
	t.Cleanup(func() { _ = admin.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	v, err := p.Run(t.Context(), pexpireScript, NewKeys("k"), nil, false)
	require.NoError(t, err, "alone")
	assert.Equal(t, int64(1), v)

	inBatch(t, m, p, 5, func() {
		v, err := p.Run(t.Context(), pexpireScript, NewKeys("k"), nil, false)
		assert.NoError(t, err, "in a batch")
		assert.Equal(t, int64(1), v)
	})
	_, rejected := commandStats(t, admin)
	assert.Equal(t, 6, rejected["fcall"], "each FCALL was tried, and turned away")
	assert.Equal(t, fnOn, p.fnState.Load(), "functions stay on")
}

// functionProxy relays connections to addr until one carries a FUNCTION
// command: then it closes it, as twemproxy does with a command it does not
// know, or, with hold, no longer relays what the client sends (a black
// hole). It returns its address; the test's end stops it.
func functionProxy(t *testing.T, addr string, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(u)
			wg.Go(func() { _, _ = io.Copy(c, u); _ = c.Close() })
			wg.Go(func() {
				defer func() { _ = c.Close(); _ = u.Close() }()
				buf := make([]byte, 64<<10)
				held := false
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("function")) {
						if !hold {
							return
						}
						held = true
					}
					if held {
						continue
					}
					if _, err := u.Write(buf[:n]); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// Behind a proxy that drops the connection on FUNCTION, the loads never get
// an answer: no call fails, and after maxProbes loads the Pipeline stops
// trying.
func TestPipelineFunctionsWithoutAnswer(t *testing.T) {
	defer func(d time.Duration) { probeInterval = d }(probeInterval)
	probeInterval = time.Millisecond
	cluster := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	client := redis.NewClient(harness.MasterOptions(functionProxy(t, cluster.Masters[0].Addr(), false)))
	t.Cleanup(func() { _ = client.Close() })
	p := New(client, testLimit, 1)
	p.UseFunctions(testFunctions)
	t.Cleanup(p.Close)
	for i := 0; p.fnState.Load() != fnOff; i++ {
		require.Less(t, i, 500, "still loading after 500 calls")
		_, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
		require.NoError(t, err, "call %d", i)
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	assert.Equal(t, maxProbes, p.probes)
	p.mu.Unlock()
}

// Behind a proxy that swallows FUNCTION, a load waits for the Pipeline's
// limit: calls do not wait for it.
func TestPipelineFunctionsLoadHeld(t *testing.T) {
	var p *Pipeline
	// Registered before the proxy's cleanup, so it runs after it: the
	// proxy closes the held load's connection, then Close need not wait
	// for the limit.
	t.Cleanup(func() {
		if p != nil {
			p.Close()
		}
	})
	cluster := harness.NewProcessCluster(t, 1, harness.ProcessOptions{})
	opt := harness.MasterOptions(functionProxy(t, cluster.Masters[0].Addr(), true))
	opt.ReadTimeout, opt.WriteTimeout = testLimit, testLimit
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	// The load is held until the test ends (or the limit, 10s); a call
	// that waited for it would end with its own deadline, 1s.
	p = New(client, testLimit, 1)
	p.UseFunctions(testFunctions)
	for i := range 10 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		v, err := p.Run(ctx, incrScript, NewKeys("k"), nil, false)
		cancel()
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, int64(i+1), v)
	}
	p.mu.Lock()
	assert.True(t, p.probing, "the load is still held")
	p.mu.Unlock()
	assert.Equal(t, fnUnknown, p.fnState.Load())
}
