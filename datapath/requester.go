package datapath

import (
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// window is how many PSNs a QP may have unacknowledged, as rxe allows.
const window = 128

// request is the requester: it fetches the WQEs posted to a QP's send
// queue through the DMA engine, segments them by the path MTU, assigns
// PSNs, and sends packets while the window allows. A packet is never kept:
// a retransmission gathers its payload again from host memory (the replay
// state is the WQE and the PSN, not the bytes).
func (n *engine) request(qpn uint32) {
	var q host.QPCEntry
	if !n.qpc(qpn, &q) || q.State != qpsRTS || q.SQSize == 0 {
		return
	}
	r := &n.qps[qpn]
	r.start(&q)
	if r.errored { // a QP in error flushes what is posted to it
		n.fail(qpn, &q, r, wcWRFlushErr)
		return
	}
	if r.sqWaiting {
		return // goes on when the context it waits for comes
	}
	mtu := pmtu(&q)
	for !r.errored && !r.rnrWait {
		if r.sendIdx == r.ifN { // everything in flight is sent: take the next WQE
			if r.sqConsumer == r.sqProducer || r.ifN == len(r.inflight) {
				return
			}
			addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*host.SendWQESize
			if n.cfg.DMA.Read(addr, n.wqe[:]) != nil {
				return
			}
			var in inflight
			in.wqe.Decode(n.wqe[:])
			in.index = r.sqConsumer
			r.sqConsumer++
			for _, s := range in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)] {
				in.length += s.Length
			}
			if in.wqe.InlineLen > 0 {
				in.length = in.wqe.InlineLen
			}
			in.signaled = in.wqe.Flags&sendFlagSignald != 0
			if q.Type == qptUD { // one datagram, completed once sent
				n.finish(qpn, &q, &in, n.sendUD(qpn, &q, r, &in, mtu))
				continue
			}
			in.packets = max(1, (int(in.length)+mtu-1)/mtu)
			if isAtomic(in.wqe.Opcode) {
				in.packets, in.length = 1, 8
			}
			in.firstPSN = r.nextPSN
			in.lastPSN = r.nextPSN.Add(uint32(in.packets - 1))
			r.nextPSN = in.lastPSN.Next()
			if !supported(in.wqe.Opcode) || q.Type == qptUC && (in.wqe.Opcode == wrRDMARead || isAtomic(in.wqe.Opcode)) {
				in.signaled = true
				n.track(r, in)
				n.fail(qpn, &q, r, wcLocQPOpErr)
				return
			}
			n.track(r, in)
		}
		in := &r.inflight[(r.ifHead+r.sendIdx)%len(r.inflight)]
		psn := in.firstPSN.Add(uint32(r.sendPkt))
		if psn.Diff(r.una) >= window {
			return
		}
		if r.sendPkt == 0 && (in.wqe.Opcode == wrRDMARead || isAtomic(in.wqe.Opcode)) && r.rdAtomicOut() >= rdAtomicLimit(&q) {
			return // the responder keeps no more READ/atomic answers: wait for one to complete
		}
		if in.wqe.Opcode != wrRDMARead && !isAtomic(in.wqe.Opcode) &&
			n.gatherMiss(qpn, &in.wqe, uint32(r.sendPkt*mtu)) {
			r.sqWaiting = true
			n.counters.SendWaits.Add(1)
			return
		}
		if !n.sendPacket(&q, r, in, r.sendPkt, mtu) {
			n.fail(qpn, &q, r, wcLocProtErr)
			return
		}
		if in.wqe.Opcode == wrRDMARead {
			psn = in.lastPSN // a READ request opens its whole response
		}
		if psn.After(r.sentMax) {
			r.sentMax = psn
		}
		if r.sendPkt++; r.sendPkt == in.packets || in.wqe.Opcode == wrRDMARead {
			r.sendIdx, r.sendPkt = r.sendIdx+1, 0
			if q.Type == qptUC { // unreliable: complete as soon as it is sent
				n.finish(qpn, &q, in, wcSuccess)
				r.ifHead = (r.ifHead + 1) % len(r.inflight)
				r.ifN--
				r.sendIdx--
				r.una = r.nextPSN
				continue
			}
		}
		if r.deadline.IsZero() && q.Type != qptUC {
			n.arm(qpn, r, &q)
		}
	}
}

// rdAtomicOut counts the READs and atomics sent and not yet retired. One
// answered out of order still counts: until the ones before it are
// answered, a retransmission may ask for it again, and the responder must
// still hold its answer.
func (r *qpRun) rdAtomicOut() int {
	k := 0
	for i := range r.sendIdx {
		in := &r.inflight[(r.ifHead+i)%len(r.inflight)]
		if in.wqe.Opcode == wrRDMARead || isAtomic(in.wqe.Opcode) {
			k++
		}
	}
	return k
}

