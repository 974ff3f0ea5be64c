package hostmem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Memory is host memory as the NIC's DMA engine sees it: regions of Go
// memory mapped at I/O virtual addresses (IOVAs). Context tables are
// allocated in it and registered buffers are mapped into it. Lookups are
// lock-free (a region table appended to in place, copied on Unmap); Map
// and Unmap serialize.
type Memory struct {
	mu   sync.Mutex // serializes Map and Unmap
	tab  atomic.Pointer[regionTable]
	next uint64 // next free IOVA
}

// regionTable is the mapped regions by IOVA, their bases apart: a DMA
// searches the bases, eight bytes a region (16K QPs' rings and more fit
// a few hundred KiB, most of it in the CPU's cache), and reads one region.
type regionTable struct {
	bases   []uint64 // regions[i]'s IOVA, ascending
	regions []region
}

type region struct {
	buf    []byte
	mapped bool // allocated with mmap, freed by Close
}

// ErrFault is returned for an access outside every mapped region.
var ErrFault = errors.New("host: DMA outside mapped memory")

// pageSize aligns IOVAs.
const pageSize = 4096

// NewMemory returns an empty address space. IOVAs start at a random page
// between the first and the 2^20th, so that address 0 is never valid and
// a region's address is not the same run after run (a peer must learn it,
// as it learns the key).
func NewMemory() *Memory {
	m := &Memory{next: pageSize * (1 + uint64(rand.IntN(1<<20)))}
	m.tab.Store(&regionTable{})
	return m
}

// hugePage is the size from which allocations ask for transparent huge
// pages: context tables are large and touched at random, and a TLB miss
// per lookup would swamp the cache being modelled.
const hugePage = 2 << 20

// Alloc allocates size zeroed bytes and maps them; it returns their IOVA.
// Allocations of 2 MiB and more come from mmap with huge pages advised, and
// are freed by Close.
func (m *Memory) Alloc(size int) uint64 {
	if size >= hugePage {
		n := (size + hugePage - 1) &^ (hugePage - 1)
		if buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err == nil {
			unix.Madvise(buf, unix.MADV_HUGEPAGE) // best effort
			return m.add(buf[:size], true)
		}
	}
	return m.Map(make([]byte, size))
}

// Close frees the memory Alloc took with mmap. No region may be used after.
func (m *Memory) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.tab.Load().regions
	m.tab.Store(&regionTable{})
	for _, r := range old {
		if r.mapped {
			unix.Munmap(r.buf[:cap(r.buf)])
		}
	}
}

// Map makes buf reachable by DMA at the returned IOVA (page aligned).
func (m *Memory) Map(buf []byte) uint64 { return m.add(buf, false) }

func (m *Memory) add(buf []byte, mapped bool) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	base := m.next
	m.next += (uint64(len(buf)) + 2*pageSize - 1) &^ (pageSize - 1) // and a guard page
	// IOVAs only grow, so the table stays sorted by appending; a reader
	// holds its own length of the array and never reads the slot written
	// here before the Store publishes it, so appending in place is safe
	// and 16K QPs' rings cost amortized O(1) each, not a copy apiece.
	t := m.tab.Load()
	m.tab.Store(&regionTable{bases: append(t.bases, base), regions: append(t.regions, region{buf: buf, mapped: mapped})})
	return base
}

// Unmap removes the region mapped at base.
func (m *Memory) Unmap(base uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.tab.Load()
	for i, b := range old.bases {
		if b == base {
			m.tab.Store(&regionTable{
				bases:   append(append(make([]uint64, 0, len(old.bases)-1), old.bases[:i]...), old.bases[i+1:]...),
				regions: append(append(make([]region, 0, len(old.regions)-1), old.regions[:i]...), old.regions[i+1:]...),
			})
			return nil
		}
	}
	return fmt.Errorf("%w: no region at %#x", ErrFault, base)
}

// Slice returns the n bytes at addr, which must lie in one region.
func (m *Memory) Slice(addr uint64, n int) ([]byte, error) {
	t := m.tab.Load()
	lo, hi := 0, len(t.bases) // the first base above addr
	for lo < hi {
		if mid := int(uint(lo+hi) >> 1); t.bases[mid] > addr {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == 0 {
		return nil, ErrFault
	}
	r, off := &t.regions[lo-1], addr-t.bases[lo-1]
	if off > uint64(len(r.buf)) || uint64(n) > uint64(len(r.buf))-off {
		return nil, ErrFault
	}
	return r.buf[off : off+uint64(n) : off+uint64(n)], nil
}
