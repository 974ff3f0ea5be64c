package datapath

// The DMA stage: host-memory reads the engine does not wait for.
//
// Behind a PCIe model (hostmem.PCIe) a read from host memory is answered
// a bus round trip later, as on an RNIC. Two reads sit on every request's
// path: the send WQEs a doorbell announces, and the payload a packet
// carries. Neither stops the engine:
//
//   - WQE fetch. A requester that needs its next WQE takes a fetch slot
//     and reads up to fetchBatch WQEs into it at once (one read, as an
//     RNIC prefetches a batch after a doorbell), and stops; the engine
//     goes on with other QPs. When the read completes (fetchesDue, in
//     issue order) the requester runs again and takes its WQEs from the
//     slot.
//   - Payload gather. A packet's payload is read straight into its
//     transmit buffer, and the frame waits in the staged ring until its
//     reads complete; then it is encoded (its ICRC covers the payload)
//     and handed to the port. While any frame is staged, every frame the
//     engine sends (an ACK, a READ request) queues behind it, so frames
//     leave in the order the engine built them, as they did when it
//     waited.
//
// The MPT and MTT checks are made, through the resolve stage, before a
// read is issued: what can fail later is only the host's memory itself
// (a fault), which is counted (dma_faults) and fails the QP as a local
// protection error. A read the DMA engine has no room for (its queue
// full) waits, counted (dma_waits). Without a PCIe model reads are
// memory copies: the engine makes them at once, in line.
//
// Completions come from DMA.Poll, whoever calls it (this engine's turn,
// a context cache's pipeline, an HPU cluster's): a slot's or a frame's
// completion is an atomic flag the owning engine reads; nothing else is
// shared.

import (
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
)

const (
	fetchBatch = 8   // WQEs one fetch reads
	fetchSlots = 64  // fetches in flight per engine
	stagedMax  = 256 // frames waiting for their payload per engine
)

// wqeFetch is a fetch slot: WQEs of one QP's send queue read in one
// transfer, taken one by one by its requester.
type wqeFetch struct {
	buf    [fetchBatch * hostmem.SendWQESize]byte
	qpn    uint32
	n      int  // WQEs read
	next   int  // WQEs taken
	queued bool // in the issue-order list (not yet seen complete)
	orphan bool // its QP was reset or failed while the read was under way: free it when it completes
	fault  bool // the read failed
	done   atomic.Bool
}

// DMADone is the read's completion, from whoever polled the DMA engine.
func (f *wqeFetch) DMADone(_ uint64, err error) {
	f.fault = err != nil
	f.done.Store(true)
}

// stagedFrame is a frame waiting for its payload's reads.
type stagedFrame struct {
	fr     Frame
	f      wire.FrameFields
	qpn    uint32
	built  bool         // its fields are set: it goes once its reads are done
	left   atomic.Int32 // reads not yet complete
	failed atomic.Bool
}

// DMADone is one of the payload's reads completing.
func (s *stagedFrame) DMADone(_ uint64, err error) {
	if err != nil {
		s.failed.Store(true)
	}
	s.left.Add(-1)
}

// dmaStage is an engine's reads in flight: fetch slots and staged frames.
type dmaStage struct {
	fetches    [fetchSlots]wqeFetch
	fetchFree  []int32 // free slots
	fetchOrder [fetchSlots]int32
	orderHead  int
	orderN     int

	staged     [stagedMax]stagedFrame
	stagedHead int
	stagedN    int
	staging    *stagedFrame // the ring's last frame while its packet is being built, or nil
	free       [1]Frame
}

func (d *dmaStage) init() {
	d.fetchFree = make([]int32, 0, fetchSlots)
	for i := fetchSlots - 1; i >= 0; i-- {
		d.fetchFree = append(d.fetchFree, int32(i))
	}
}

// busy reports whether reads are in flight or frames wait to go.
func (d *dmaStage) busy() bool { return d.orderN > 0 || d.stagedN > 0 }

