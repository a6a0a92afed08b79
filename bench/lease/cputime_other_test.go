//go:build !unix

package lease_test

import "time"

// processCPU is not measured on this platform: the report's client CPU
// column then reads 0.
func processCPU() time.Duration { return 0 }
