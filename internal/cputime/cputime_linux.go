package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread returns the CPU time the calling thread has used, to the
// nanosecond (CLOCK_THREAD_CPUTIME_ID). getrusage(RUSAGE_THREAD), which
// the standard library reaches, will not do: Linux brings its figure up to
// date only at scheduler ticks, too coarse for a batch of a few thousand
// calls (TestThreadResolution).
func Thread() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
