package datapath

// Warming a batch's QPs: with thousands of QPs a QP's state is cold when
// its doorbell comes, and the requester's first reads of it each wait a
// memory round trip. The doorbells taken in one batch name their QPs
// before any is served, so their send state is read first, in one loop
// whose loads the CPU overlaps (package warm), and the requester then
// finds it in cache.

import (
	"unsafe"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/internal/warm"
)

// warmSend reads the cache lines of a QP's send state that its requester
// reads first: the QP's scalars, its Sender's per-packet fields and the
// in-flight slot its next work request takes (written whole, a few
// lines, when it is fetched). The counters the engine last added (seen)
// are read only when the Sender's transport counters moved: not warmed.
func (r *qpRun) warmSend() uintptr {
	s := warm.Lines(unsafe.Pointer(r), unsafe.Offsetof(r.snd)) + r.snd.Warm()
	if n := len(r.inflight); n > 0 && r.ifN < n {
		s += warm.Lines(unsafe.Pointer(&r.inflight[(r.ifHead+r.ifN)%n]), unsafe.Sizeof(r.inflight[0]))
	}
	return s
}

// warmBells warms the send state of the QPs of a batch of doorbells.
func (e *engine) warmBells(bells []Doorbell) {
	var s uintptr
	for i := range bells {
		if qpn := bells[i].QPN; qpn < uint32(len(e.qps)) {
			s += e.qps[qpn].warmSend()
		}
	}
	e.warmSink += s
}

// warmRecv reads the cache lines of a QP's receive state that its
// responder reads first (its handlers' fields that every packet reads
// among them, handlers or not), and the slot a packet parked next would
// take.
func (r *qpRun) warmRecv() uintptr {
	return warm.Lines(unsafe.Pointer(r), 8) +
		warm.Lines(unsafe.Pointer(&r.qpRecv), unsafe.Offsetof(r.rcv)-unsafe.Offsetof(r.qpRecv)) +
		r.rcv.Warm() +
		warm.Lines(unsafe.Pointer(&r.hpu), unsafe.Offsetof(r.hpu.msg)) +
		warm.Lines(unsafe.Pointer(&r.parked[(r.parkHead+r.parkN)%parkDepth]), unsafe.Sizeof(r.parked[0]))
}

// warmAnswered reads what an ACK or a READ response reads first: the
// QP's send state and its oldest work request in flight.
func (r *qpRun) warmAnswered() uintptr {
	s := r.warmSend()
	if r.ifN > 0 && r.ifHead < len(r.inflight) {
		s += warm.Lines(unsafe.Pointer(&r.inflight[r.ifHead]), unsafe.Sizeof(r.inflight[0]))
	}
	return s
}

// warmFrames warms the state of the QPs a batch of received frames is for.
func (e *engine) warmFrames(frames []Frame) {
	var s uintptr
	for i := range frames {
		qpn, req, ok := wire.PeekDestQP(frames[i].Data)
		if !ok || qpn >= uint32(len(e.qps)) || e.nic.owner(qpn) != e {
			continue // another engine's QP is its own to touch
		}
		if r := &e.qps[qpn]; req {
			s += r.warmRecv()
		} else {
			s += r.warmAnswered()
		}
	}
	e.warmSink += s
}
