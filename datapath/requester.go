package datapath

import (
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// request sends the WQEs posted to a QP's send queue since the last call:
// it fetches each through the DMA engine, segments it by the path MTU,
// assigns PSNs and asks for an ACK on each message's last packet.
func (n *NIC) request(qpn uint32) {
	var q host.QPCEntry
	if !n.qpc(qpn, &q) || q.State != qpsRTS || q.SQSize == 0 {
		return
	}
	r := &n.qps[qpn]
	r.start(&q)
	for r.sqConsumer != r.sqProducer && r.ifN < len(r.inflight) && !r.errored {
		addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*host.SendWQESize
		if n.cfg.DMA.Read(addr, n.wqe[:]) != nil {
			return
		}
		var w host.SendWQE
		w.Decode(n.wqe[:])
		r.sqConsumer++
		n.sendMessage(qpn, &q, r, &w)
	}
}

// opcodes of a message: first, middle, last and only packets.
type msgOps struct{ first, middle, last, only wire.Opcode }

var (
	opsSend     = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly}
	opsSendImm  = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithImmediate, wire.RCSendOnlyWithImmediate}
	opsSendInv  = msgOps{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithInvalidate, wire.RCSendOnlyWithInvalidate}
	opsWrite    = msgOps{wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly}
	opsWriteImm = msgOps{wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLastWithImmediate, wire.RCRDMAWriteOnlyWithImmediate}
)

// sendMessage sends one work request's packets and records it as in flight.
func (n *NIC) sendMessage(qpn uint32, q *host.QPCEntry, r *qpRun, w *host.SendWQE) {
	var total uint32
	for _, s := range w.SGE[:min(int(w.NumSGE), host.MaxSendSGE)] {
		total += s.Length
	}
	in := inflight{wqe: *w, firstPSN: r.nextPSN, length: total, signaled: w.Flags&sendFlagSignald != 0}
	mtu := pmtu(q)
	var f wire.FrameFields
	if w.Opcode == wrRDMARead {
		packets := max(1, (int(total)+mtu-1)/mtu)
		n.frameTo(&f, q, wire.RCRDMAReadRequest, r.nextPSN)
		f.BTH.AckReq = true
		f.RETH = wire.RETHFields{VA: w.RemoteAddr, RKey: w.RKey, DMALen: total}
		n.send(&f)
		in.lastPSN = r.nextPSN.Add(uint32(packets - 1))
		r.nextPSN = r.nextPSN.Add(uint32(packets))
		n.track(r, in)
		return
	}
	var ops msgOps
	switch w.Opcode {
	case wrSend:
		ops = opsSend
	case wrSendImm:
		ops = opsSendImm
	case wrSendInv:
		ops = opsSendInv
	case wrRDMAWrite:
		ops = opsWrite
	case wrRDMAWriteImm:
		ops = opsWriteImm
	default:
		n.finish(qpn, q, &in, wcLocProtErr) // not supported yet: refused, not lost
		return
	}
	packets := max(1, (int(total)+mtu-1)/mtu)
	sge, sgeOff := 0, uint32(0)
	for p := range packets {
		op := ops.middle
		switch {
		case packets == 1:
			op = ops.only
		case p == 0:
			op = ops.first
		case p == packets-1:
			op = ops.last
		}
		n.frameTo(&f, q, op, r.nextPSN)
		size := min(int(total)-p*mtu, mtu)
		if size < 0 {
			size = 0
		}
		payload := n.payload[:size]
		// Gather this packet's bytes from the scatter/gather list.
		for got := 0; got < size; {
			s := w.SGE[sge]
			take := min(uint32(size-got), s.Length-sgeOff)
			if !n.memory(s.LKey, q.PD, s.Addr+uint64(sgeOff), payload[got:got+int(take)], 0, false) {
				n.finish(qpn, q, &in, wcLocProtErr)
				r.errored = true
				return
			}
			got += int(take)
			if sgeOff += take; sgeOff == s.Length {
				sge, sgeOff = sge+1, 0
			}
		}
		f.Payload = payload
		info := op.Info()
		if info.Has(wire.HdrRETH) {
			f.RETH = wire.RETHFields{VA: w.RemoteAddr, RKey: w.RKey, DMALen: total}
		}
		if info.Has(wire.HdrImmDt) {
			f.Imm = w.Imm
		}
		if info.Has(wire.HdrIETH) {
			f.InvalidateRKey = w.Imm
		}
		f.BTH.AckReq = p == packets-1
		n.send(&f)
		r.nextPSN = r.nextPSN.Next()
		if w.Opcode == wrSend || w.Opcode == wrSendImm || w.Opcode == wrSendInv {
			n.counters.RdmaSends.Add(1)
		}
	}
	in.lastPSN = r.nextPSN.Sub(1)
	n.track(r, in)
}

// track records a sent message as in flight.
func (n *NIC) track(r *qpRun, in inflight) {
	r.inflight[(r.ifHead+r.ifN)%len(r.inflight)] = in
	r.ifN++
}

// finish completes a send work request (if signaled, or on error).
func (n *NIC) finish(qpn uint32, q *host.QPCEntry, in *inflight, status uint8) {
	if !in.signaled && status == wcSuccess {
		return
	}
	op := uint8(wcSend)
	switch in.wqe.Opcode {
	case wrRDMAWrite, wrRDMAWriteImm:
		op = wcRDMAWrite
	case wrRDMARead:
		op = wcRDMARead
	}
	c := host.CQE{WRID: in.wqe.WRID, Status: status, Opcode: op, ByteLen: in.length, QPN: qpn}
	n.complete(q.SendCQ, &c)
}
