package quorum

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/pipeline"
)

// serverID is an Identity that always knows its server.
type serverID string

func (s serverID) Known() (string, error, bool)          { return string(s), nil, true }
func (s serverID) Admit(context.Context) (string, error) { return string(s), nil }
func (s serverID) Last() string                          { return string(s) }

var errHeldBack = errors.New("held back")

// holdBack is a Policy that refuses master i's agreements, and closes
// done once want masters answered.
type holdBack struct {
	countAnswers
	i int
}

func (h *holdBack) Counts(i int, _ Answer, _ MasterState) error {
	if i == h.i {
		return errHeldBack
	}
	return nil
}

// TestSameServerComesBeforeThePolicysVerdict: masters 0 and 1 reach one
// server; the policy holds master 1 back (a quarantine). Master 1 agrees
// first, then master 0 counts. Master 1's verdict is that its server
// counted already, which holds whatever the policy says: the report must
// not depend on which answered first.
func TestSameServerComesBeforeThePolicysVerdict(t *testing.T) {
	fakes := []*fakeMaster{{reply: 1}, {reply: 1}, {reply: 1}}
	ids := []Identity{serverID("A"), serverID("A"), serverID("B")}
	masters := make([]Master, len(fakes))
	for i, f := range fakes {
		masters[i] = Master{Client: f, Pipe: pipeline.New(f, time.Hour, 1), ID: ids[i]}
	}
	same := func(first, second int, server string) error {
		return fmt.Errorf("same server %s as master %d", server, first)
	}
	e := New(Config{Quorum: 2, MasterTimeout: time.Hour, SameServer: same, Work: newWork()}, masters)
	defer func() {
		for _, m := range masters {
			m.Pipe.Close()
		}
		e.Stop()
	}()
	policy := &holdBack{countAnswers: countAnswers{want: 2, done: make(chan struct{})}, i: 1}
	spec := &Spec{Script: redis.NewScript("return 1"), Keys: pipeline.NewKeys("k"), Policy: policy}

	fakes[0].stall()
	done := make(chan Outcome, 1)
	go func() {
		res, err := e.Do(context.Background(), spec)
		assert.NoError(t, err)
		done <- res
	}()
	within(t, policy.done, "masters 1 and 2 answer")
	fakes[0].resume()
	res := recv(t, done)
	require.True(t, res.OK, "masters 0 and 2 count")
	m1 := res.Master(1)
	assert.False(t, m1.Agreed)
	assert.EqualError(t, m1.Verdict, "same server A as master 0")
	assert.True(t, res.Master(0).Agreed)
}
