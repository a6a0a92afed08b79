package echo

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"a\x00b", `"a\x00b"`},
		{strings.Repeat("k", Max), `"` + strings.Repeat("k", Max) + `"`},
		{strings.Repeat("k", 512<<10), `"` + strings.Repeat("k", Max) + `"… (524288 bytes)`},
		// A rune across the cut is left out whole.
		{strings.Repeat("k", Max-1) + "é" + "xyz", `"` + strings.Repeat("k", Max-1) + `"… (68 bytes)`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%d bytes) = %s, want %s", len(c.in), got, c.want)
		}
	}
}
