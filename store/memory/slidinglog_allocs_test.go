//go:build !race

package memory_test

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TestSlidingLogInPlace checks that the store decides a sliding log where
// it is stored: admitting into a full log of 1,000 entries, a log of a few
// entries and an expired log allocates nothing per call on average (a full
// log moves to a buffer twice its size once per about 1,000 admissions, so
// the average rounds to 0), and neither does a denial. (The race detector
// allocates, so this file is built without it.)
func TestSlidingLogInPlace(t *testing.T) {
	for _, c := range []struct {
		name        string
		alg         algorithms.Algorithm
		step        int64 // µs the clock advances per call
		wantAllowed bool
	}{
		{"full log of 1000, admitting", algorithms.SlidingLog(1000, time.Millisecond), 1, true},
		{"full log of 1000, denying", algorithms.SlidingLog(1000, time.Hour), 1, false},
		{"log of 3, admitting", algorithms.SlidingLog(1000, 3*time.Microsecond), 1, true},
		{"expired log", algorithms.SlidingLog(1000, time.Microsecond), 5, true},
	} {
		decide := logDecider(t, c.alg, c.step)
		if d := decide(); d.Allowed != c.wantAllowed {
			t.Fatalf("%s: decision %+v, want allowed %v", c.name, d, c.wantAllowed)
		}
		if n := testing.AllocsPerRun(5000, func() { decide() }); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", c.name, n)
		}
	}
}
