package httplimit

import (
	"testing"

	"github.com/dunglas/httpsfv"
)

// FuzzRateLimitItem holds the hand-appended RateLimit member to the
// library's serialisation of the same Item, for any name the library
// accepts and any remaining and reset.
func FuzzRateLimitItem(f *testing.F) {
	f.Add("api", 0, int64(0))
	f.Add(`quote " and \ backslash`, 41, int64(999999999999999))
	f.Add("", -3, int64(7))
	f.Fuzz(func(t *testing.T, name string, r int, reset int64) {
		quoted, err := policyItem(name, nil)
		if err != nil {
			t.Skip("not a structured field string")
		}
		if reset < 0 || reset > 999_999_999_999_999 || r > 999_999_999_999_999 {
			t.Skip("outside sf-integer")
		}
		got := rateLimitItem(quoted, r, reset)
		item := httpsfv.NewItem(name)
		item.Params.Add("r", int64(max(r, 0)))
		item.Params.Add("t", reset)
		want, err := httpsfv.Marshal(item)
		if err != nil {
			t.Fatalf("httpsfv cannot serialise r=%d: %v", max(r, 0), err)
		}
		if got != want {
			t.Fatalf("rateLimitItem(%q, %d, %d) = %q, httpsfv says %q", quoted, r, reset, got, want)
		}
	})
}
