package hostmem

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSlice resolves DMA addresses at random among 32K mapped
// regions (16K QPs' send and receive rings), as a NIC serving them in
// turn does: the region search's cost once the table outgrows the
// CPU's cache.
func BenchmarkSlice(b *testing.B) {
	m := NewMemory()
	defer m.Close()
	const regions = 32768
	addrs := make([]uint64, 1<<16)
	bases := make([]uint64, regions)
	for i := range bases {
		bases[i] = m.Map(make([]byte, 256))
	}
	for i := range addrs {
		addrs[i] = bases[rand.IntN(regions)] + uint64(rand.IntN(4))*64
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := m.Slice(addrs[i%len(addrs)], 64); err != nil {
			b.Fatal(err)
		}
	}
}
