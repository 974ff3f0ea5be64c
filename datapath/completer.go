package datapath

import (
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// completeResponse is the completer: ACKs retire the work requests they
// cover, in order; READ responses place their data; NAKs complete the
// work request in error and flush the rest.
func (n *NIC) completeResponse(qpn uint32, p *wire.Packet) {
	var q host.QPCEntry
	if !n.qpc(qpn, &q) {
		n.counters.RcvdUnknownQP.Add(1)
		return
	}
	r := &n.qps[qpn]
	if r.ifN == 0 {
		return // nothing in flight: a duplicate
	}
	psn := p.BTH().PSN()
	switch p.Opcode {
	case wire.RCAcknowledge:
		s := p.AETH().Syndrome()
		switch {
		case s.IsACK():
			n.retire(qpn, &q, r, psn)
		case s.IsNAK():
			n.counters.RcvdSeqErr.Add(1)
			status := uint8(wcRemOpErr)
			switch s.Value() {
			case wire.NAKRemoteAccessError:
				status = wcRemAccessErr
			case wire.NAKInvalidRequest:
				status = wcRemInvReqErr
			}
			n.retire(qpn, &q, r, psn.Sub(1))
			n.fail(qpn, &q, r, status)
		default: // RNR NAK: retrying after the timer comes with the reliability work
			n.retire(qpn, &q, r, psn.Sub(1))
			n.fail(qpn, &q, r, 13) // IBV_WC_RNR_RETRY_EXC_ERR
		}
	default: // READ responses
		head := &r.inflight[r.ifHead]
		if head.wqe.Opcode != wrRDMARead || psn.Before(head.firstPSN) || psn.After(head.lastPSN) {
			return
		}
		off := uint32(psn.Diff(head.firstPSN)) * uint32(pmtu(&q))
		if !n.scatter(q.PD, head.wqe.SGE[:min(int(head.wqe.NumSGE), host.MaxSendSGE)], off, p.Payload()) {
			n.fail(qpn, &q, r, wcLocProtErr)
			return
		}
		if p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0 {
			head.completed = true
			n.retire(qpn, &q, r, psn)
		}
	}
}

// retire completes, in order, the in-flight work requests whose last PSN
// is at or before psn; a READ retires only once its data has come.
func (n *NIC) retire(qpn uint32, q *host.QPCEntry, r *qpRun, psn wire.PSN) {
	for r.ifN > 0 {
		in := &r.inflight[r.ifHead]
		if in.lastPSN.After(psn) || in.wqe.Opcode == wrRDMARead && !in.completed {
			return
		}
		n.finish(qpn, q, in, wcSuccess)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
	}
	if r.sqConsumer != r.sqProducer {
		n.request(qpn) // room in flight again
	}
}

// fail completes the oldest in-flight work request with status, moves the
// QP to the error state and flushes everything else.
func (n *NIC) fail(qpn uint32, q *host.QPCEntry, r *qpRun, status uint8) {
	r.errored = true
	for first := true; r.ifN > 0; first = false {
		in := &r.inflight[r.ifHead]
		in.signaled = true // errors always complete
		st := status
		if !first {
			st = wcWRFlushErr
		}
		n.finish(qpn, q, in, st)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
	}
	for r.sqConsumer != r.sqProducer {
		addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*host.SendWQESize
		r.sqConsumer++
		if n.cfg.DMA.Read(addr, n.wqe[:]) != nil {
			continue
		}
		in := inflight{signaled: true}
		in.wqe.Decode(n.wqe[:])
		n.finish(qpn, q, &in, wcWRFlushErr)
	}
}
