//go:build !linux

package cputime

import "time"

var start = time.Now()

// Thread falls back to the wall time since the process started where the
// thread's CPU clock is not read.
func Thread() time.Duration { return time.Since(start) }
