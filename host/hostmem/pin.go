package hostmem

import (
	"os"
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
	p := unsafe.Pointer(unsafe.SliceData(buf))
	head := uintptr(p) & (page - 1) // bytes of the first page before buf
	n := (head + uintptr(len(buf)) + page - 1) &^ (page - 1)
	// The range may begin and end in memory beside buf: populating a page
	// maps it, whatever it holds, and changes no byte of it.
	r := unsafe.Slice((*byte)(unsafe.Add(p, -int(head))), n)
	return unix.Madvise(r, unix.MADV_POPULATE_WRITE) == nil
}