// rdAtomicLimit is how many READs and atomics a QP may have outstanding:
// its max_rd_atomic, at least one and at most what softrnic's responder
// keeps answers for.
func rdAtomicLimit(q *host.QPCEntry) int {
	return min(max(int(q.MaxRdAtomic), 1), maxRdAtomic)
}

func isAtomic(op uint8) bool { return op == wrAtomicCAS || op == wrAtomicFAA }

func supported(op uint8) bool {
	switch op {
	case wrSend, wrSendImm, wrSendInv, wrRDMAWrite, wrRDMAWriteImm, wrRDMARead, wrAtomicCAS, wrAtomicFAA:
		return true
	}
	return false
}

// opcodes of a message: first, middle, last and only packets.
type msgOps struct{ first, middle, last, only wire.Opcode }

// opsRead are a READ response's opcodes.
var opsRead = msgOps{wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly}

// at is the opcode of packet k of a message of the given number of packets.
func (o msgOps) at(k, packets int) wire.Opcode {
	switch {
	case packets == 1:
		return o.only
	case k == 0:
		return o.first
	case k == packets-1:
		return o.last
	}
	return o.middle
}

// segmentLen is the payload length of packet k of a message of total
// bytes cut at mtu.
func segmentLen(total, k, mtu int) int { return max(0, min(total-k*mtu, mtu)) }

var (
	opsSend     = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly}
	opsSendImm  = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithImmediate, wire.RCSendOnlyWithImmediate}
	opsSendInv  = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithInvalidate, wire.RCSendOnlyWithInvalidate}
	opsWrite    = msgOps{wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly}
	opsWriteImm = msgOps{wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLastWithImmediate, wire.RCRDMAWriteOnlyWithImmediate}
)

func opsOf(op uint8) msgOps {
	switch op {
	case wrSendImm:
		return opsSendImm
	case wrSendInv:
		return opsSendInv
	case wrRDMAWrite:
		return opsWrite
	case wrRDMAWriteImm:
		return opsWriteImm
	}
	return opsSend
}

// sendPacket sends packet k of an in-flight message, gathering its payload
// from the WQE's scatter/gather list. It reports false on a local
// protection error.
func (n *engine) sendPacket(q *host.QPCEntry, r *qpRun, in *inflight, k, mtu int) bool {
	w := &in.wqe
	var f wire.FrameFields
	if w.Opcode == wrRDMARead {
		// k > 0 is a partial retry: the rest of the READ from packet k on,
		// as rxe asks for it.
		off := min(uint32(k*mtu), in.length)
		n.frameTo(&f, q, wire.RCRDMAReadRequest, in.firstPSN.Add(uint32(k)))
		f.BTH.AckReq = true
		f.RETH = wire.RETHFields{VA: w.RemoteAddr + uint64(off), RKey: w.RKey, DMALen: in.length - off}
		n.send(&f)
		return true
	}
	if isAtomic(w.Opcode) {
		op := wire.RCCompareSwap
		if w.Opcode == wrAtomicFAA {
			op = wire.RCFetchAdd
		}
		n.frameTo(&f, q, op, in.firstPSN)
		f.BTH.AckReq = true
		f.AtomicETH = wire.AtomicETHFields{VA: w.RemoteAddr, RKey: w.RKey, SwapAdd: w.SwapAdd, Compare: w.Compare}
		n.send(&f)
		return true
	}
	op := opsOf(w.Opcode).at(k, in.packets)
	if q.Type == qptUC {
		op |= wire.Opcode(wire.TransportUC)
	}
	n.frameTo(&f, q, op, in.firstPSN.Add(uint32(k)))
	payload := n.payload[:segmentLen(int(in.length), k, mtu)]
	if !n.gather(q.PD, w, uint32(k*mtu), payload) {
		return false
	}
	f.Payload = payload
	info := op.Info()
	if info.Has(wire.HdrRETH) {
		f.RETH = wire.RETHFields{VA: w.RemoteAddr, RKey: w.RKey, DMALen: in.length}
	}
	if info.Has(wire.HdrImmDt) {
		f.Imm = w.Imm
	}
	if info.Has(wire.HdrIETH) {
		f.InvalidateRKey = w.Imm
	}
	// Ask for an ACK at the end of the message and every 64 PSNs, so that
	// a long message keeps the window moving.
	f.BTH.AckReq = q.Type != qptUC && (k == in.packets-1 || f.BTH.PSN&63 == 63)
	n.send(&f)
	if info.Flags&wire.OpSend != 0 {
		n.counters.RdmaSends.Add(1)
	}
	return true
}

// gather reads len(buf) bytes at logical offset off of a WQE's data: its
// inline bytes, or its scatter/gather list (local reads need no access
// right beyond the region's validity).
func (n *engine) gather(pd uint32, w *host.SendWQE, off uint32, buf []byte) bool {
	if w.InlineLen > 0 {
		return copy(buf, w.Inline[min(off, w.InlineLen):w.InlineLen]) == len(buf)
	}
	return n.sglCopy(pd, w.SGE[:min(int(w.NumSGE), host.MaxSendSGE)], off, buf, false)
}

