package cputime_test

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/cputime"
)

// TestProcessGrowsWithWork: spinning for 20ms of wall time uses CPU time,
// at least a quarter of it (the machine is shared) and at most what the
// process's threads could have used on every CPU.
func TestProcessGrowsWithWork(t *testing.T) {
	start, wall := cputime.Process(), time.Now()
	for time.Since(wall) < 20*time.Millisecond {
	}
	used, elapsed := cputime.Process()-start, time.Since(wall)
	if used < elapsed/4 || used > 64*elapsed {
		t.Fatalf("Process grew by %v over %v of wall time", used, elapsed)
	}
}

// TestProcessResolution: a 100µs spin shows as CPU time, not as 0; a
// figure that moved only at scheduler ticks would read 0 on most tries.
func TestProcessResolution(t *testing.T) {
	zero := 0
	for range 20 {
		start, wall := cputime.Process(), time.Now()
		for time.Since(wall) < 100*time.Microsecond {
		}
		if cputime.Process() == start {
			zero++
		}
	}
	if zero > 5 {
		t.Fatalf("%d of 20 spins of 100µs read no CPU time", zero)
	}
}
