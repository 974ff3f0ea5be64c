package datapath

import (
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/reliability"
)

// completeResponse is the completer: it hands each ACK, NAK, READ response
// and atomic ACK to the QP's sender (package reliability), which decides
// what it means; the completer places READ data and atomic results, and
// completes, in order, the work requests the sender has retired.
func (n *engine) completeResponse(qpn uint32, p *wire.Packet, q *host.QPCEntry) {
	if !q.Valid {
		n.counters.RcvdUnknownQP.Add(1)
		return
	}
	r := &n.qps[qpn]
	if q.Type != host.QPTRC || !r.sndStarted || r.errored {
		return // nothing was sent that could be answered
	}
	defer n.senderStats(r)
	now := n.clock()
	psn := p.BTH().PSN()
	var v reliability.Verdict
	switch p.Opcode {
	case wire.RCAtomicAcknowledge:
		v = n.atomicData(qpn, q, r, p, psn, now)
	case wire.RCAcknowledge:
		switch s := p.AETH().Syndrome(); {
		case s.IsACK():
			if v = r.snd.OnAck(psn, now); v == reliability.Accepted {
				r.snd.OnCredits(psn, s.Value())
			}
		case s.IsRNRNAK():
			if v = r.snd.OnRNR(psn, s.Value(), now); v != reliability.Ignored {
				n.counters.RcvdRNRErr.Add(1)
			}
			if v == reliability.Failed {
				n.counters.RetryRNRExceededErr.Add(1)
			}
		case s.IsNAK():
			if v = r.snd.OnNAK(psn, s.Value(), now); v == reliability.Accepted {
				n.counters.RcvdSeqErr.Add(1)
				n.counters.Retransmits.Add(1)
			}
		}
	default:
		v = n.readData(qpn, q, r, p, psn, now)
	}
	switch v {
	case reliability.Failed:
		n.failed(qpn, q, r)
	case reliability.Accepted:
		n.retire(qpn, q, r)
		if !r.snd.Waiting() {
			n.request(qpn)
		}
	}
}

// readData places a READ response where the sender says it belongs. A
// response that does not fit its place in the READ (a short ONLY for a
// long READ, say) is dropped and the timer asks again; it never completes
// the READ with data missing.
func (n *engine) readData(qpn uint32, q *host.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, now time.Time) reliability.Verdict {
	e, k, ok := r.snd.ReadSlot(psn, now)
	if !ok {
		// Not placed, but it may have acknowledged the requests before
		// its READ or asked for a gap again: the caller retires and
		// sends. The sender counted what it ignored.
		if r.snd.Resending() {
			n.counters.Retransmits.Add(1)
		}
		return reliability.Accepted
	}
	in := r.inflightOf(e.WQE)
	mtu := pmtu(q)
	last := p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0
	// With selective repeat the answer to a request for a READ's missing
	// responses ends where that range ends: its LAST may come early.
	early := last && q.Flags&host.QPFlagSelectiveRepeat != 0
	if in == nil || len(p.Payload()) != segmentLen(int(in.length), int(k), mtu) || last != (int(k) == in.packets-1) && !early {
		n.counters.RcvdBadResponse.Add(1)
		return reliability.Accepted
	}
	if !n.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)], k*uint32(mtu), p.Payload()) {
		n.local(qpn, q, r, host.WCLocProtErr)
		return reliability.Accepted
	}
	r.snd.ReadPlaced(e, psn, int(k) == in.packets-1, now)
	return reliability.Accepted
}

// atomicData places an atomic's original value and completes it.
func (n *engine) atomicData(qpn uint32, q *host.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, now time.Time) reliability.Verdict {
	e, ok := r.snd.AtomicSlot(psn)
	if !ok {
		return reliability.Ignored
	}
	in := r.inflightOf(e.WQE)
	if in == nil {
		return reliability.Ignored
	}
	var orig [8]byte
	le.PutUint64(orig[:], p.AtomicAckETH().OrigData())
	if !n.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)], 0, orig[:]) {
		n.local(qpn, q, r, host.WCLocProtErr)
		return reliability.Accepted
	}
	r.snd.AtomicPlaced(e, now)
	return reliability.Accepted
}

// retire completes, in order, the in-flight work requests the sender has
// retired: every one whose PSNs all lie before its oldest unacknowledged
// PSN (a READ or atomic only once its answer has come: the sender does not
// move past it before).
func (n *engine) retire(qpn uint32, q *host.QPCEntry, r *qpRun) {
	una := r.snd.Una()
	for r.ifN > 0 && r.sendIdx > 0 {
		in := &r.inflight[r.ifHead]
		if !in.started || !in.lastPSN.Before(una) {
			break
		}
		n.finish(qpn, q, in, host.WCSuccess)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
		r.sendIdx--
	}
}

// failed handles a sender that failed the QP (a NAK, retries exhausted):
// what it retired before completes; the oldest work request left
// completes with the sender's status, and the rest are flushed.
func (n *engine) failed(qpn uint32, q *host.QPCEntry, r *qpRun) {
	n.retire(qpn, q, r)
	_, status := r.snd.Failed()
	n.fail(qpn, q, r, status)
}

// local fails a QP for a local error (the requester's own memory).
func (n *engine) local(qpn uint32, q *host.QPCEntry, r *qpRun, status uint8) {
	r.snd.Fail(status)
	n.failed(qpn, q, r)
}

// fail completes the oldest in-flight work request with status, moves the
// QP to the error state and flushes everything else.
func (n *engine) fail(qpn uint32, q *host.QPCEntry, r *qpRun, status uint8) {
	r.errored = true
	n.hpuReset(qpn, r)
	r.snd.Fail(status)
	for first := true; r.ifN > 0; first = false {
		in := &r.inflight[r.ifHead]
		in.signaled = true // errors always complete
		st := status
		if !first {
			st = host.WCWRFlushErr
		}
		n.finish(qpn, q, in, st)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
	}
	r.sendIdx, r.sendPkt = 0, 0
	for r.sqConsumer != r.sqProducer && q.SQSize != 0 {
		addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*host.SendWQESize
		in := inflight{signaled: true, index: r.sqConsumer}
		r.sqConsumer++
		if n.cfg.DMA.Read(addr, n.wqe[:]) != nil {
			continue
		}
		in.wqe.Decode(n.wqe[:])
		n.finish(qpn, q, &in, host.WCWRFlushErr)
	}
}

// senderStats adds what a QP's sender counted since last time to the
// NIC's counters.
func (n *engine) senderStats(r *qpRun) {
	s := r.snd.Stats()
	n.counters.ReplayStalls.Add(s.Stalls - r.seen.Stalls)
	n.counters.ReplayStalledNs.Add(uint64(s.Stalled - r.seen.Stalled))
	n.counters.RetransmittedPkts.Add(s.Retransmitted - r.seen.Retransmitted)
	n.counters.LocalACKTimeouts.Add(s.Timeouts - r.seen.Timeouts)
	n.counters.RcvdStaleResponse.Add(s.Stale - r.seen.Stale)
	n.counters.CreditWaits.Add(s.CreditWaits - r.seen.CreditWaits)
	r.seen = s
}
