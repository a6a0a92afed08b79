package redis

import (
	"testing"
	"time"
)

// TestStepUp: the time left is rounded up, never down, and by less than
// 1/256 of it, so a clone's timeouts end a call by its deadline and at most
// 0.4% after it.
func TestStepUp(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 1, 255, 256, 257, 999_999, time.Second - time.Millisecond, time.Second, time.Second + 1, 30 * time.Second, time.Hour} {
		got := stepUp(d)
		if d <= 0 {
			if got != 0 {
				t.Errorf("stepUp(%v) = %v, want 0", d, got)
			}
			continue
		}
		if got < d || float64(got-d) > float64(d)/256 {
			t.Errorf("stepUp(%v) = %v, want in [d, d + d/256]", d, got)
		}
	}
	// Deadlines a millisecond apart near one second share a step or two.
	steps := map[time.Duration]bool{}
	for d := time.Second - 5*time.Millisecond; d <= time.Second; d += time.Millisecond {
		steps[stepUp(d)] = true
	}
	if len(steps) > 3 {
		t.Errorf("remaining times from 995ms to 1s fall in %d steps, want at most 3", len(steps))
	}
}
