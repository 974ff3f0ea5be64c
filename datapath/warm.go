package datapath

// Warming a batch's QPs: with thousands of QPs a QP's state is cold when
// its doorbell comes, and the requester's first reads of it each wait a
// memory round trip. The doorbells taken in one batch name their QPs
// before any is served, so their send state is read first, in one loop
// whose loads the CPU overlaps (package warm), and the requester then
// finds it in cache.

import (
	"unsafe"

	"github.com/softrnic/softrnic/internal/warm"
)

// warmSend reads the cache lines of a QP's send state that its requester
// reads first: the QP's scalars, its Sender's per-packet fields and the
// counters the engine compares.
func (r *qpRun) warmSend() uintptr {
	return warm.Lines(unsafe.Pointer(r), unsafe.Offsetof(r.snd)) +
		r.snd.Warm() +
		warm.Lines(unsafe.Pointer(&r.seen), unsafe.Sizeof(r.seen))
}

// warmBells warms the send state of the QPs of a batch of doorbells.
func (e *engine) warmBells(bells []Doorbell) {
	var s uintptr
	for i := range bells {
		if qpn := bells[i].QPN; qpn < uint32(len(e.qps)) {
			s += e.qps[qpn].warmSend()
		}
	}
	warm.Sink += s
}
