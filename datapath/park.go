package datapath

import (
	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// Parking: a packet whose QP context, or whose request's MPT entry or
// first MTT line, misses in the cache is copied aside with the cache's
// ticket, and so is every later packet of that QP, in order; packets of
// other QPs go on. When the context arrives the QP's
// packets are handled in the order they came. Parking has fixed capacity:
// a QP holds at most parkDepth packets and the NIC parkBuffers in all;
// beyond that a packet is dropped and counted (RC retransmits it).
const (
	parkDepth   = 32
	parkBuffers = 256
)

type parkedFrame struct {
	handle uint32
	n      int
	noICRC bool
}

// park copies a frame aside for its QP.
func (n *engine) park(qpn uint32, fr *Frame) {
	r := &n.qps[qpn]
	h, ok := n.parkPool.Take()
	if !ok || r.parkN == parkDepth || len(fr.Data) > len(n.parkPool.Buf(0)) {
		if ok {
			n.parkPool.Return(h)
		}
		n.counters.ParkDropped.Add(1)
		return
	}
	r.parked[(r.parkHead+r.parkN)%parkDepth] = parkedFrame{handle: h, n: copy(n.parkPool.Buf(h), fr.Data), noICRC: fr.NoICRC}
	r.parkN++
	n.counters.Parked.Add(1)
}

// parkTypes are the contexts a packet can wait for: its QP's context, the
// CQ context it completes into, the SRQ context it takes a receive WQE
// from, and for a request naming remote memory (RDMA WRITE first/only,
// READ, atomics), the R_Key's MPT entry and the MTT line of its first page.
var parkTypes = [...]host.ContextType{host.QPC, host.CQC, host.SRQC, host.MPT, host.MTT}

// arrived handles an answer of the cache of type t: the ticket of a
// parked QP makes that QP ready; any other ticket is released.
func (n *engine) arrived(t host.ContextType, resp ctxcache.Response) {
	var tag uint32
	if n.parkPID[t] != nil {
		tag = n.parkPID[t][resp.PID]
		n.parkPID[t][resp.PID] = 0
	}
	n.caches[t].Release(resp.PID)
	switch {
	case tag == cqeWait:
		n.cqeDue = true
	case tag == hpuWait:
		n.hpuDue = true
	case tag&sendWait != 0:
		qpn := tag&^sendWait - 1
		n.qps[qpn].sqWaiting = false
		n.sqReady = append(n.sqReady, qpn)
	case tag != 0:
		n.ready = append(n.ready, tag-1)
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
func (n *engine) probe(t host.ContextType, idx uint64, tag uint32) bool {
	st, pid, _ := n.look(t, idx)
	if st == ctxcache.Miss {
		n.parkPID[t][pid] = tag
		return true
	}
	return false
}

// gatherMiss looks up, without waiting, the MPT entry and the MTT line
// the requester needs first to gather a packet's payload at logical offset
// off of a WQE's scatter/gather list. On a miss it records the ticket for
// QP qpn's requester and reports true: the requester stops there and goes
// on when the context comes, while other QPs send.
func (n *engine) gatherMiss(qpn uint32, w *host.SendWQE, off uint32) bool {
	if w.InlineLen > 0 {
		return false
	}
	return n.sglMiss(w.SGE[:min(int(w.NumSGE), host.MaxSendSGE)], off, 1, (qpn+1)|sendWait)
}

// sglMiss looks up, without waiting, the MPT entry and MTT lines of size
// bytes at logical offset off of a scatter/gather list (those in the SGE
// where they begin); on a miss it records the ticket under tag and
// reports true.
func (n *engine) sglMiss(sges []host.SGE, off, size uint32, tag uint32) bool {
	for _, s := range sges {
		if off < s.Length {
			return n.regionMiss(s.LKey, s.Addr+uint64(off), uint64(min(size, s.Length-off)), tag)
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
func (n *engine) memoryMiss(qpn uint32, p *wire.Packet) bool {
	tag := qpn + 1
	size := uint64(len(p.Payload()))
	r := &n.qps[qpn]
	f := p.Info.Flags
	switch {
	case p.Info.Has(wire.HdrRETH):
		key, va := p.RETH().RKey(), p.RETH().VA()
		if f&wire.OpWrite == 0 {
			size = 1 // a READ's memory is read later, packet by packet
		}
		return n.regionMiss(key, va, size, tag)
	case p.Info.Has(wire.HdrAtomicETH):
		return n.regionMiss(p.AtomicETH().RKey(), p.AtomicETH().VA(), 8, tag)
	case f&wire.OpWrite != 0 && r.writeLeft > 0 && size > 0:
		return n.regionMiss(r.writeKey, r.writeVA, size, tag)
	case f&wire.OpSend != 0 && f&(wire.OpFirst|wire.OpOnly) == 0 && r.recvActive && size > 0:
		sges := r.recv.SGE[:min(int(r.recv.NumSGE), host.MaxRecvSGE)]
		return n.sglMiss(sges, r.recvOff, uint32(size), tag) || n.sglMiss(sges, r.recvOff+uint32(size)-1, 1, tag)
	}
	return false
}

// landingMiss looks up, without waiting, the MPT entry and MTT lines
// that a READ response's data or an atomic's original value lands in
// (the scatter list of the work request it answers). On a miss it
// records the ticket for QP qpn and reports true: the response must be
// parked.
func (n *engine) landingMiss(qpn uint32, p *wire.Packet, q *host.QPCEntry) bool {
	size := uint32(len(p.Payload()))
	if p.Opcode == wire.RCAtomicAcknowledge {
		size = 8
	}
	r := &n.qps[qpn]
	if size == 0 || !r.sndStarted {
		return false
	}
	e, k, ok := r.snd.Landing(p.BTH().PSN())
	if !ok {
		return false
	}
	in := r.inflightOf(e.WQE)
	if in == nil {
		return false
	}
	off := k * uint32(pmtu(q))
	sges := in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)]
	tag := qpn + 1
	return n.sglMiss(sges, off, size, tag) || n.sglMiss(sges, off+size-1, 1, tag)
}

// regionMiss looks up, without waiting, key's MPT entry and the MTT
// lines of the bytes [va, va+size) (size at least 1): the line of the
// first byte, and of the last when it is another. On a miss it records the
// ticket under tag and reports true. A fault, no free ticket or an address
// outside the region report false: the access itself then waits, or fails
// and says why.
func (n *engine) regionMiss(key uint32, va, size uint64, tag uint32) bool {
	st, pid, words := n.look(host.MPT, uint64(key>>8))
	switch st {
	case ctxcache.Miss:
		n.parkPID[host.MPT][pid] = tag
		return true
	case ctxcache.Hit:
	default:
		return false
	}
	putWords(n.entry[:64], words)
	var m host.MPTEntry
	m.Decode(n.entry[:64])
	if !m.Valid || va < m.VA || va-m.VA >= m.Length {
		return false
	}
	first := m.FirstMTT + (va-m.VA)>>m.PageShift
	if n.probe(host.MTT, first, tag) {
		return true
	}
	last := m.FirstMTT + (min(va-m.VA+max(size, 1)-1, m.Length-1))>>m.PageShift
	line := uint64(n.mttLine)
	return last/line != first/line && n.probe(host.MTT, last, tag)
}

// unparkReady polls the caches packets wait for and handles, in order,
// the packets of every QP whose contexts have come. A packet that misses
// again (its request's memory, or a context evicted meanwhile) stays at
// the head of its QP's queue with a new ticket.
func (n *engine) unparkReady() {
	// A parked packet that misses again on its next context (a cold QP
	// misses its QPC, then its MPT entry, then its MTT line, then its
	// CQ's context) waits for that one too: go round while answers come,
	// so that with a fast DMA engine the QP drains before the next batch
	// of frames arrives behind it.
	// At most a few rounds per pass: when the cache thrashes (more QPs
	// in flight than it has lines), a QP's context is evicted again before
	// its packet is taken, and the rounds would never end.
	for round := 0; round < 64 && n.pollParked(); round++ {
		n.drainReady()
	}
}

// pollParked takes the answers of the caches packets wait for and reports
// whether any QP became ready.
func (n *engine) pollParked() bool {
	resp := n.parkResp[:]
	for _, t := range parkTypes {
		c := n.caches[t]
		for k := c.Poll(n.id, resp); k > 0; k = c.Poll(n.id, resp) {
			for _, r := range resp[:k] {
				n.arrived(t, r)
			}
		}
	}
	return len(n.sqReady) > 0 || len(n.ready) > 0 || n.cqeDue || n.hpuDue
}

// drainReady handles, in order, the parked packets of the QPs whose
// contexts have come, and restarts the requesters that waited.
func (n *engine) drainReady() {
	if n.cqeDue {
		n.cqeDue = false
		n.flushCQEs(false)
	}
	if n.hpuDue {
		n.hpuDue = false
		n.flushHPU(false)
	}
	for len(n.sqReady) > 0 {
		qpn := n.sqReady[len(n.sqReady)-1]
		n.sqReady = n.sqReady[:len(n.sqReady)-1]
		n.begin()
		n.request(qpn)
	}
	for len(n.ready) > 0 {
		qpn := n.ready[len(n.ready)-1]
		n.ready = n.ready[:len(n.ready)-1]
		r := &n.qps[qpn]
		for r.parkN > 0 {
			pf := r.parked[r.parkHead]
			frame := n.parkPool.Buf(pf.handle)[:pf.n]
			var p wire.Packet
			var err error
			if pf.noICRC {
				err = wire.ParseNoICRC(frame, &p)
			} else {
				err = wire.Parse(frame, &p)
			}
			n.begin()
			var q host.QPCEntry
			if err == nil && (n.mustWait(qpn, &p, &q) || n.dispatch(qpn, &p, &q)) {
				break // it waits again, at the head of its QP's queue
			}
			r.parkHead = (r.parkHead + 1) % parkDepth
			r.parkN--
			n.parkPool.Return(pf.handle)
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
func (n *engine) mustWait(qpn uint32, p *wire.Packet, q *host.QPCEntry) bool {
	tag := qpn + 1
	st, pid, words := n.look(host.QPC, uint64(qpn))
	switch st {
	case ctxcache.Miss:
		n.parkPID[host.QPC][pid] = tag
		return true
	case ctxcache.Hit:
		putWords(n.entry[:128], words)
		q.Decode(n.entry[:128])
	default:
		n.qpc(qpn, q) // a fault or no free ticket: wait, or find it invalid
		return false
	}
	if !q.Valid {
		return false
	}
	f := p.Info.Flags
	if f&wire.OpRequest == 0 {
		return q.Type == host.QPTRC && n.landingMiss(qpn, p, q)
	}
	if n.memoryMiss(qpn, p) {
		return true
	}
	takesRecv := f&wire.OpSend != 0 || p.Info.Has(wire.HdrImmDt)
	return takesRecv && q.SRQ != 0 && n.probe(host.SRQC, uint64(q.SRQ-1), tag)
}
