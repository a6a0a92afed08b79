//go:build unix

package httplimit_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, the process has used so far.
// Unlike wall time it does not grow while the process waits for a CPU that
// other work holds, which makes it the steadier measure on a shared
// machine; it includes the garbage collector's work.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
