package datapath

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations on a word private to the process.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexSleep sleeps while *addr holds val, until futexWake or for ts at
// most. raw makes it a raw system call: the runtime keeps the caller's P.
func futexSleep(addr *uint32, val uint32, ts *unix.Timespec, raw bool) {
	a, t := uintptr(unsafe.Pointer(addr)), uintptr(unsafe.Pointer(ts))
	if raw {
		unix.RawSyscall6(unix.SYS_FUTEX, a, futexWaitPrivate, uintptr(val), t, 0, 0)
		return
	}
	unix.Syscall6(unix.SYS_FUTEX, a, futexWaitPrivate, uintptr(val), t, 0, 0)
}

// futexWake wakes a thread sleeping on addr (futexSleep).
func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, 1, 0, 0, 0)
}