// asyncDMA reports whether host reads are worth not waiting for.
func (e *engine) asyncDMA() bool { return e.cfg.DMA.Modelled() }

// nextWQE takes the QP's next send WQE into w, from its fetch slot. It
// reports false when the WQE is not here yet: the fetch is issued (or
// under way) and the requester runs again when it completes. r.sqConsumer
// is the WQE's index; the caller advances it.
func (e *engine) nextWQE(qpn uint32, q *hostmem.QPCEntry, r *qpRun, w *hostmem.SendWQE) bool {
	if !e.asyncDMA() {
		return e.readWQE(q, r, w)
	}
	d := &e.dma
	if r.fetch != 0 {
		f := &d.fetches[r.fetch-1]
		if !f.done.Load() {
			return false // fetchesDue runs the requester when it comes
		}
		if f.fault {
			e.dropFetch(r)
			e.counters.DMAFaults.Add(1)
			r.dmaFault = true
			return false
		}
		w.Decode(f.buf[f.next*hostmem.SendWQESize:])
		if f.next++; f.next == f.n {
			e.dropFetch(r)
		}
		return true
	}
	if len(d.fetchFree) == 0 { // every slot taken: this one WQE is read waiting, counted
		e.counters.DMAWaits.Add(1)
		return e.readWQE(q, r, w)
	}
	idx := r.sqConsumer % q.SQSize
	n := min(int(r.sqProducer-r.sqConsumer), fetchBatch, int(q.SQSize-idx), len(r.inflight)-r.ifN)
	slot := d.fetchFree[len(d.fetchFree)-1]
	d.fetchFree = d.fetchFree[:len(d.fetchFree)-1]
	f := &d.fetches[slot]
	f.qpn, f.n, f.next, f.orphan, f.fault = qpn, n, 0, false, false
	f.done.Store(false)
	addr := q.SQBase + uint64(idx)*hostmem.SendWQESize
	for {
		err := e.cfg.DMA.ReadAsync(addr, f.buf[:n*hostmem.SendWQESize], f, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, hostmem.ErrDMABusy) {
			d.fetchFree = append(d.fetchFree, slot)
			e.counters.DMAFaults.Add(1)
			return false
		}
		e.counters.DMAWaits.Add(1)
		e.pollDMA()
	}
	r.fetch = slot + 1
	f.queued = true
	d.fetchOrder[(d.orderHead+d.orderN)%fetchSlots] = slot
	d.orderN++
	return false
}

// readWQE reads the QP's next send WQE into w and waits for it.
func (e *engine) readWQE(q *hostmem.QPCEntry, r *qpRun, w *hostmem.SendWQE) bool {
	addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*hostmem.SendWQESize
	if e.cfg.DMA.Read(addr, e.wqe[:]) != nil {
		e.counters.DMAFaults.Add(1)
		return false
	}
	w.Decode(e.wqe[:])
	return true
}

// dropFetch gives back a QP's fetch slot: at once if its read is done and
// seen, else when it completes.
func (e *engine) dropFetch(r *qpRun) {
	if r.fetch == 0 {
		return
	}
	f := &e.dma.fetches[r.fetch-1]
	if f.queued {
		f.orphan = true
	} else {
		e.dma.fetchFree = append(e.dma.fetchFree, r.fetch-1)
	}
	r.fetch = 0
}

// fetchesDue runs, in issue order, the requesters whose WQEs have come.
func (e *engine) fetchesDue() bool {
	d := &e.dma
	ran := false
	for d.orderN > 0 {
		slot := d.fetchOrder[d.orderHead]
		f := &d.fetches[slot]
		if !f.done.Load() {
			break
		}
		d.orderHead = (d.orderHead + 1) % fetchSlots
		d.orderN--
		f.queued = false
		if f.orphan {
			d.fetchFree = append(d.fetchFree, slot)
			continue
		}
		ran = true
		e.begin()
		e.request(f.qpn)
	}
	return ran
}

// pollDMA carries out the DMA engine's completed transfers, letting a
// driven clock move on to the next when none is complete.
func (e *engine) pollDMA() {
	if e.cfg.DMA.Poll() == 0 {
		e.cfg.DMA.Pass()
	}
}

