package host

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Memory is host memory as the NIC's DMA engine sees it: regions of Go
// memory mapped at I/O virtual addresses (IOVAs). Context tables are
// allocated in it and registered buffers are mapped into it. Lookups are
// lock-free (a copy-on-write region table); Map and Unmap serialize.
type Memory struct {
	mu      sync.Mutex // serializes Map and Unmap
	regions atomic.Pointer[[]region]
	next    uint64 // next free IOVA
}

type region struct {
	base uint64
	buf  []byte
}

// ErrFault is returned for an access outside every mapped region.
var ErrFault = errors.New("host: DMA outside mapped memory")

// pageSize aligns IOVAs.
const pageSize = 4096

// NewMemory returns an empty address space. IOVAs start at one page, so that
// address 0 is never valid.
func NewMemory() *Memory {
	m := &Memory{next: pageSize}
	m.regions.Store(&[]region{})
	return m
}

// Alloc allocates size zeroed bytes and maps them; it returns their IOVA.
func (m *Memory) Alloc(size int) uint64 { return m.Map(make([]byte, size)) }

// Map makes buf reachable by DMA at the returned IOVA (page aligned).
func (m *Memory) Map(buf []byte) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	base := m.next
	m.next += (uint64(len(buf)) + 2*pageSize - 1) &^ (pageSize - 1) // and a guard page
	old := *m.regions.Load()
	regions := append(append(make([]region, 0, len(old)+1), old...), region{base: base, buf: buf})
	m.regions.Store(&regions)
	return base
}

// Unmap removes the region mapped at base.
func (m *Memory) Unmap(base uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.regions.Load()
	for i, r := range old {
		if r.base == base {
			regions := append(append(make([]region, 0, len(old)-1), old[:i]...), old[i+1:]...)
			m.regions.Store(&regions)
			return nil
		}
	}
	return fmt.Errorf("%w: no region at %#x", ErrFault, base)
}

// Slice returns the n bytes at addr, which must lie in one region.
func (m *Memory) Slice(addr uint64, n int) ([]byte, error) {
	regions := *m.regions.Load()
	i := sort.Search(len(regions), func(i int) bool { return regions[i].base > addr }) - 1
	if i < 0 {
		return nil, ErrFault
	}
	r := regions[i]
	off := addr - r.base
	if off > uint64(len(r.buf)) || uint64(n) > uint64(len(r.buf))-off {
		return nil, ErrFault
	}
	return r.buf[off : off+uint64(n) : off+uint64(n)], nil
}
