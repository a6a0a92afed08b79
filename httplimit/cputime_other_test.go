//go:build !unix

package httplimit_test

import "time"

var start = time.Now()

// cpuTime falls back to wall time where the platform has no getrusage.
func cpuTime() time.Duration { return time.Since(start) }
