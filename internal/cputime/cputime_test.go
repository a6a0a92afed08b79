package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/cputime"
)

// TestThreadGrowsWithWork: a thread that spins for 20ms of wall time has
// used CPU time, at least a quarter of it (the machine is shared) and no
// more than the wall time.
func TestThreadGrowsWithWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, wall := cputime.Thread(), time.Now()
	for time.Since(wall) < 20*time.Millisecond {
	}
	used, elapsed := cputime.Thread()-start, time.Since(wall)
	if used < elapsed/4 || used > elapsed+time.Millisecond {
		t.Fatalf("Thread grew by %v over %v of wall time", used, elapsed)
	}
}

// TestThreadResolution: a 100µs spin shows as CPU time, not as 0; a
// figure that moved only at scheduler ticks would read 0 on most tries.
func TestThreadResolution(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	zero := 0
	for range 20 {
		start, wall := cputime.Thread(), time.Now()
		for time.Since(wall) < 100*time.Microsecond {
		}
		if cputime.Thread() == start {
			zero++
		}
	}
	if zero > 5 {
		t.Fatalf("%d of 20 spins of 100µs read no CPU time", zero)
	}
}
