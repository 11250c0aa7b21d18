package pipeline

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/harness"
)

// testFunctions runs echoScript and incrScript as functions; otherScript
// has none, so it always goes as EVALSHA.
var testFunctions = NewFunctions("#!lua name=pipelinetest\n"+
	"redis.register_function('t_echo', function(KEYS, ARGV) return tonumber(ARGV[1]) end)\n"+
	"redis.register_function('t_incr', function(KEYS, ARGV) return redis.call('INCR', KEYS[1]) end)\n",
	map[*redis.Script]string{echoScript: "t_echo", incrScript: "t_incr"})

// callsOf returns how many times the master ran each command so far, from
// INFO commandstats ("fcall", "evalsha", "function|load"...).
func callsOf(t *testing.T, admin *redis.Client) map[string]int {
	t.Helper()
	info, err := admin.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	n := map[string]int{}
	for _, m := range regexp.MustCompile(`cmdstat_([a-z|]+):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		n[m[1]], _ = strconv.Atoi(m[2])
	}
	return n
}

// The first call loads the library; calls go as FCALL alone and in
// batches; a master that lost its functions gets them again, from a call
// sent alone and from a batch, and no call fails meanwhile.
func TestPipelineFunctions(t *testing.T) {
	m, admin, p := startMaster(t)
	p.UseFunctions(testFunctions)
	v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err)
	assert.Equal(t, int64(1), v)
	c := callsOf(t, admin)
	assert.Equal(t, 1, c["function|load"])
	assert.Equal(t, 1, c["fcall"])
	assert.Zero(t, c["evalsha"]+c["eval"])

	occupied := occupy(t, m, p) // otherScript: EVALSHA
	echoAll(t, p, 10, 100, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 10 })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	assert.Equal(t, 11, callsOf(t, admin)["fcall"], "the batch went as FCALL")

	require.NoError(t, admin.FunctionFlush(t.Context()).Err())
	v, err = p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err, "alone, after FUNCTION FLUSH")
	assert.Equal(t, int64(2), v)
	assert.Equal(t, 2, callsOf(t, admin)["function|load"])

	require.NoError(t, admin.FunctionFlush(t.Context()).Err())
	resent := statsOf(p).resent
	occupied = occupy(t, m, p)
	echoAll(t, p, 10, 200, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 10 })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	assert.Equal(t, 3, callsOf(t, admin)["function|load"], "one load for the whole batch")
	assert.Equal(t, resent+1, statsOf(p).resent, "one more write for the whole batch")
	assert.Equal(t, fnOn, p.fnState.Load())
}

// pipelineAs returns a Pipeline with testFunctions over a client of m that
// logs in as a user with the ACL rules given.
func pipelineAs(t *testing.T, m harness.Master, admin *redis.Client, rules ...any) *Pipeline {
	t.Helper()
	args := append([]any{"acl", "setuser", "limited", "on", ">secret", "~*", "&*", "+@all"}, rules...)
	require.NoError(t, admin.Do(t.Context(), args...).Err())
	opt := harness.MasterOptions(m.Addr())
	opt.Username, opt.Password = "limited", "secret"
	opt.ReadTimeout, opt.WriteTimeout = testLimit, testLimit
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	p := New(client, testLimit)
	p.UseFunctions(testFunctions)
	t.Cleanup(p.Close)
	return p
}

// A master that refuses FUNCTION LOAD (here an ACL; Redis 6 does not know
// it) gets scripts, for good, and every call succeeds.
func TestPipelineFunctionsRefused(t *testing.T) {
	m, admin, _ := startMaster(t)
	p := pipelineAs(t, m, admin, "-function", "-fcall")
	require.NoError(t, p.LoadFunctions(t.Context()), "a refusal is not an error")
	assert.Equal(t, fnOff, p.fnState.Load())
	v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err)
	assert.Equal(t, int64(1), v)
	c := callsOf(t, admin)
	assert.Zero(t, c["fcall"])
	assert.Equal(t, 2, c["evalsha"]+c["eval"], "EVALSHA, NOSCRIPT, then EVAL")
}

// A master that takes the library but refuses FCALL gets the call again as
// EVAL, alone or in a batch, and scripts from then on.
func TestPipelineFcallRefused(t *testing.T) {
	m, admin, _ := startMaster(t)
	p := pipelineAs(t, m, admin, "-fcall")
	v, err := p.Run(t.Context(), incrScript, NewKeys("k"), nil, false)
	require.NoError(t, err, "alone")
	assert.Equal(t, int64(1), v)
	assert.Equal(t, fnOff, p.fnState.Load())

	p = pipelineAs(t, m, admin, "-fcall")
	require.NoError(t, p.LoadFunctions(t.Context()))
	require.Equal(t, fnOn, p.fnState.Load())
	occupied := occupy(t, m, p) // otherScript: EVALSHA, which this user may send
	echoAll(t, p, 10, 100, func() {
		poll(t, 5*time.Second, "all queued", func() bool { return queueLen(p) == 10 })
		require.NoError(t, m.Resume(t.Context()))
	})
	require.NoError(t, <-occupied)
	assert.Equal(t, 1, statsOf(p).resent)
	assert.Equal(t, fnOff, p.fnState.Load())
	assert.Zero(t, callsOf(t, admin)["fcall"])
}
