package ratelimit_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

func TestParseKey(t *testing.T) {
	for _, k := range []ratelimit.Key{{"api:gcra", "u"}, {"a.b-c_d:sliding_log", "x:y:z"}, {"a:b", ":"}, {"a:b", "\x00{}"}} {
		if got, ok := ratelimit.ParseKey(k.String()); !ok || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", k.String(), got, ok, k)
		}
	}
	for _, s := range []string{"", "nocolon", "one:colon", "bad name:gcra:k", "a:{b}:k"} {
		if got, ok := ratelimit.ParseKey(s); ok {
			t.Errorf("ParseKey(%q) = %+v, want false", s, got)
		}
	}
}
