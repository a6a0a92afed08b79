package testserver

import "syscall"

// tie makes the process get SIGKILL when the process that started it dies,
// even by SIGKILL or a test binary's time-out, which run no cleanup.
func tie(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
