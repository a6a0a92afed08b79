// Package echo quotes user input for error messages, shortened: a message
// that repeated a whole oversized input (a 512 KB header, a query of
// 10,000 parameters) would carry it into every log line and answer that
// reports it.
package echo

import (
	"strconv"
	"unicode/utf8"
)

// Max is the most bytes of an input a message repeats.
const Max = 64

// Quote returns s quoted as %q quotes it when s is at most Max bytes. A
// longer s is cut to at most its first Max bytes (at a UTF-8 boundary when
// s is valid there), quoted, and followed by "…" and its length in bytes:
// "abc…"… (70000 bytes).
func Quote(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	cut := Max
	for cut > Max-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
