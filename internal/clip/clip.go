// Package clip quotes the keys and values that error messages name,
// cut short: a 1 MiB key must not make every error 1 MiB.
package clip

import (
	"strconv"
	"unicode/utf8"
)

// Max is how many bytes of a string Quote keeps.
const Max = 64

// Quote quotes s as strconv.Quote does: whole if it has at most Max
// bytes, else its first Max bytes, cut at a character's start, and its
// length.
func Quote(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	n := Max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
