package hostmem

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pin faults in every page of buf, as ibv_reg_mr's pinning does (the
// kernel's get_user_pages): a region's first DMA into a page it never
// wrote would else pay the page fault on the NIC's packet path. On the
// hypervisor these hosts run on a first touch costs 10-20 us; an incast
// whose first WRITEs land in a fresh 16 MiB region had its engines' turns
// last milliseconds, and its QPs' first round trips read 4-17 ms on a
// 100 us path. The pages are populated for writing, their contents
// untouched (MADV_POPULATE_WRITE, Linux 5.14); where the kernel has no
// such advice, Pin does nothing and reports false.
func Pin(buf []byte) bool {
	if len(buf) == 0 {
		return true
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	end := (start + uintptr(len(buf)) + page - 1) &^ (page - 1)
	start &^= page - 1
	// The range may begin and end in memory beside buf: populating a page
	// maps it, whatever it holds, and changes no byte of it. The address
	// stays a number (a pointer outside buf's allocation is not Go's).
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_POPULATE_WRITE)
	runtime.KeepAlive(buf)
	return errno == 0
}
