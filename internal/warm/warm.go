// Package warm brings memory into the CPU's cache ahead of its use.
//
// With thousands of QPs a QP's state is cold when its turn comes: every
// cache line its packet touches is a miss, and taken one at a time, as
// the code reaches them, each miss waits a memory round trip. A stage
// that knows which QPs its batch will touch (the frames the port gave,
// the doorbells rung) reads one word of each of their lines first, in a
// loop of independent loads the CPU overlaps (Go has no prefetch
// instruction to offer), so that the batch's misses are paid together.
package warm

import "unsafe"

// Line is the cache line size this package assumes.
const Line = 64

// Lines reads one word of every cache line of the n bytes at p (n at
// least 8) and returns their sum, which the caller keeps (in a field of
// its own: the loads must not be dead code, and a variable shared by
// goroutines would be a race).
func Lines(p unsafe.Pointer, n uintptr) uintptr {
	var s uintptr
	for off := uintptr(0); off+8 <= n; off += Line {
		s += *(*uintptr)(unsafe.Add(p, off))
	}
	return s + *(*uintptr)(unsafe.Add(p, n-8))
}
