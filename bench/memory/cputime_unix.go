//go:build unix

package memory

import (
	"syscall"
	"time"
)

// CPUTime returns the CPU time, user and system, that the process has used
// so far across all its threads. Unlike wall time, it does not grow while
// the process waits for a CPU that other work holds, which makes it the
// steadier measure on a shared machine. It returns 0 when the platform
// cannot tell.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
