package hpu

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"unsafe"
)

// Memory is handler memory: a fixed number of bytes, set at install,
// shared by every handler of a context (sPIN's L2 handler memory) or of a
// cluster (the scratchpad). Handlers on several HPUs touch it at once, so
// it offers atomic 32- and 64-bit operations at aligned offsets beside
// plain byte access. Every access is bounds-checked: one outside the
// memory stops the handler with ErrMemoryOverrun, and its message
// completes in error.
type Memory struct {
	words []uint64 // 8-byte aligned backing
	b     []byte   // the same bytes
}

// NewMemory returns n bytes of zeroed handler memory.
func NewMemory(n int) Memory {
	w := make([]uint64, (n+7)/8)
	var b []byte
	if len(w) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:n]
	}
	return Memory{words: w, b: b}
}

// Len is the memory's size in bytes.
func (m Memory) Len() int { return len(m.b) }

// Bytes returns the n bytes at off, for plain (non-atomic) access.
func (m Memory) Bytes(off, n int) []byte {
	if off < 0 || n < 0 || off > len(m.b)-n {
		panic(overrun{off, n, len(m.b)})
	}
	return m.b[off : off+n : off+n]
}

func (m Memory) u32(off int) *uint32 {
	if off < 0 || off%4 != 0 || off > len(m.b)-4 {
		panic(overrun{off, 4, len(m.b)})
	}
	return (*uint32)(unsafe.Pointer(&m.b[off]))
}

func (m Memory) u64(off int) *uint64 {
	if off < 0 || off%8 != 0 || off > len(m.b)-8 {
		panic(overrun{off, 8, len(m.b)})
	}
	return &m.words[off/8]
}

// Load32 reads the 32-bit word at off (4-aligned).
func (m Memory) Load32(off int) uint32 { return atomic.LoadUint32(m.u32(off)) }

// Store32 writes the 32-bit word at off.
func (m Memory) Store32(off int, v uint32) { atomic.StoreUint32(m.u32(off), v) }

// AddInt32 adds v to the int32 at off and returns the new value.
func (m Memory) AddInt32(off int, v int32) int32 {
	return int32(atomic.AddUint32(m.u32(off), uint32(v)))
}

// CAS32 swaps the word at off from old to new if it holds old.
func (m Memory) CAS32(off int, old, new uint32) bool {
	return atomic.CompareAndSwapUint32(m.u32(off), old, new)
}

// CAS64 swaps the 64-bit word at off from old to new if it holds old.
func (m Memory) CAS64(off int, old, new uint64) bool {
	return atomic.CompareAndSwapUint64(m.u64(off), old, new)
}

// AddFloat32 adds v to the float32 at off.
func (m Memory) AddFloat32(off int, v float32) {
	p := m.u32(off)
	for {
		o := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, o, math.Float32bits(math.Float32frombits(o)+v)) {
			return
		}
	}
}

// MinInt32 and MaxInt32 lower or raise the int32 at off to v.
func (m Memory) MinInt32(off int, v int32) { m.extreme(off, v, func(a, b int32) bool { return a < b }) }
func (m Memory) MaxInt32(off int, v int32) { m.extreme(off, v, func(a, b int32) bool { return a > b }) }

func (m Memory) extreme(off int, v int32, better func(a, b int32) bool) {
	p := m.u32(off)
	for {
		o := atomic.LoadUint32(p)
		if !better(v, int32(o)) || atomic.CompareAndSwapUint32(p, o, uint32(v)) {
			return
		}
	}
}

// Load64 reads the 64-bit word at off (8-aligned).
func (m Memory) Load64(off int) uint64 { return atomic.LoadUint64(m.u64(off)) }

// Store64 writes the 64-bit word at off.
func (m Memory) Store64(off int, v uint64) { atomic.StoreUint64(m.u64(off), v) }

// AddInt64 adds v to the int64 at off and returns the new value.
func (m Memory) AddInt64(off int, v int64) int64 {
	return int64(atomic.AddUint64(m.u64(off), uint64(v)))
}

// Little-endian reads of a packet's payload, for handlers.
var le = binary.LittleEndian

// overrun is the panic value of an access outside handler memory.
type overrun struct{ off, n, size int }
