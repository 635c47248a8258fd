package main

import (
	"os"
	"syscall"
)

// stopWithParent asks the kernel to send SIGTERM when the process that
// started this one dies (`make run` killed with kill -9), so that the stack
// shuts down and frees its port instead of living on as an orphan.
func stopWithParent() {
	ppid := os.Getppid()
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0)
	if errno == 0 && os.Getppid() != ppid {
		// The parent died before the request took effect.
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
