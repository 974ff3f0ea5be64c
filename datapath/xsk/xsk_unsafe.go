package xsk

// Every unsafe use and raw syscall of the package lives in this file: the
// socket options that take structs, and the rings and UMEM shared with the
// kernel through mmap.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

func getsockopt(fd, name int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func setsockopt(fd, name int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

// registerUMEM registers mem as the socket's UMEM.
func registerUMEM(fd int, mem []byte, chunkSize, headroom uint32) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&mem[0]))),
		Len:      uint64(len(mem)),
		Size:     chunkSize,
		Headroom: headroom,
	}
	return setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func statistics(fd int) (unix.XDPStatistics, error) {
	var s unix.XDPStatistics
	err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&s), unsafe.Sizeof(s))
	return s, err
}

// kick asks the kernel to process the TX ring (copy mode transmits in this
// call) and to refill from the fill ring when it needs a wakeup.
//
// It is a raw system call, which the Go runtime does not see: it never
// blocks, and the threads that make it spin without being rescheduled.
// The runtime's monitor takes the P of a goroutine that has run 10 ms
// and is in a system call it sees; it then polls every 20 us for
// milliseconds after, each poll a thread woken on a machine whose cores
// spinning threads hold: bursts of fifty iterations over 15 us in a
// latency test, a few a second.
func kick(fd int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN:
		return nil // the kernel will take the rest later
	}
	return e
}

// ring is the shared part of a single-producer single-consumer ring: the
// indices live in kernel-shared memory; the cached copies are ours and the
// shared ones are touched once per batch.
type ring struct {
	producer   *uint32
	consumer   *uint32
	flags      *uint32
	mask       uint32
	size       uint32
	cachedProd uint32
	cachedCons uint32
	mem        []byte
}

// mapRing maps one ring; entries are entrySize bytes.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32, entrySize uintptr) (ring, unsafe.Pointer, error) {
	length := int(off.Desc) + int(size)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, fmt.Errorf("mmap ring: %w", err)
	}
	r := ring{
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		mask:     size - 1,
		size:     size,
		mem:      mem,
	}
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r, unsafe.Pointer(&mem[off.Desc]), nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// Producer side (fill and TX rings).

// free returns how many entries can be produced, reading the consumer
// index only when the cached view is short of want.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n < want {
		r.cachedCons = atomic.LoadUint32(r.consumer)
		n = r.size - (r.cachedProd - r.cachedCons)
	}
	return n
}

// submit publishes n produced entries.
func (r *ring) submit(n uint32) {
	r.cachedProd += n
	atomic.StoreUint32(r.producer, r.cachedProd)
}

// Consumer side (RX and completion rings).

// avail returns how many entries can be consumed, reading the producer
// index only when the cached view is short of want.
func (r *ring) avail(want uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n < want {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	return n
}

// release gives n consumed entries back.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons)
}

// pending returns how many entries the producer has published that the
// consumer has not released, reading both shared indices.
func (r *ring) pending() uint32 { return atomic.LoadUint32(r.producer) - atomic.LoadUint32(r.consumer) }

// addrRing is a fill or completion ring of UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

func mapAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (addrRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, 8)
	if err != nil {
		return addrRing{}, err
	}
	return addrRing{ring: r, addrs: unsafe.Slice((*uint64)(p), size)}, nil
}

// descRing is an RX or TX ring of descriptors.
type descRing struct {
	ring
	descs []unix.XDPDesc
}

func mapDescRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (descRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return descRing{}, err
	}
	return descRing{ring: r, descs: unsafe.Slice((*unix.XDPDesc)(p), size)}, nil
}
