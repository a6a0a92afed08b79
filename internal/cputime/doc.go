// Package cputime measures CPU time for the module's benchmarks. Unlike
// wall time, the process's CPU time does not grow while it waits for a CPU
// that other work holds, which makes it the steadier measure on a shared
// machine; it includes the garbage collector's work. Where the platform
// has no getrusage it is wall time.
package cputime
