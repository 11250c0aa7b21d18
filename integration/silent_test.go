package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/integration"
)

// TestSilentMasterIsNotWaitedFor: one of five masters stops answering
// (paused, or killed). Every attempt is a split vote: masters 1 and 2 are
// free, 3 and 4 held by another owner. Such a round is decided only by
// master 0's answer, or its failure: its deadline, or its client's read
// timeout (200ms here) or refused dial. After three such attempts the
// master is silent. Rounds then decide without it, and its error is
// ErrMasterSilent. It never counts as agreeing: every attempt fails. A
// release still goes to it: paused, it runs the release once resumed.
// Once master 0 answers again, the rounds hear it: a canary acquire, or
// the release's answer, brings it back.
//
// The only timing bound: a round that does not wait for master 0 takes
// less than half the one-second MasterTimeout. Four local masters answer
// in about a millisecond; the margin covers a loaded machine.
func TestSilentMasterIsNotWaitedFor(t *testing.T) {
	for _, fault := range []string{"paused", "killed"} {
		t.Run(fault, func(t *testing.T) {
			const masterTimeout = time.Second
			cl := integration.NewCluster(t, 5)
			ctx := context.Background()
			holder := newClient(t, cl, &redlock.Options{MasterTimeout: slack})
			_, err := holder.Acquire(ctx, "job", cleanupTTL)
			require.NoError(t, err)
			for _, i := range []int{1, 2} { // free there: two agree
				require.NoError(t, cl.Admin(i).Del(ctx, "{job}").Err())
			}
			opts := &redlock.Options{MasterTimeout: masterTimeout}
			var c *redlock.Client
			var rel *redlock.Lock // paused only: released once master 0 is silent
			m0 := cl.Masters[0]
			if fault == "paused" {
				c = newClient(t, cl, opts)
				// A lock on every master. Not when killed: c would know
				// the server, and quarantine its restarted successor.
				rel, err = c.Acquire(ctx, "rel", cleanupTTL)
				require.NoError(t, err)
				require.NoError(t, m0.Pause(ctx))
				t.Cleanup(func() { _ = m0.Resume(context.Background()) })
			} else {
				require.NoError(t, m0.Kill(ctx))
				c = newClient(t, cl, opts)
			}

			waited, silent := 0, 0
			for attempt := 0; silent < 10; attempt++ {
				require.Less(t, attempt, 20, "master 0 never counted as silent")
				_, err := c.Acquire(ctx, "job", cleanupTTL)
				require.ErrorIs(t, err, redlock.ErrNotObtained, "a split vote; master 0 must not count")
				var qe *redlock.QuorumError
				require.ErrorAs(t, err, &qe)
				r0 := qe.Masters[0]
				assert.False(t, r0.Agreed)
				if !errors.Is(r0.Err, redlock.ErrMasterSilent) {
					t.Logf("attempt %d: master 0: %v after %v", attempt, r0.Err, qe.Elapsed)
					require.Zero(t, silent, "silent, then waited for again: %v", r0.Err)
					waited++
					continue
				}
				silent++
				assert.ErrorIs(t, r0.Err, redlock.ErrNoReply, "a silent master gave no reply")
				assert.Less(t, qe.Elapsed, masterTimeout/2, "the round waited for the silent master")
			}
			t.Logf("%d attempts before master 0 was silent", waited)
			assert.LessOrEqual(t, waited, 3, "rounds waited for master 0 after it was silent")

			if fault == "paused" {
				// The release does not wait for silent master 0, but is
				// sent to it: a lock must be released wherever it may be
				// held. Master 1 shows what a release leaves (the key
				// may stay, as a fencing counter).
				require.NoError(t, rel.Release(ctx))
				released, err := cl.Admin(1).Get(ctx, "{rel}").Result()
				require.NoError(t, err)
				require.NoError(t, m0.Resume(ctx))
				// Had nothing released it, master 0 would hold it 30s.
				// 10s bounds a broken test; the release runs at once.
				require.Eventually(t, func() bool {
					v, err := cl.Admin(0).Get(ctx, "{rel}").Result()
					return err == nil && v == released
				}, 10*time.Second, 10*time.Millisecond, "the release never reached master 0")
			} else {
				require.NoError(t, m0.Restart(ctx))
			}
			// Paused, master 0 still holds the other owner's lock: it
			// refuses. Restarted, it is empty: it agrees. A canary (one
			// per MasterTimeout) or a release's answer brings it back
			// within a few MasterTimeouts; 10s bounds a broken test.
			for begin := time.Now(); ; {
				require.Less(t, time.Since(begin), 10*time.Second, "master 0 was never heard again")
				l, err := c.Acquire(ctx, "job", cleanupTTL)
				if fault == "killed" && err == nil {
					require.NoError(t, l.Release(ctx))
					break
				}
				var qe *redlock.QuorumError
				require.ErrorAs(t, err, &qe)
				if fault == "paused" && errors.Is(qe.Masters[0].Err, redlock.ErrHeldElsewhere) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
