package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
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

type nopHook struct{}

func (nopHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (nopHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (nopHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestHookless: this go-redis's hook state is found (so a plain client's
// calls are not detached), and a hook added later is seen at once.
func TestHookless(t *testing.T) {
	if !hookPath().ok {
		t.Fatal("go-redis keeps its hooks somewhere hookPath does not look: every call of a default client is detached again")
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if !hookless(c) {
		t.Error("hookless(a new client) = false, want true")
	}
	c.AddHook(nopHook{})
	if hookless(c) {
		t.Error("hookless(a client with a hook) = true, want false")
	}
}
