//go:build !unix

package memory

import "time"

// CPUTime returns 0: this platform's process CPU time is not read here.
func CPUTime() time.Duration { return 0 }
