package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestHeaderCRC checks the slicing-by-8 header CRC against hash/crc32 at
// every length a masked header can have and beyond.
func TestHeaderCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		seed := r.Uint32()
		if got, want := updateHeaderCRC(seed, p), crc32.Update(seed, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d: %#x, want %#x", n, got, want)
		}
	}
}
