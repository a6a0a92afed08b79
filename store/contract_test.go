package store_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit/store"
)

func TestParseKey(t *testing.T) {
	for _, k := range []store.Key{{Namespace: "api:gcra", ID: "u"}, {Namespace: "a.b-c_d:sliding_log", ID: "x:y:z"}, {Namespace: "a:b", ID: ":"}, {Namespace: "a:b", ID: "\x00{}"}} {
		if got, ok := store.ParseKey(k.String()); !ok || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", k.String(), got, ok, k)
		}
	}
	for _, s := range []string{"", "nocolon", "one:colon", "bad name:gcra:k", "a:{b}:k"} {
		if got, ok := store.ParseKey(s); ok {
			t.Errorf("ParseKey(%q) = %+v, want false", s, got)
		}
	}
}