// readInto issues a read of len(buf) bytes at addr for staged frame s,
// waiting only while the DMA engine's queue is full.
func readInto(dma *hostmem.DMA, addr uint64, buf []byte, s *stagedFrame) error {
	s.left.Add(1)
	for {
		err := dma.ReadAsync(addr, buf, s, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, hostmem.ErrDMABusy) {
			s.left.Add(-1)
			return err
		}
		if dma.Poll() == 0 && !dma.Pass() {
			runtime.Gosched()
		}
	}
}

// stage moves the transmit buffer txBuffer took into the staged ring: a
// packet gathers its payload into it and commit completes it. It returns
// the staged frame, or nil when the ring is full (the packet then waits
// for its reads, as without a PCIe model).
func (e *engine) stage(qpn uint32) *stagedFrame {
	d := &e.dma
	if d.stagedN == stagedMax {
		e.counters.DMAWaits.Add(1)
		return nil
	}
	i := (d.stagedHead + d.stagedN) % stagedMax
	s := &d.staged[i]
	s.fr, s.qpn, s.built = e.tx[e.txN], qpn, false
	s.left.Store(0)
	s.failed.Store(false)
	e.tx[e.txN] = Frame{}
	d.stagedN++
	d.staging = s
	return s
}

// waitStagedRoom waits, counted, until the staged ring's head has gone,
// keeping aside the transmit buffer txBuffer took meanwhile (sendStaged
// fills e.tx).
func (e *engine) waitStagedRoom() {
	cur := e.tx[e.txN]
	e.tx[e.txN] = Frame{}
	e.counters.DMAWaits.Add(1)
	for e.dma.stagedN == stagedMax {
		e.pollDMA()
		e.sendStaged()
	}
	if e.txN == len(e.tx) {
		e.flushTX()
	}
	e.tx[e.txN] = cur
}

// unstage drops the frame being staged (its packet is not sent) and gives
// its buffer back to the port.
func (e *engine) unstage() {
	d := &e.dma
	s := d.staging
	d.staging = nil
	for s.left.Load() > 0 { // reads already issued land in the buffer first
		e.pollDMA()
	}
	e.freeOne(s.fr)
	s.fr = Frame{}
	d.stagedN--
}

// sendStaged hands to the port, in order, the staged frames whose reads
// are complete; it reports whether any went.
func (e *engine) sendStaged() bool {
	d := &e.dma
	sent := false
	for d.stagedN > 0 {
		s := &d.staged[d.stagedHead]
		if !s.built || s.left.Load() != 0 {
			break
		}
		d.stagedHead = (d.stagedHead + 1) % stagedMax
		d.stagedN--
		sent = true
		if s.failed.Load() {
			e.freeOne(s.fr)
			e.counters.DMAFaults.Add(1)
			e.qps[s.qpn].dmaFault = true // its requester fails the QP (local protection error)
			e.later(s.qpn, &e.qps[s.qpn])
			s.fr, s.f = Frame{}, wire.FrameFields{}
			continue
		}
		if e.txN == len(e.tx) {
			e.flushTX()
		}
		e.tx[e.txN] = s.fr
		s.fr = Frame{}
		e.commitNow(e.tx[e.txN].Data, &s.f)
		s.f = wire.FrameFields{}
	}
	return sent
}

// freeOne gives one frame's buffer back to the port.
func (e *engine) freeOne(fr Frame) {
	e.dma.free[0] = fr
	e.port.Free(e.dma.free[:])
	e.dma.free[0] = Frame{}
}

// dmaDue polls the DMA engine and moves on what its completions free: the
// requesters whose WQEs came, the frames whose payload came.
func (e *engine) dmaDue() bool {
	if !e.cfg.DMA.Busy() && !e.dma.busy() {
		return false
	}
	e.cfg.DMA.Poll() // CQE notices (fences) complete here too
	ran := e.fetchesDue()
	return e.sendStaged() || ran
}
