package nemesis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// CheckMulti finds two sections that shared a key while both were
// inside, of either kind, once per pair; it finds none where they shared
// no key, or did not overlap in time. Each case fails a checker that
// compares only the first key, only plain sections, or ignores time.
func TestCheckMulti(t *testing.T) {
	for _, c := range []struct {
		name      string
		history   []MultiSection
		overlaps  int
		withPlain int
	}{
		{"disjoint keys at once", []MultiSection{
			{Client: 0, Keys: []int{0, 1}, Enter: ms(0), Exit: ms(10)},
			{Client: 1, Keys: []int{2, 3}, Enter: ms(5), Exit: ms(15)},
		}, 0, 0},
		{"shared key one after the other", []MultiSection{
			{Client: 0, Keys: []int{0, 1}, Enter: ms(0), Exit: ms(10)},
			{Client: 1, Keys: []int{1, 2}, Enter: ms(11), Exit: ms(15)},
		}, 0, 0},
		{"shared last key at once", []MultiSection{
			{Client: 0, Keys: []int{0, 3}, Enter: ms(0), Exit: ms(10)},
			{Client: 1, Keys: []int{1, 2, 3}, Enter: ms(9), Exit: ms(15)},
		}, 1, 0},
		{"a plain holder inside a multi section", []MultiSection{
			{Client: 0, Keys: []int{0, 1, 2}, Enter: ms(0), Exit: ms(10)},
			{Client: 2, Keys: []int{2}, Plain: true, Enter: ms(3), Exit: ms(4)},
		}, 1, 1},
		{"recorded out of order", []MultiSection{
			{Client: 1, Keys: []int{1}, Plain: true, Enter: ms(5), Exit: ms(6)},
			{Client: 0, Keys: []int{0, 1}, Enter: ms(0), Exit: ms(20)},
			{Client: 3, Keys: []int{0}, Plain: true, Enter: ms(19), Exit: ms(25)},
		}, 2, 2},
		{"a long section overlaps a later one past a short one", []MultiSection{
			{Client: 0, Keys: []int{0, 1}, Enter: ms(0), Exit: ms(100)},
			{Client: 1, Keys: []int{2, 3}, Enter: ms(1), Exit: ms(2)},
			{Client: 2, Keys: []int{1, 3}, Enter: ms(50), Exit: ms(60)},
		}, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckMulti(c.history)
			assert.Len(t, r.Overlaps, c.overlaps, "%v", r)
			assert.Equal(t, c.withPlain, r.WithPlain)
			assert.Equal(t, c.overlaps, r.Violations())
			assert.Equal(t, len(c.history), r.Sections)
		})
	}
}

// sharedKey finds a key of two sorted sets, at either end.
func TestSharedKey(t *testing.T) {
	k, ok := sharedKey([]int{0, 4, 9}, []int{1, 9})
	assert.True(t, ok)
	assert.Equal(t, 9, k)
	_, ok = sharedKey([]int{0, 4}, []int{1, 5})
	assert.False(t, ok)
}
