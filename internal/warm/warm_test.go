package warm

import (
	"testing"
	"unsafe"
)

// TestLines: Lines reads the first word of every line of the range and
// its last word, and nothing outside it.
func TestLines(t *testing.T) {
	buf := make([]uintptr, 64) // 512 bytes, 8 lines
	for i := range buf {
		buf[i] = uintptr(1) << (i % 8 * 4) // word i of a line: 16^i
	}
	base := unsafe.Pointer(&buf[0])
	for _, tc := range []struct {
		name string
		n    uintptr
		want uintptr
	}{
		{"one word", 8, 1 + 1},                  // word 0, twice (first and last)
		{"one line", 64, 1 + 1<<28},             // word 0 and word 7
		{"a line and a word", 72, 2*1 + 1},      // lines 0 and 1, last word 8 (line 1's word 0)
		{"three lines", 192, 3*1 + 1<<28},       // lines 0-2, last word 23
		{"eight lines", 512, 8*1 + 1<<28},       // every line, last word 63
		{"half a line", 40, 1 + 1<<16},          // word 0, last word 4
		{"two and a half", 160, 3*1 + 1<<(3*4)}, // lines 0-2 (line 2's word 0 is at 128), last word 19
	} {
		if got := Lines(base, tc.n); got != tc.want {
			t.Errorf("%s (%d bytes): %#x, want %#x", tc.name, tc.n, got, tc.want)
		}
	}
}
