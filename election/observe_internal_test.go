package election

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/link"
	"github.com/go-redlock/redlock/internal/retry"
)

// TestObserveKeepsANewLeaderThatOneReadSawHalfway: the masters answer a
// read at different instants. Those that answer before a new leader's
// acquire show no lock, or the last leader's; one that answers after its
// record round shows its win. That read proves nothing about the new
// leader's lock, so the observer must not report it gone, nor then skip
// its Proclaim and resignation. The readings are made up here, in the
// order a real read can see them; no master and no clock is involved.
func TestObserveKeepsANewLeaderThatOneReadSawHalfway(t *testing.T) {
	const epoch = 7
	win := link.Entry{Epoch: epoch, Value: "a"}
	proclaim := link.Entry{Epoch: epoch, Seq: 1, Value: "a2"}
	resign := link.Entry{Epoch: epoch, Seq: 2, Resigned: true}
	for name, halfway := range map[string]*reading{
		"no lock on a quorum":    {vacant: true},
		"the last leader's lock": {holder: &holding{nonce: "z", epoch: epoch - 1, until: time.Now().Add(time.Hour)}},
	} {
		t.Run(name, func(t *testing.T) {
			halfway.entries = []link.Entry{win}
			readings := []*reading{
				{vacant: true}, // the first read: no leader, no history
				halfway,
				{holder: &holding{nonce: "a", epoch: epoch, until: time.Now().Add(time.Hour)}, entries: []link.Entry{proclaim}},
				{vacant: true, entries: []link.Entry{resign}},
			}
			ch := make(chan LeaderInfo, 10)
			e := &Election{name: "e", opts: retry.Options{TTL: time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}}
			o := &observer{e: e, ch: ch, read: func(context.Context, string, int) *reading {
				r := readings[0]
				readings = readings[1:]
				r.answered, r.quorum = 5, 3
				if len(r.entries) > 0 {
					r.last = &r.entries[len(r.entries)-1]
				}
				return r
			}}
			for len(readings) > 0 {
				_, ok := o.step(t.Context())
				require.True(t, ok)
			}
			close(ch)
			var got []string
			for info := range ch {
				got = append(got, fmt.Sprintf("%v %d-%d %s", info.Vacant, info.Epoch, info.Seq, info.Value))
			}
			assert.Equal(t, []string{"true 0-0 ", "false 7-0 a", "false 7-1 a2", "true 7-0 "}, got)
		})
	}
}
