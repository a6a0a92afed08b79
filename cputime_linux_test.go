package ratelimit_test

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time the calling thread has used. A benchmark
// that locks its goroutine to its thread measures with it only the time it
// ran, not the time it waited for a CPU that other work held: the steadier
// measure on a shared machine.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
