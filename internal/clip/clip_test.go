package clip

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestQuote(t *testing.T) {
	assert.Equal(t, `"k"`, Quote("k"))
	assert.Equal(t, Max+2, len(Quote(strings.Repeat("a", Max))), "whole at Max bytes")
	long := strings.Repeat("a", 1<<20)
	assert.Equal(t, `"`+strings.Repeat("a", Max)+`"…(1048576 bytes)`, Quote(long))
	// A character that straddles the cut is left out whole.
	s := strings.Repeat("a", Max-1) + "é" + "tail"
	assert.Equal(t, `"`+strings.Repeat("a", Max-1)+`"…(`+"69 bytes)", Quote(s))
}
