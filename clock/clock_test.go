package clock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimitkit/ratelimit/clock"
)

func TestFake(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
	ch := c.After(time.Second)
	if c.Waiters() != 1 {
		t.Fatalf("Waiters() = %d after one After, want 1", c.Waiters())
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("After(1s) fired after 999ms")
	default:
	}
	c.Advance(time.Millisecond)
	select {
	case got := <-ch:
		if want := start.Add(time.Second); !got.Equal(want) {
			t.Errorf("After(1s) delivered %v, want %v", got, want)
		}
	default:
		t.Fatal("After(1s) did not fire after 1s")
	}
	if c.Waiters() != 0 {
		t.Errorf("Waiters() = %d after firing, want 0", c.Waiters())
	}
	c.Set(start.Add(-time.Hour))
	if got := c.Now(); !got.Equal(start.Add(-time.Hour)) {
		t.Errorf("Now() after Set = %v", got)
	}
}

func TestSystem(t *testing.T) {
	before := time.Now()
	if now := clock.System.Now(); now.Before(before) {
		t.Errorf("System.Now() = %v, before %v", now, before)
	}
	select {
	case <-clock.System.After(time.Millisecond):
	case <-time.After(5 * time.Second):
		t.Fatal("System.After(1ms) did not fire")
	}
}

// TestUnixMicroFollowsTimeNow checks that UnixMicro reads the system clock:
// each reading lies between two time.Now readings taken around it, give or
// take the microsecond that rounding allows (time.Now reads the wall and the
// monotonic clock some nanoseconds apart, so the offset between them that
// UnixMicro keeps is exact only to within those nanoseconds).
func TestUnixMicroFollowsTimeNow(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond) // several resyncs
	for n := 0; time.Now().Before(deadline) || n < 1000; n++ {
		before := time.Now().UnixMicro()
		got := clock.UnixMicro()
		after := time.Now().UnixMicro()
		if got < before-1 || got > after+1 {
			t.Fatalf("UnixMicro() = %d, want between time.Now readings %d and %d", got, before, after)
		}
	}
}

// TestUnixMicroInSynctestBubble checks that UnixMicro follows a
// testing/synctest bubble's fake clock, as time.Now does there (to within
// the microsecond of TestUnixMicroFollowsTimeNow).
func TestUnixMicroInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 3 {
			if got, want := clock.UnixMicro(), time.Now().UnixMicro(); got < want-1 || got > want+1 {
				t.Fatalf("UnixMicro() = %d in a bubble, want time.Now's %d ± 1", got, want)
			}
			time.Sleep(time.Hour)
		}
	})
}
