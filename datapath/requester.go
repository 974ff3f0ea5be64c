package datapath

import (
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// resendBurst is how many packets a QP sends again per engine pass: a
// go-back-N restart is paced over several passes instead of flooding the
// path with the whole window at once.
const resendBurst = 16

// request is the requester: it fetches the WQEs posted to a QP's send
// queue through the DMA engine, segments them by the path MTU, and sends
// their packets through the reliability gate: on RC a packet goes out
// only when the QP's sender (package reliability) admits it into a free
// replay entry, and retransmissions the sender asks for go first. A
// packet is never kept: a retransmission gathers its payload again from
// host memory (the replay entry is the WQE, the offset and the PSN, not
// the bytes).
func (e *engine) request(qpn uint32) {
	r := &e.qps[qpn]
	if r.sqWaiting {
		return // goes on when the context it waits for comes
	}
	var q hostmem.QPCEntry
	if hit, ok := e.resolveQPC(qpn, &q); !hit || !ok || q.State != ibv.QPSRTS || q.SQSize == 0 {
		return
	}
	if q.Type != ibv.QPTRC {
		e.unreliablePost = true // what it sends is not held for the next call (holdPosts)
	}
	if q.Type == ibv.QPTRC && !r.sndStarted && r.alloc.Len() == 0 {
		// A QP the host did not open (OpenQP) takes the default allocation.
		if err := e.openQP(qpn, r, 0, &q); err != nil {
			r.startSender(&q, e.cfg, &e.path)
			e.fail(qpn, &q, r, ibv.WCLocQPOpErr)
			return
		}
	}
	r.startSender(&q, e.cfg, &e.path)
	r.sizeInflight(q.SQSize)
	if r.errored { // a QP in error flushes what is posted to it
		e.fail(qpn, &q, r, ibv.WCWRFlushErr)
		return
	}
	if r.dmaFault { // a read of its WQEs or payload failed in host memory (dmastage.go)
		r.dmaFault = false
		e.local(qpn, &q, r, ibv.WCLocProtErr)
		return
	}
	defer e.senderStats(r)
	mtu := pmtu(&q)
	now := e.clock()
	if q.Type == ibv.QPTRC && !e.resend(qpn, &q, r, mtu, now) {
		return
	}
	for !r.errored {
		if r.sendIdx == r.ifN && r.ifN < len(r.inflight) && e.takeCmd(r, mtu) {
			// a handler's packet goes first: it answers a request already here
		} else if r.sendIdx == r.ifN { // everything fetched is sent: take the next WQE
			if r.sqConsumer == r.sqProducer || r.ifN == len(r.inflight) {
				return
			}
			var in inflight
			if !e.nextWQE(qpn, &q, r, &in.wqe) {
				return // its WQEs are being fetched: the requester runs again when they come
			}
			in.index = r.sqConsumer
			r.sqConsumer++
			for _, s := range in.wqe.SGE[:min(int(in.wqe.NumSGE), hostmem.MaxSendSGE)] {
				in.length += s.Length
			}
			if in.wqe.InlineLen > 0 {
				in.length = in.wqe.InlineLen
			}
			in.signaled = in.wqe.Flags&ibv.SendSignaled != 0
			if q.Type == ibv.QPTUD { // one datagram, completed once sent
				e.finish(qpn, &q, &in, e.sendUD(qpn, &q, r, &in, mtu))
				continue
			}
			in.packets = max(1, (int(in.length)+mtu-1)/mtu)
			if isAtomic(in.wqe.Opcode) {
				in.packets, in.length = 1, 8
			}
			in.chunk = e.readChunk()
			if !supported(in.wqe.Opcode) || q.Type == ibv.QPTUC && (in.wqe.Opcode == ibv.WRRDMARead || isAtomic(in.wqe.Opcode)) {
				in.signaled = true
				e.track(r, in)
				e.fail(qpn, &q, r, ibv.WCLocQPOpErr)
				return
			}
			e.track(r, in)
		}
		in := &r.inflight[(r.ifHead+r.sendIdx)%len(r.inflight)]
		k := r.sendPkt
		var ent reliability.Entry
		if q.Type == ibv.QPTRC {
			if !e.room(qpn, r, answers(in, k)) {
				return // its answers would not fit in the port: it goes when others' have come
			}
			// The transmit gate: the packet may go, or the sender says
			// why not (no replay entry free, the window, pacing, the
			// READ/atomic limit, an RNR wait, credits). It is asked
			// before the packet's memory is resolved, so a held packet
			// costs no lookups.
			ent = entryOf(&q, in, k, mtu)
			if g := r.snd.Ask(ent, now); g.Hold != reliability.Go {
				if g.Hold == reliability.HoldPacing {
					e.laterAt(qpn, r, g.Again) // the engine comes back to it then
				}
				return
			}
		}
		if in.wqe.Opcode != ibv.WRRDMARead && !isAtomic(in.wqe.Opcode) && in.cmd == 0 &&
			e.gatherMiss(qpn, &in.wqe, uint32(k*mtu)) {
			r.sqWaiting = true
			e.counters.SendWaits.Add(1)
			return
		}
		ackReq := false
		if q.Type == ibv.QPTRC {
			psn, ack := r.snd.Admit(ent, now)
			ackReq = ack
			if k == 0 {
				in.firstPSN, in.started = psn, true
				in.lastPSN = psn.Add(uint32(in.packets - 1))
			}
			e.timeQP(qpn, r)
			e.answersAwaited(r)
		} else if k == 0 { // UC
			in.firstPSN, in.started = r.psn, true
			in.lastPSN = r.psn.Add(uint32(in.packets - 1))
			r.psn = in.lastPSN.Next()
		}
		from, until := k, 0
		if in.wqe.Opcode == ibv.WRRDMARead { // request k asks for one chunk of the READ
			from = k * in.chunk
			until = from + readSpan(in, k)
		}
		if !e.sendPacket(qpn, &q, r, in, from, until, mtu, ackReq) {
			e.fail(qpn, &q, r, ibv.WCLocProtErr)
			return
		}
		if r.sendPkt++; r.sendPkt == in.packets || in.wqe.Opcode == ibv.WRRDMARead && r.sendPkt == readRequests(in) {
			r.sendIdx, r.sendPkt = r.sendIdx+1, 0
			if q.Type == ibv.QPTUC { // unreliable: complete as soon as it is sent
				e.finish(qpn, &q, in, ibv.WCSuccess)
				r.ifHead = (r.ifHead + 1) % len(r.inflight)
				r.ifN--
				r.sendIdx--
			}
		}
	}
}

// resend sends up to resendBurst of the retransmissions a QP's sender
// asks for, and reports whether none is left (new packets may follow).
// A QP with more left goes on the engine's list and continues next pass.
func (e *engine) resend(qpn uint32, q *hostmem.QPCEntry, r *qpRun, mtu int, now time.Time) bool {
	for range resendBurst {
		ent, from, ok := r.snd.Resend(now)
		if !ok {
			break
		}
		in := r.inflightOf(ent.WQE) // the sender holds its entry: still in flight
		if in == nil || !in.started {
			r.snd.Resent(now)
			continue
		}
		k := int(from.Diff(in.firstPSN))
		until := 0
		if ent.Kind == reliability.Read {
			until = int(r.snd.ResendUntil(ent).Diff(in.firstPSN))
		}
		if !e.sendPacket(qpn, q, r, in, k, until, mtu, ent.AckReq) {
			e.fail(qpn, q, r, ibv.WCLocProtErr)
			return false
		}
		r.snd.Resent(now)
	}
	if r.snd.Resending() {
		e.later(qpn, r)
		return false
	}
	return true
}

// inflightOf returns the in-flight work request numbered idx, or nil.
func (r *qpRun) inflightOf(idx uint32) *inflight {
	if r.ifN == 0 {
		return nil
	}
	i := int(idx - r.inflight[r.ifHead].seq)
	if i < 0 || i >= r.ifN {
		return nil
	}
	return &r.inflight[(r.ifHead+i)%len(r.inflight)]
}

// kindOf is what retires a packet of a work request of opcode op.
func kindOf(op ibv.WROpcode) reliability.Kind {
	switch {
	case op == ibv.WRRDMARead:
		return reliability.Read
	case isAtomic(op):
		return reliability.Atomic
	}
	return reliability.Data
}

// entryOf is the replay entry of packet k of an in-flight message: where
// its payload comes from, never the payload.
func entryOf(q *hostmem.QPCEntry, in *inflight, k, mtu int) reliability.Entry {
	e := reliability.Entry{WQE: in.seq, Kind: kindOf(in.wqe.Opcode), Span: 1}
	switch e.Kind {
	case reliability.Read: // request k: one chunk of the READ
		e.Span, e.Opcode = uint32(readSpan(in, k)), wire.RCRDMAReadRequest
		e.Offset = uint32(min(k*in.chunk*mtu, int(in.length)))
		e.Length = min(in.length-e.Offset, e.Span*uint32(mtu))
	case reliability.Atomic:
		e.Opcode = wire.RCFetchAdd
		if in.wqe.Opcode == ibv.WRAtomicCmpAndSwp {
			e.Opcode = wire.RCCompareSwap
		}
	default:
		e.Offset, e.Length = uint32(k*mtu), uint32(segmentLen(int(in.length), k, mtu))
		e.Opcode = packetOp(q, in.wqe.Opcode, k, in.packets)
		e.AckReq = k == in.packets-1
		e.Consumes = consumes(in, k)
		e.Placeable = e.Opcode == wire.RCRDMAWriteOnly && selectiveWrite(q, in.wqe.Opcode)
	}
	return e
}

// selectiveWrite reports whether a work request of opcode op on QP q is
// a WRITE sent for selective repeat: every packet a WRITE_ONLY with its
// own RETH, which the peer places even ahead of order (the last one of a
// WRITE_WITH_IMM a WRITE_ONLY_WITH_IMMEDIATE, taken in order). The frames
// are standard RoCEv2; only a peer that enabled selective repeat too
// places them ahead of order.
func selectiveWrite(q *hostmem.QPCEntry, op ibv.WROpcode) bool {
	return q.Type == ibv.QPTRC && q.Flags&hostmem.QPFlagSelectiveRepeat != 0 &&
		(op == ibv.WRRDMAWrite || op == ibv.WRRDMAWriteWithImm)
}

// packetOp is the opcode of packet k of a message of a work request of
// opcode op.
func packetOp(q *hostmem.QPCEntry, op ibv.WROpcode, k, packets int) wire.Opcode {
	if selectiveWrite(q, op) {
		if op == ibv.WRRDMAWriteWithImm && k == packets-1 {
			return wire.RCRDMAWriteOnlyWithImmediate
		}
		return wire.RCRDMAWriteOnly
	}
	o := opsOf(op).at(k, packets)
	if q.Type == ibv.QPTUC {
		o |= wire.Opcode(wire.TransportUC)
	}
	return o
}

// consumes reports whether packet k of a message takes a receive WQE at
// the responder: a SEND's first, a WRITE_WITH_IMM's last.
func consumes(in *inflight, k int) bool {
	switch in.wqe.Opcode {
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRSendWithInv:
		return k == 0
	case ibv.WRRDMAWriteWithImm:
		return k == in.packets-1
	}
	return false
}

func isAtomic(op ibv.WROpcode) bool {
	return op == ibv.WRAtomicCmpAndSwp || op == ibv.WRAtomicFetchAdd
}

func supported(op ibv.WROpcode) bool {
	switch op {
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRSendWithInv, ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm, ibv.WRRDMARead, ibv.WRAtomicCmpAndSwp, ibv.WRAtomicFetchAdd:
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

func opsOf(op ibv.WROpcode) msgOps {
	switch op {
	case ibv.WRSendWithImm:
		return opsSendImm
	case ibv.WRSendWithInv:
		return opsSendInv
	case ibv.WRRDMAWrite:
		return opsWrite
	case ibv.WRRDMAWriteWithImm:
		return opsWriteImm
	}
	return opsSend
}

// sendPacket sends packet k of an in-flight message, gathering its payload
// from the WQE's scatter/gather list. It reports false on a local
// protection error.
// A READ request with k > 0 asks for the rest of the READ from packet k,
// or with until > k only up to packet until (exclusive): a selective
// request for missing responses.
func (e *engine) sendPacket(qpn uint32, q *hostmem.QPCEntry, r *qpRun, in *inflight, k, until, mtu int, ackReq bool) bool {
	w := &in.wqe
	var f wire.FrameFields
	if w.Opcode == ibv.WRRDMARead {
		// k > 0 is a partial retry: the rest of the READ from packet k on,
		// as rxe asks for it.
		off := min(uint32(k*mtu), in.length)
		length := in.length - off
		if until > k {
			length = min(length, uint32((until-k)*mtu))
		}
		e.frameTo(&f, q, wire.RCRDMAReadRequest, in.firstPSN.Add(uint32(k)))
		f.BTH.AckReq = true
		f.RETH = wire.RETHFields{VA: w.RemoteAddr + uint64(off), RKey: w.RKey, DMALen: length}
		e.send(&f)
		return true
	}
	if isAtomic(w.Opcode) {
		op := wire.RCCompareSwap
		if w.Opcode == ibv.WRAtomicFetchAdd {
			op = wire.RCFetchAdd
		}
		e.frameTo(&f, q, op, in.firstPSN)
		f.BTH.AckReq = true
		f.AtomicETH = wire.AtomicETHFields{VA: w.RemoteAddr, RKey: w.RKey, SwapAdd: w.SwapAdd, Compare: w.Compare}
		e.send(&f)
		return true
	}
	op := packetOp(q, w.Opcode, k, in.packets)
	e.frameTo(&f, q, op, in.firstPSN.Add(uint32(k)))
	// The payload is gathered straight into the transmit buffer: no
	// staging copy.
	buf := e.txBuffer()
	off := wire.PayloadOffset(&f)
	plen := segmentLen(int(in.length), k, mtu)
	if off+plen > len(buf) {
		e.releaseTX()
		e.counters.SendErr.Add(1)
		return true // a path MTU larger than the port's frames: the packet is lost, and sent again
	}
	payload := buf[off : off+plen]
	if in.cmd != 0 {
		copy(payload, e.cmdPayload(in.cmd)[k*mtu:])
	} else {
		// Behind a PCIe model the payload's reads are issued and the
		// frame waits for them, staged (dmastage.go): the engine goes on.
		var into *stagedFrame
		if plen > 0 && w.InlineLen == 0 && e.asyncDMA() {
			into = e.stage(qpn)
		}
		if !e.gather(q.PD, w, uint32(k*mtu), payload, into) {
			if into != nil {
				e.unstage()
			} else {
				e.releaseTX()
			}
			return false
		}
	}
	f.Payload = payload
	info := op.Info()
	if info.Has(wire.HdrRETH) {
		f.RETH = wire.RETHFields{VA: w.RemoteAddr, RKey: w.RKey, DMALen: in.length}
		if selectiveWrite(q, w.Opcode) { // each packet its own WRITE_ONLY
			f.RETH = wire.RETHFields{VA: w.RemoteAddr + uint64(k*mtu), RKey: w.RKey, DMALen: uint32(len(payload))}
		}
	}
	if info.Has(wire.HdrImmDt) {
		f.Imm = w.Imm
	}
	// IBV_SEND_SOLICITED: the SE bit on the message's last packet, which
	// is the one that completes a receive.
	f.BTH.SE = w.Flags&ibv.SendSolicited != 0 && k == in.packets-1 && (w.Opcode == ibv.WRSend || w.Opcode == ibv.WRSendWithImm || w.Opcode == ibv.WRSendWithInv || w.Opcode == ibv.WRRDMAWriteWithImm)
	if info.Has(wire.HdrIETH) {
		f.InvalidateRKey = w.Imm
	}
	// RC asks for an ACK where its sender says: at a message's end and
	// often enough to keep replay entries coming free.
	f.BTH.AckReq = q.Type != ibv.QPTUC && ackReq
	e.commit(buf, &f)
	return true
}

// track records a message as in flight.
func (e *engine) track(r *qpRun, in inflight) {
	in.seq = r.ifSeq
	r.ifSeq++
	r.inflight[(r.ifHead+r.ifN)%len(r.inflight)] = in
	r.ifN++
}

// finish completes a send work request (if signaled, or on error).
func (e *engine) finish(qpn uint32, q *hostmem.QPCEntry, in *inflight, status ibv.WCStatus) {
	if in.cmd != 0 { // a handler's packet: no completion, its buffer back
		e.nic.releaseCmd(in.cmd)
		in.cmd = 0
		if status != ibv.WCSuccess && status != ibv.WCWRFlushErr {
			e.counters.HPUCommandsRefused.Add(1)
		}
		return
	}
	switch in.wqe.Opcode { // rxe's rdma_sends: SEND work requests completed
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRSendWithInv:
		if status != ibv.WCWRFlushErr {
			e.counters.RdmaSends.Add(1)
		}
	}
	if !in.signaled && status == ibv.WCSuccess {
		return
	}
	op := ibv.WCSend
	switch in.wqe.Opcode {
	case ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm:
		op = ibv.WCRDMAWrite
	case ibv.WRRDMARead:
		op = ibv.WCRDMARead
	case ibv.WRAtomicCmpAndSwp:
		op = ibv.WCCompSwap
	case ibv.WRAtomicFetchAdd:
		op = ibv.WCFetchAdd
	}
	c := hostmem.CQE{WRID: in.wqe.WRID, Status: status, Opcode: op, ByteLen: in.length, QPN: qpn, WQEIndex: in.index}
	if q.Type != ibv.QPTRC && status == ibv.WCSuccess {
		e.completeSent(q.SendCQ, &c)
		return
	}
	e.complete(q.SendCQ, &c)
}

// completeSent writes the completion of an unreliable send (UD, UC) once
// its frames have left: they may still wait in the engine's transmit
// batch (or for their payload's DMA), and a program that saw the
// completion may leave at once, taking the NIC and the frames with it
// (mckey's sender did, its datagrams never sent). The completions wait,
// in order, for the end of the next flushTX that leaves nothing behind.
func (e *engine) completeSent(cqn uint32, c *hostmem.CQE) {
	if e.txIdle() {
		e.complete(cqn, c)
		return
	}
	if e.sentN == len(e.sent) {
		e.flushTX()
	}
	if e.sentN == len(e.sent) { // frames wait for their payloads: they go soon
		e.complete(cqn, c)
		return
	}
	e.sent[e.sentN] = pendingCQE{cqn: cqn, cqe: *c}
	e.sentN++
}

// txIdle reports whether no frame waits to be handed to the port: none
// in the transmit batch, none staged for its payload's DMA.
func (e *engine) txIdle() bool { return e.txN == 0 && e.dma.stagedN == 0 && e.dma.staging == nil }

// completeSents writes the completions completeSent held, once nothing
// waits to be sent.
func (e *engine) completeSents() {
	if e.sentN == 0 || !e.txIdle() {
		return
	}
	for i := range e.sent[:e.sentN] {
		e.complete(e.sent[i].cqn, &e.sent[i].cqe)
	}
	e.sentN = 0
}

// sendUD sends a UD work request as one datagram to the address vector it
// carries, and returns its completion status.
func (e *engine) sendUD(qpn uint32, q *hostmem.QPCEntry, r *qpRun, in *inflight, mtu int) ibv.WCStatus {
	w := &in.wqe
	op := wire.UDSendOnly
	switch {
	case w.Opcode == ibv.WRSendWithImm:
		op = wire.UDSendOnlyWithImmediate
	case w.Opcode != ibv.WRSend || !w.HasAV:
		return ibv.WCLocQPOpErr
	}
	if int(in.length) > mtu {
		return ibv.WCLocLenErr
	}
	payload := e.payload[:in.length]
	if !e.gather(q.PD, w, 0, payload, nil) {
		return ibv.WCLocProtErr
	}
	var f wire.FrameFields
	dst := gidAddr(w.DestGID)
	f.Ethernet = wire.EthernetFields{Dst: wire.MAC(w.DestMAC), Src: e.cfg.MAC}
	if dst.Is4() {
		f.IP4 = wire.IPv4Fields{TOS: dscp(w.TClass), Flags: wire.IPv4FlagDF, TTL: 64, Src: e.nic.src.ip4, Dst: dst}
	} else {
		f.IPv6 = true
		f.IP6 = wire.IPv6Fields{TrafficClass: dscp(w.TClass), HopLimit: 64, Src: e.nic.src.forDst(dst), Dst: dst}
	}
	f.UDP = wire.UDPFields{SrcPort: wire.SourcePort(qpn, w.DestQPN), DstPort: wire.RoCEv2Port}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: w.DestQPN & 0xffffff, PSN: r.psn, SE: w.Flags&ibv.SendSolicited != 0}
	f.DETH = wire.DETHFields{QKey: w.QKey, SrcQP: qpn}
	f.Imm = w.Imm
	f.Payload = payload
	e.send(&f)
	r.psn = r.psn.Next()
	return ibv.WCSuccess
}

// maxReadChunk bounds the response packets one READ request asks for.
const maxReadChunk = 256

// readChunk is how many response packets a READ request of this engine
// asks for: a READ longer than that goes as several requests, one after
// another on the wire (each its own READ to the responder, PSNs in
// sequence), so that what its QP awaits stays within the port's
// receive capacity (room) however long the READ.
func (e *engine) readChunk() int { return max(1, min(e.awaitCap/2, maxReadChunk)) }

// answers is how many packets request k of in may bring back: a READ
// request's responses, or an ACK.
func answers(in *inflight, k int) int {
	if in.wqe.Opcode == ibv.WRRDMARead {
		return readSpan(in, k)
	}
	return 1
}

// readRequests is the number of READ requests in.packets responses take.
func readRequests(in *inflight) int { return (in.packets + in.chunk - 1) / in.chunk }

// readSpan is the number of responses READ request k of in asks for.
func readSpan(in *inflight, k int) int { return min(in.chunk, in.packets-k*in.chunk) }

// room reports whether a request that may bring span answers (a READ
// request's responses; an ACK for any other packet) may go: the answers
// the engine's QPs await, with these, fit in its budget, half what the
// port can take in (or nothing is awaited). However many QPs send at
// once, what they asked for cannot overrun their own port: the peer's
// ACKs and responses are never lost at the receive ring for want of
// room. If it does not fit, the QP waits on the engine's list until
// enough have come (answersAwaited), counted in room_waits.
func (e *engine) room(qpn uint32, r *qpRun, span int) bool {
	if e.awaitOut == 0 || e.awaitOut+span <= e.awaitCap {
		return true
	}
	if !r.roomWait {
		r.roomWait = true
		e.roomWaiters = append(e.roomWaiters, qpn)
		e.counters.RoomWaits.Add(1)
	}
	return false
}

// answersAwaited brings the engine's count of awaited answers up to date
// with QP r's sender (Awaited) after anything that may have changed it
// (a request, an ACK, a response, a timeout, a failure or a reset) and,
// once half the budget is free, lets the QPs that waited for room go, in
// order.
func (e *engine) answersAwaited(r *qpRun) {
	n := 0
	if r.sndStarted {
		n = r.snd.Awaited()
	}
	if n == r.awaitOut {
		return
	}
	e.awaitOut += n - r.awaitOut
	r.awaitOut = n
	if len(e.roomWaiters) == 0 || e.awaitOut > e.awaitCap/2 {
		return
	}
	for i := len(e.roomWaiters) - 1; i >= 0; i-- { // sqReady is taken from its end
		qpn := e.roomWaiters[i]
		e.qps[qpn].roomWait = false
		e.sqReady = append(e.sqReady, qpn)
	}
	e.roomWaiters = e.roomWaiters[:0]
}
