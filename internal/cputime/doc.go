// Package cputime measures CPU time for the module's benchmarks. A
// benchmark that locks its goroutine to its thread (runtime.LockOSThread)
// and reads Thread before and after measures only the time it ran, not the
// time it waited for a CPU that other work held: the steadier measure on a
// shared machine. On Linux it is the thread's CPU time; elsewhere it is
// wall time.
package cputime
