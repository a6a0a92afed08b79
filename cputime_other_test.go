//go:build !linux

package ratelimit_test

import "time"

// threadCPU is not measured on this platform: BenchmarkOutageRatio then
// reports wall time only.
func threadCPU() time.Duration { return 0 }
