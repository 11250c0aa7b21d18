package nemesis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/integration/nemesis"
)

// permit returns a permit of capacity and token on slot, called 1ms
// before it was held from enter to exit.
func permit(client, slot, capacity int, token uint64, enter, exit time.Duration) nemesis.Permit {
	return nemesis.Permit{
		Section:  nemesis.Section{Client: client, Key: slot, Enter: enter, Exit: exit, Committed: true},
		Capacity: capacity, Called: enter - ms, Token: token, Slot: slot,
	}
}

func TestCheckSemaphoreCleanHistory(t *testing.T) {
	// Three held at once, a fourth enters as the first leaves, a fifth
	// called while they were held waits its turn; tokens acquired at the
	// same time may be equal.
	h := []nemesis.Permit{
		permit(0, 0, 3, 5, 1*ms, 10*ms),
		permit(1, 1, 3, 5, 2*ms, 20*ms),
		permit(2, 2, 3, 6, 3*ms, 30*ms),
		permit(3, 0, 3, 7, 11*ms, 40*ms),
		permit(4, 1, 3, 8, 21*ms, 50*ms),
	}
	h[4].Called = 4 * ms // waited from before permits 1..3 were held
	r := nemesis.CheckSemaphore(h)
	assert.Zero(t, r.Violations(), "%v", r)
	assert.Equal(t, 5, r.Permits)
	assert.Equal(t, 3, r.MaxHeld)
	assert.Equal(t, []int{3}, r.Capacities)
}

// N+1 permits held at once is a crowd, even for an instant: the
// intervals are closed.
func TestCheckSemaphoreReportsCapacityPlusOne(t *testing.T) {
	h := []nemesis.Permit{
		permit(0, 0, 3, 1, 1*ms, 10*ms),
		permit(1, 1, 3, 2, 2*ms, 20*ms),
		permit(2, 2, 3, 3, 3*ms, 30*ms),
		permit(3, 0, 3, 4, 10*ms, 40*ms), // enters as client 0 leaves
	}
	r := nemesis.CheckSemaphore(h)
	require.Len(t, r.Crowds, 1, "%v", r)
	c := r.Crowds[0]
	assert.Equal(t, 10*ms, c.At)
	assert.Equal(t, 3, c.Capacity)
	require.Len(t, c.Held, 4)
	assert.Equal(t, 3, c.Held[3].Client)
	assert.Equal(t, 4, r.MaxHeld)
	assert.Equal(t, 1, r.Violations())
	assert.Contains(t, r.String(), "crowd at 10ms: 4 held given capacity 3 or less")

	h[3].Enter, h[3].Called = 11*ms, 10*ms // just after: no crowd
	assert.Zero(t, nemesis.CheckSemaphore(h).Violations())
}

// With mixed capacities, for every c the permits given capacity c or
// less number at most c: each holds its own slot below its capacity. Two
// permits of capacity 1 held at once are a crowd, even beside a permit
// of capacity 3 that keeps the total within 3.
func TestCheckSemaphoreMixedCapacities(t *testing.T) {
	h := []nemesis.Permit{
		permit(0, 2, 3, 1, 1*ms, 10*ms),
		permit(1, 0, 1, 2, 2*ms, 20*ms),
		permit(2, 0, 1, 3, 3*ms, 30*ms),
	}
	r := nemesis.CheckSemaphore(h)
	require.Len(t, r.Crowds, 1, "%v", r)
	assert.Equal(t, 3*ms, r.Crowds[0].At, "as the second permit of capacity 1 entered")
	assert.Equal(t, 1, r.Crowds[0].Capacity)
	require.Len(t, r.Crowds[0].Held, 2, "only the permits of capacity 1")
	assert.Equal(t, []int{1, 2}, []int{r.Crowds[0].Held[0].Client, r.Crowds[0].Held[1].Client})
	assert.Equal(t, 3, r.MaxHeld)
	assert.Equal(t, []int{1, 3}, r.Capacities)
	assert.Contains(t, r.String(), "crowd at 3ms: 2 held given capacity 1 or less")

	// Three of capacity 2 under one of capacity 3 are four: a crowd of
	// the largest capacity; three of capacity 2 alone are one too.
	h = []nemesis.Permit{
		permit(0, 2, 3, 1, 1*ms, 30*ms),
		permit(1, 0, 2, 2, 2*ms, 20*ms),
		permit(2, 1, 2, 3, 3*ms, 20*ms),
		permit(3, 1, 2, 4, 4*ms, 40*ms),
	}
	r = nemesis.CheckSemaphore(h)
	require.Len(t, r.Crowds, 1, "%v", r)
	assert.Equal(t, 4*ms, r.Crowds[0].At)
	assert.Equal(t, 2, r.Crowds[0].Capacity, "the smallest capacity exceeded")
	assert.Len(t, r.Crowds[0].Held, 3)

	// Three held under capacities 3, 2, 2, or 3, 1, 2: within each.
	for _, second := range []int{2, 1} {
		h = []nemesis.Permit{
			permit(0, 2, 3, 1, 1*ms, 30*ms),
			permit(1, 0, second, 2, 2*ms, 20*ms),
			permit(2, 1, 2, 3, 3*ms, 10*ms),
		}
		assert.Zero(t, nemesis.CheckSemaphore(h).Violations(), "capacities 3, %d, 2", second)
	}
}

// A permit whose Acquire was called after another's returned must have
// a larger token; an equal one is an inversion too.
func TestCheckSemaphoreReportsNonIncreasingToken(t *testing.T) {
	for _, token := range []uint64{4, 5} {
		h := []nemesis.Permit{
			permit(0, 0, 3, 5, 1*ms, 10*ms),
			permit(1, 1, 3, token, 12*ms, 20*ms), // called at 11ms
		}
		r := nemesis.CheckSemaphore(h)
		require.Len(t, r.Inversions, 1, "token %d: %v", token, r)
		assert.Equal(t, 0, r.Inversions[0].Earlier.Client)
		assert.Equal(t, 1, r.Inversions[0].Later.Client)
		assert.Contains(t, r.String(), "inversion: client 0 token 5")
	}
	// Called before the other returned: no order between them.
	h := []nemesis.Permit{
		permit(0, 0, 3, 5, 1*ms, 10*ms),
		permit(1, 1, 3, 4, 2*ms, 20*ms),
	}
	h[1].Called = ms / 2
	assert.Zero(t, nemesis.CheckSemaphore(h).Violations())
	// Without tokens (fencing off) nothing is compared.
	h[0].Token, h[1].Token, h[1].Called = 0, 0, 11*ms
	assert.Zero(t, nemesis.CheckSemaphore(h).Violations())
}
