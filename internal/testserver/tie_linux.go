package testserver

import "syscall"

// tie makes the process get SIGKILL when the process that started it dies,
// even by SIGKILL or a test binary's time-out, which run no cleanup. The
// kernel ties it to the thread that forked; Go ends a thread only when a
// goroutine locked to it (runtime.LockOSThread) returns, which no test
// that starts a server does.
func tie(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
