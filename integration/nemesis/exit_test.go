package nemesis

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An aborted section ends, for the checker, when its lock's validity ended
// if its holder noticed later (woken late); any other section when it
// ended.
func TestAbortedSectionEndsAtItsValidity(t *testing.T) {
	const ms = 1_000_000
	aborted := Section{Enter: 10 * ms, Aborted: true}
	assert.EqualValues(t, 190*ms, exitAt(aborted, 215*ms, 190*ms), "woken 25ms after its validity")
	assert.EqualValues(t, 150*ms, exitAt(aborted, 150*ms, 190*ms), "lost before its validity ended")
	assert.EqualValues(t, 10*ms, exitAt(aborted, 215*ms, 5*ms), "never before it entered")
	committed := Section{Enter: 10 * ms, Committed: true}
	assert.EqualValues(t, 215*ms, exitAt(committed, 215*ms, 190*ms), "a write past the validity is the holder's overrun")
}
