//go:build !linux

package testserver

import "syscall"

// tie does nothing where the kernel has no parent-death signal: a test
// binary killed before its cleanups leaves its private servers running.
func tie(*syscall.SysProcAttr) {}
