package hostmem

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of b the kernel has mapped (mincore).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestPin: Pin maps every page of a region a program never touched, as
// ibv_reg_mr's pinning does, whatever the region's alignment, and leaves
// its contents as they were; the pages around it are the caller's
// business (a region inside another mapping).
func TestPin(t *testing.T) {
	page := os.Getpagesize()
	const pages = 64
	for _, tc := range []struct {
		name       string
		off, n     int // the region within the mapping
		from, upto int // the pages it spans
	}{
		{"whole pages", 0, pages * page, 0, pages},
		{"unaligned", 100, 10*page + 7, 0, 11},
		{"inside one page", 5*page + 10, 20, 5, 6},
		{"the last pages", 60*page + 1, 4*page - 1, 60, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := unix.Mmap(-1, 0, pages*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(m)
			if n := resident(t, m); n != 0 {
				t.Fatalf("%d pages resident before any touch", n)
			}
			if !Pin(m[tc.off : tc.off+tc.n]) {
				t.Skip("the kernel has no MADV_POPULATE_WRITE")
			}
			if got, want := resident(t, m[tc.from*page:tc.upto*page]), tc.upto-tc.from; got != want {
				t.Errorf("%d of the region's %d pages resident", got, want)
			}
			for i, c := range m {
				if c != 0 {
					t.Fatalf("byte %d is %d after Pin", i, c)
				}
			}
		})
	}
	if !Pin(nil) {
		t.Error("an empty region: false")
	}
}