// track records a message as in flight.
func (n *engine) track(r *qpRun, in inflight) {
	r.inflight[(r.ifHead+r.ifN)%len(r.inflight)] = in
	r.ifN++
}

// finish completes a send work request (if signaled, or on error).
func (n *engine) finish(qpn uint32, q *host.QPCEntry, in *inflight, status uint8) {
	if !in.signaled && status == wcSuccess {
		return
	}
	op := uint8(wcSend)
	switch in.wqe.Opcode {
	case wrRDMAWrite, wrRDMAWriteImm:
		op = wcRDMAWrite
	case wrRDMARead:
		op = wcRDMARead
	case wrAtomicCAS:
		op = wcCompSwap
	case wrAtomicFAA:
		op = wcFetchAdd
	}
	c := host.CQE{WRID: in.wqe.WRID, Status: status, Opcode: op, ByteLen: in.length, QPN: qpn, WQEIndex: in.index}
	n.complete(q.SendCQ, &c)
}

// ackTimeout is the local ACK timeout of a QP: 4.096 µs × 2^timeout, and
// at least 10 ms: an engine goroutine on a loaded host can be descheduled
// for milliseconds, and a spurious go-back-N only adds load.
func ackTimeout(q *host.QPCEntry) time.Duration {
	if q.Timeout == 0 || q.Timeout > 31 {
		return 100 * time.Millisecond
	}
	return max(time.Duration(4096<<q.Timeout)*time.Nanosecond, 10*time.Millisecond)
}

// arm starts a QP's retransmission timer.
func (n *engine) arm(qpn uint32, r *qpRun, q *host.QPCEntry) {
	r.deadline = time.Now().Add(ackTimeout(q))
	if !r.armed {
		r.armed = true
		n.timers = append(n.timers, qpn)
	}
}

// goBack retransmits from psn: every packet from the one carrying psn on
// is sent again.
func (n *engine) goBack(qpn uint32, r *qpRun, psn wire.PSN) {
	for i := range r.ifN {
		in := &r.inflight[(r.ifHead+i)%len(r.inflight)]
		if psn.Before(in.firstPSN) || psn.After(in.lastPSN) {
			continue
		}
		r.sendIdx, r.sendPkt = i, int(psn.Diff(in.firstPSN))
		n.request(qpn)
		return
	}
}

// expire handles the QPs whose retransmission timer has run out.
func (n *engine) expire(now time.Time) {
	kept := n.timers[:0]
	for _, qpn := range n.timers {
		r := &n.qps[qpn]
		if r.ifN == 0 || r.errored {
			r.armed, r.deadline = false, time.Time{}
			continue
		}
		kept = append(kept, qpn)
		if now.Before(r.deadline) {
			continue
		}
		var q host.QPCEntry
		if !n.qpc(qpn, &q) {
			continue
		}
		if r.rnrWait {
			r.rnrWait = false
		} else if r.retries++; r.retries > int(q.RetryCnt) {
			n.counters.RetryExceededErr.Add(1)
			n.fail(qpn, &q, r, wcRetryExcErr)
			continue
		}
		n.counters.Retransmits.Add(1)
		r.deadline = now.Add(ackTimeout(&q))
		r.gapAsked = false
		n.goBack(qpn, r, r.una)
	}
	n.timers = kept
}

// sendUD sends a UD work request as one datagram to the address vector it
// carries, and returns its completion status.
func (n *engine) sendUD(qpn uint32, q *host.QPCEntry, r *qpRun, in *inflight, mtu int) uint8 {
	w := &in.wqe
	op := wire.UDSendOnly
	switch {
	case w.Opcode == wrSendImm:
		op = wire.UDSendOnlyWithImmediate
	case w.Opcode != wrSend || !w.HasAV:
		return wcLocQPOpErr
	}
	if int(in.length) > mtu {
		return wcLocLenErr
	}
	payload := n.payload[:in.length]
	if !n.gather(q.PD, w, 0, payload) {
		return wcLocProtErr
	}
	var f wire.FrameFields
	dst := gidAddr(w.DestGID)
	f.Ethernet = wire.EthernetFields{Dst: wire.MAC(w.DestMAC), Src: n.cfg.MAC}
	if dst.Is4() {
		f.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: n.cfg.IP, Dst: dst}
	} else {
		f.IPv6 = true
		f.IP6 = wire.IPv6Fields{HopLimit: 64, Src: n.cfg.IP, Dst: dst}
	}
	f.UDP = wire.UDPFields{SrcPort: wire.SourcePort(qpn, w.DestQPN), DstPort: wire.RoCEv2Port}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: w.DestQPN & 0xffffff, PSN: r.nextPSN}
	f.DETH = wire.DETHFields{QKey: w.QKey, SrcQP: qpn}
	f.Imm = w.Imm
	f.Payload = payload
	n.send(&f)
	r.nextPSN = r.nextPSN.Next()
	n.counters.RdmaSends.Add(1)
	return wcSuccess
}
