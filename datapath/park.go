package datapath

import (
	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// Parking: a packet whose QP context, or whose request's MPT entry or
// first MTT line, misses in the cache is set aside with the cache's
// ticket, and so is every later packet of that QP, in order; packets of
// other QPs go on. When the context arrives the QP's
// packets are handled in the order they came. A frame from the engine's
// own port is parked in place: the engine keeps the port's buffer (up to
// heldRxMax of them: the port's receive buffers are few) and gives it
// back when the packet is handled; any other (a frame handed over by
// another engine, or beyond that budget) is copied into a buffer of the
// engine's own. Parking has fixed capacity: a QP holds at most parkDepth
// packets and the engine parkBuffers copies and heldRxMax port buffers;
// beyond that a packet is dropped and counted (RC retransmits it).
const (
	parkDepth   = 32
	parkBuffers = 256
	heldRxMax   = 64
)

type parkedFrame struct {
	handle uint32 // in parkPool, or with inPort in heldRx
	n      int
	inPort bool // the port's own buffer, parked in place
}

// park sets a frame aside for its QP: the port's buffer itself, when the
// frame is from the batch the engine's port gave (rxPort) and the budget
// allows, else a copy. Its ICRC was checked when it came in (receive): it
// is parsed again without it when its turn comes.
func (e *engine) park(qpn uint32, fr *Frame) {
	r := &e.qps[qpn]
	if r.parkN == parkDepth || len(fr.Data) > len(e.parkPool.Buf(0)) {
		e.counters.ParkDropped.Add(1)
		return
	}
	pf := parkedFrame{n: len(fr.Data)}
	if n := len(e.heldFree); e.rxPort && n > 0 {
		h := e.heldFree[n-1]
		e.heldFree = e.heldFree[:n-1]
		e.heldRx[h] = *fr
		fr.Data = nil // taken: the batch's release leaves it out (releaseBatch)
		pf.handle, pf.inPort = uint32(h), true
	} else {
		h, ok := e.parkPool.Take()
		if !ok {
			e.counters.ParkDropped.Add(1)
			return
		}
		copy(e.parkPool.Buf(h), fr.Data)
		pf.handle = h
	}
	r.parked[(r.parkHead+r.parkN)%parkDepth] = pf
	r.parkN++
	e.counters.Parked.Add(1)
}

// parkedData is a parked frame's bytes.
func (e *engine) parkedData(pf parkedFrame) []byte {
	if pf.inPort {
		return e.heldRx[pf.handle].Data
	}
	return e.parkPool.Buf(pf.handle)[:pf.n]
}

// unpark gives a parked frame's buffer back: to the port, or to the
// engine's copies.
func (e *engine) unpark(pf parkedFrame) {
	if !pf.inPort {
		e.parkPool.Return(pf.handle)
		return
	}
	e.port.Release(e.heldRx[pf.handle : pf.handle+1])
	e.heldRx[pf.handle] = Frame{}
	e.heldFree = append(e.heldFree, uint16(pf.handle))
}

// releaseBatch gives the port back a received batch's buffers, less those
// parked in place (park took them: their Data is nil).
func (e *engine) releaseBatch(frames []Frame) {
	n := 0
	for i := range frames {
		if frames[i].Data != nil {
			frames[n] = frames[i]
			n++
		}
	}
	e.port.Release(frames[:n])
}

// releaseHeld gives the port back every buffer parked in place, when the
// engine stops.
func (e *engine) releaseHeld() {
	for qpn := range e.qps {
		if e.nic.owner(uint32(qpn)) != e {
			continue
		}
		r := &e.qps[qpn]
		for i := range r.parkN {
			if pf := r.parked[(r.parkHead+i)%parkDepth]; pf.inPort {
				e.unpark(pf)
				r.parked[(r.parkHead+i)%parkDepth] = parkedFrame{}
			}
		}
	}
}

// parkTypes are the contexts a packet can wait for: its QP's context, the
// CQ context it completes into, the SRQ context it takes a receive WQE
// from, and for a request naming remote memory (RDMA WRITE first/only,
// READ, atomics), the R_Key's MPT entry and the MTT line of its first page.
var parkTypes = [...]hostmem.ContextType{hostmem.QPC, hostmem.CQC, hostmem.SRQC, hostmem.MPT, hostmem.MTT}

// arrived handles an answer of the cache of type t: the ticket of a
// parked QP makes that QP ready; any other ticket is released.
func (e *engine) arrived(t hostmem.ContextType, resp ctxcache.Response) {
	e.misses--
	var tag uint32
	if e.parkPID[t] != nil {
		tag = e.parkPID[t][resp.PID]
		e.parkPID[t][resp.PID] = 0
	}
	e.nic.caches[t].Release(resp.PID)
	switch {
	case tag == cqeWait:
		e.cqeDue = true
	case tag == hpuWait:
		e.hpuDue = true
	case tag&sendWait != 0:
		qpn := tag&^sendWait - 1
		e.qps[qpn].sqWaiting = false
		e.sqReady = append(e.sqReady, qpn)
	case tag != 0:
		e.ready = append(e.ready, tag-1)
	}
}

// sendWait marks a ticket a QP's requester waits for (the QP number + 1
// is in the other bits); cqeWait, a ticket CQEs wait for (complete);
// hpuWait, one events from the HPUs wait for.
const (
	sendWait = 1 << 31
	cqeWait  = 1 << 30
	hpuWait  = 1 << 29 // events from the HPUs wait for it (hpu.go)
)

// probe looks up, without waiting, entry idx of context type t. On a miss
// it records the ticket under tag and reports true.
func (e *engine) probe(t hostmem.ContextType, idx uint64, tag uint32) bool {
	st, pid, _ := e.look(t, idx)
	if st == ctxcache.Miss {
		e.parkPID[t][pid] = tag
		return true
	}
	return false
}

// gatherMiss looks up, without waiting, the MPT entry and the MTT line
// the requester needs first to gather a packet's payload at logical offset
// off of a WQE's scatter/gather list. On a miss it records the ticket for
// QP qpn's requester and reports true: the requester stops there and goes
// on when the context comes, while other QPs send.
func (e *engine) gatherMiss(qpn uint32, w *hostmem.SendWQE, off uint32) bool {
	if w.InlineLen > 0 {
		return false
	}
	return e.sglMiss(w.SGE[:min(int(w.NumSGE), hostmem.MaxSendSGE)], off, 1, (qpn+1)|sendWait)
}

// sglMiss looks up, without waiting, the MPT entry and MTT lines of size
// bytes at logical offset off of a scatter/gather list (those in the SGE
// where they begin); on a miss it records the ticket under tag and
// reports true.
func (e *engine) sglMiss(sges []hostmem.SGE, off, size uint32, tag uint32) bool {
	for _, s := range sges {
		if off < s.Length {
			return e.regionMiss(s.LKey, s.Addr+uint64(off), uint64(min(size, s.Length-off)), tag)
		}
		off -= s.Length
	}
	return false
}

// memoryMiss looks up, without waiting, the MPT entries and MTT lines a
// request's memory access will need: for a request naming remote memory,
// its R_Key's entry and the lines of its first and (for a WRITE) last
// byte; for a later WRITE packet, the lines its payload lands in; for a
// SEND packet into a receive WQE already taken, the lines of the WQE's
// scatter list it lands in. On a miss it records the ticket for QP qpn and
// reports true: the packet must be parked.
func (e *engine) memoryMiss(qpn uint32, p *wire.Packet) bool {
	tag := qpn + 1
	size := uint64(len(p.Payload()))
	r := &e.qps[qpn]
	f := p.Info.Flags
	switch {
	case p.Info.Has(wire.HdrRETH):
		key, va := p.RETH().RKey(), p.RETH().VA()
		if f&wire.OpWrite == 0 {
			size = 1 // a READ's memory is read later, packet by packet
		}
		return e.regionMiss(key, va, size, tag)
	case p.Info.Has(wire.HdrAtomicETH):
		return e.regionMiss(p.AtomicETH().RKey(), p.AtomicETH().VA(), 8, tag)
	case f&wire.OpWrite != 0 && r.writeLeft > 0 && size > 0:
		return e.regionMiss(r.writeKey, r.writeVA, size, tag)
	case f&wire.OpSend != 0 && f&(wire.OpFirst|wire.OpOnly) == 0 && r.recvActive && size > 0:
		sges := r.recv.SGE[:min(int(r.recv.NumSGE), hostmem.MaxRecvSGE)]
		return e.sglMiss(sges, r.recvOff, uint32(size), tag) || e.sglMiss(sges, r.recvOff+uint32(size)-1, 1, tag)
	}
	return false
}

// landingMiss looks up, without waiting, the MPT entry and MTT lines
// that a READ response's data or an atomic's original value lands in
// (the scatter list of the work request it answers). On a miss it
// records the ticket for QP qpn and reports true: the response must be
// parked.
func (e *engine) landingMiss(qpn uint32, p *wire.Packet, q *hostmem.QPCEntry) bool {
	size := uint32(len(p.Payload()))
	if p.Opcode == wire.RCAtomicAcknowledge {
		size = 8
	}
	r := &e.qps[qpn]
	if size == 0 || !r.sndStarted {
		return false
	}
	ent, _, ok := r.snd.Landing(p.BTH().PSN())
	if !ok {
		return false
	}
	in := r.inflightOf(ent.WQE)
	if in == nil || !in.started {
		return false
	}
	off := uint32(responseIndex(in, p.BTH().PSN()) * pmtu(q))
	sges := in.wqe.SGE[:min(int(in.wqe.NumSGE), hostmem.MaxSendSGE)]
	tag := qpn + 1
	return e.sglMiss(sges, off, size, tag) || e.sglMiss(sges, off+size-1, 1, tag)
}

// regionMiss looks up, without waiting, key's MPT entry and the MTT
// lines of the bytes [va, va+size) (size at least 1): the line of the
// first byte, and of the last when it is another. On a miss it records the
// ticket under tag and reports true. A fault, no free ticket or an address
// outside the region report false: the access itself then waits, or fails
// and says why.
func (e *engine) regionMiss(key uint32, va, size uint64, tag uint32) bool {
	st, pid, words := e.look(hostmem.MPT, uint64(key>>8))
	switch st {
	case ctxcache.Miss:
		e.parkPID[hostmem.MPT][pid] = tag
		return true
	case ctxcache.Hit:
	default:
		return false
	}
	putWords(e.entry[:64], words)
	var m hostmem.MPTEntry
	m.Decode(e.entry[:64])
	if !m.Valid || va < m.VA || va-m.VA >= m.Length {
		return false
	}
	first := m.FirstMTT + (va-m.VA)>>m.PageShift
	if e.probe(hostmem.MTT, first, tag) {
		return true
	}
	last := m.FirstMTT + (min(va-m.VA+max(size, 1)-1, m.Length-1))>>m.PageShift
	line := uint64(e.nic.mttLine)
	return last/line != first/line && e.probe(hostmem.MTT, last, tag)
}

// unparkReady polls the caches packets wait for and handles, in order,
// the packets of every QP whose contexts have come. A packet that misses
// again (its request's memory, or a context evicted meanwhile) stays at
// the head of its QP's queue with a new ticket.
func (e *engine) unparkReady() {
	// A parked packet that misses again on its next context (a cold QP
	// misses its QPC, then its MPT entry, then its MTT line, then its
	// CQ's context) waits for that one too: go round while answers come,
	// so that with a fast DMA engine the QP drains before the next batch
	// of frames arrives behind it.
	// At most a few rounds per pass: when the cache thrashes (more QPs
	// in flight than it has lines), a QP's context is evicted again before
	// its packet is taken, and the rounds would never end.
	for round := 0; round < 64 && e.pollParked(); round++ {
		e.drainReady()
	}
}

// pollParked takes the answers of the caches packets wait for and reports
// whether any QP became ready.
func (e *engine) pollParked() bool {
	if e.misses == 0 { // no ticket of this engine's is out: no answer can come
		return len(e.sqReady) > 0 || len(e.ready) > 0 || e.cqeDue || e.hpuDue
	}
	resp := e.parkResp[:]
	e.cfg.DMA.Poll() // once for every cache: they share the DMA engine
	for _, t := range parkTypes {
		c := e.nic.caches[t]
		for {
			k := c.Answered(e.id, resp)
			for _, r := range resp[:k] {
				e.arrived(t, r)
			}
			if k < len(resp) {
				break // all it had: another Poll would find none
			}
		}
	}
	return len(e.sqReady) > 0 || len(e.ready) > 0 || e.cqeDue || e.hpuDue
}

// drainReady handles, in order, the parked packets of the QPs whose
// contexts have come, and restarts the requesters that waited.
func (e *engine) drainReady() {
	if e.cqeDue {
		e.cqeDue = false
		e.flushCQEs(false)
	}
	if e.hpuDue {
		e.hpuDue = false
		e.flushHPU(false)
	}
	for len(e.sqReady) > 0 {
		qpn := e.sqReady[len(e.sqReady)-1]
		e.sqReady = e.sqReady[:len(e.sqReady)-1]
		e.begin()
		e.request(qpn)
		if r := &e.qps[qpn]; r.timerWaiting {
			r.timerWaiting = false
			e.unwheel(qpn, r)
			e.expire(qpn, r, e.clock()) // its context is in the cache now (see expire)
		}
	}
	for len(e.ready) > 0 {
		qpn := e.ready[len(e.ready)-1]
		e.ready = e.ready[:len(e.ready)-1]
		r := &e.qps[qpn]
		for r.parkN > 0 {
			pf := r.parked[r.parkHead]
			var p wire.Packet
			err := wire.ParseNoICRC(e.parkedData(pf), &p)
			e.begin()
			var q hostmem.QPCEntry
			if err == nil && (e.mustWait(qpn, &p, &q) || e.dispatch(qpn, &p, &q)) {
				break // it waits again, at the head of its QP's queue
			}
			r.parkHead = (r.parkHead + 1) % parkDepth
			r.parkN--
			e.unpark(pf)
		}
	}
}

// mustWait looks up, without waiting, the contexts packet p of QP qpn
// needs: its QP's context; for a request, the MPT entries and MTT lines
// its payload needs (memoryMiss) and the SRQ's context if it takes a
// receive WQE from one. (A CQ context that misses holds only the CQE,
// not the packet: see complete.) On a miss it records the ticket and
// reports true. Otherwise q holds the QP's context for the handler
// (read now, waiting, if the cache had no ticket to give; not valid if
// there is none).
func (e *engine) mustWait(qpn uint32, p *wire.Packet, q *hostmem.QPCEntry) bool {
	tag := qpn + 1
	st, pid, words := e.look(hostmem.QPC, uint64(qpn))
	switch st {
	case ctxcache.Miss:
		e.parkPID[hostmem.QPC][pid] = tag
		return true
	case ctxcache.Hit:
		putWords(e.entry[:128], words)
		q.Decode(e.entry[:128])
	default:
		e.qpc(qpn, q) // a fault or no free ticket: wait, or find it invalid
		return false
	}
	if !q.Valid {
		return false
	}
	f := p.Info.Flags
	if f&wire.OpRequest == 0 {
		return q.Type == ibv.QPTRC && e.landingMiss(qpn, p, q)
	}
	if e.memoryMiss(qpn, p) {
		return true
	}
	takesRecv := f&wire.OpSend != 0 || p.Info.Has(wire.HdrImmDt)
	return takesRecv && q.SRQ != 0 && e.probe(hostmem.SRQC, uint64(q.SRQ-1), tag)
}
