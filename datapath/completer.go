package datapath

import (
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// completeResponse is the completer: ACKs retire the work requests they
// cover, in order; READ responses place their data; a PSN sequence NAK or
// a gap restarts transmission from the missing PSN (go-back-N); an RNR NAK
// pauses the QP for the timer it carries; other NAKs complete the work
// request in error and flush the rest.
func (n *engine) completeResponse(qpn uint32, p *wire.Packet, q *host.QPCEntry) {
	if !q.Valid {
		n.counters.RcvdUnknownQP.Add(1)
		return
	}
	r := &n.qps[qpn]
	if r.ifN == 0 || r.errored {
		return // nothing in flight: a duplicate
	}
	psn := p.BTH().PSN()
	if psn.After(r.sentMax) {
		n.counters.RcvdStaleResponse.Add(1) // answers a PSN never sent: ignore
		return
	}
	// A NAK, RNR NAK, READ response or atomic ACK for a PSN older than the
	// oldest unacknowledged one answers nothing outstanding (a delayed
	// copy, or forged): it is ignored, as rxe ignores it. An ACK behind
	// the window retires nothing and may pass.
	if psn.Before(r.una) && (p.Opcode != wire.RCAcknowledge || !p.AETH().Syndrome().IsACK()) {
		n.counters.RcvdStaleResponse.Add(1)
		return
	}
	if p.Opcode == wire.RCAtomicAcknowledge {
		n.atomicData(qpn, q, r, p, psn)
		return
	}
	if p.Opcode != wire.RCAcknowledge {
		n.readData(qpn, q, r, p, psn)
		return
	}
	s := p.AETH().Syndrome()
	switch {
	case s.IsACK():
		n.retire(qpn, q, r, psn)
	case s.IsNAK() && s.Value() == wire.NAKPSNSequenceError:
		n.counters.RcvdSeqErr.Add(1)
		n.retire(qpn, q, r, psn.Sub(1))
		n.counters.Retransmits.Add(1)
		n.goBack(qpn, r, psn)
	case s.IsNAK():
		status := uint8(wcRemOpErr)
		switch s.Value() {
		case wire.NAKRemoteAccessError:
			status = wcRemAccessErr
		case wire.NAKInvalidRequest:
			status = wcRemInvReqErr
		}
		n.retire(qpn, q, r, psn.Sub(1))
		n.fail(qpn, q, r, status)
	case s.IsRNRNAK():
		n.counters.RcvdRNRErr.Add(1)
		n.retire(qpn, q, r, psn.Sub(1))
		if r.rnrRetries++; q.RNRRetry != 7 && r.rnrRetries > int(q.RNRRetry) {
			n.counters.RetryRNRExceededErr.Add(1)
			n.fail(qpn, q, r, wcRNRRetryExcEr)
			return
		}
		// Stop sending; the timer restarts from the refused PSN.
		n.goBackPaused(r, psn)
		r.rnrWait = true
		r.deadline = time.Now().Add(time.Duration(wire.RNRTimerMicros(s.Value())) * time.Microsecond)
		if !r.armed {
			r.armed = true
			n.timers = append(n.timers, qpn)
		}
	}
}

// readData places a READ response. Responses come in PSN order: one past
// a gap restarts the READ.
func (n *engine) readData(qpn uint32, q *host.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) {
	var in *inflight
	for i := range r.ifN {
		c := &r.inflight[(r.ifHead+i)%len(r.inflight)]
		if c.wqe.Opcode == wrRDMARead && !psn.Before(c.firstPSN) && !psn.After(c.lastPSN) {
			in = c
			break
		}
	}
	if in == nil || psn.Before(r.una) {
		return // a duplicate
	}
	n.retire(qpn, q, r, in.firstPSN.Sub(1)) // a response acknowledges every earlier request
	if psn != r.una {
		// Ask once for the rest from the gap on; later out-of-order
		// responses are stale copies of the first stream, not new gaps.
		// Only the timer asks again.
		if !r.gapAsked {
			r.gapAsked = true
			n.counters.Retransmits.Add(1)
			n.goBack(qpn, r, r.una)
		}
		return
	}
	// A response must fit its place in the READ: full packets, then the
	// rest, the end marked on the last. One that does not (a short ONLY
	// for a long READ, say) is dropped, and the timer asks again; it never
	// completes the READ with data missing.
	k, mtu := int(psn.Diff(in.firstPSN)), pmtu(q)
	if len(p.Payload()) != segmentLen(int(in.length), k, mtu) || (p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0) != (k == in.packets-1) {
		n.counters.RcvdBadResponse.Add(1)
		return
	}
	off := uint32(k * mtu)
	if !n.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)], off, p.Payload()) {
		n.fail(qpn, q, r, wcLocProtErr)
		return
	}
	r.una = psn.Next()
	r.retries = 0
	r.deadline = time.Now().Add(ackTimeout(q))
	if p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0 {
		in.completed = true
		r.gapAsked = false
		n.retire(qpn, q, r, psn)
	}
}

// atomicData places an atomic's original value and completes it.
func (n *engine) atomicData(qpn uint32, q *host.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) {
	for i := range r.ifN {
		in := &r.inflight[(r.ifHead+i)%len(r.inflight)]
		if !isAtomic(in.wqe.Opcode) || in.firstPSN != psn || in.completed {
			continue
		}
		n.retire(qpn, q, r, psn.Sub(1))
		var orig [8]byte
		le.PutUint64(orig[:], p.AtomicAckETH().OrigData())
		if !n.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), host.MaxSendSGE)], 0, orig[:]) {
			n.fail(qpn, q, r, wcLocProtErr)
			return
		}
		in.completed = true
		n.retire(qpn, q, r, psn)
		return
	}
}

// retire completes, in order, the in-flight work requests whose last PSN
// is at or before psn (a READ or atomic only once its answer has come, and
// then whatever psn says: one answered out of order retires as soon as
// the ones before it do), moves the unacknowledged mark, and lets the
// requester send again.
func (n *engine) retire(qpn uint32, q *host.QPCEntry, r *qpRun, psn wire.PSN) {
	progressed := false
	mark := psn.Next()
	for r.ifN > 0 {
		in := &r.inflight[r.ifHead]
		if in.wqe.Opcode == wrRDMARead || isAtomic(in.wqe.Opcode) {
			if !in.completed {
				break
			}
		} else if in.lastPSN.After(psn) {
			break
		}
		if end := in.lastPSN.Next(); end.After(mark) {
			mark = end
		}
		n.finish(qpn, q, in, wcSuccess)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
		if r.sendIdx > 0 {
			r.sendIdx--
		} else {
			r.sendPkt = 0 // a go-back-N resend of it is no longer needed
		}
		progressed = true
	}
	// An ACK does not acknowledge READ or atomic data: while one of those
	// heads the queue, only its responses move the mark (an ACK re-sent
	// for an old duplicate would otherwise skip data never received).
	if h := &r.inflight[r.ifHead]; r.ifN > 0 && (h.wqe.Opcode == wrRDMARead || isAtomic(h.wqe.Opcode)) && mark.After(h.firstPSN) {
		mark = h.firstPSN
	}
	if mark.After(r.una) {
		r.una = mark
		progressed = true
	}
	if progressed {
		r.retries, r.rnrRetries = 0, 0
		if r.ifN == 0 {
			r.deadline = time.Time{}
		} else {
			r.deadline = time.Now().Add(ackTimeout(q))
		}
	}
	if !r.rnrWait {
		n.request(qpn)
	}
}

// goBackPaused points the requester at psn without sending.
func (n *engine) goBackPaused(r *qpRun, psn wire.PSN) {
	for i := range r.ifN {
		in := &r.inflight[(r.ifHead+i)%len(r.inflight)]
		if !psn.Before(in.firstPSN) && !psn.After(in.lastPSN) {
			r.sendIdx, r.sendPkt = i, int(psn.Diff(in.firstPSN))
			return
		}
	}
}

// fail completes the oldest in-flight work request with status, moves the
// QP to the error state and flushes everything else.
func (n *engine) fail(qpn uint32, q *host.QPCEntry, r *qpRun, status uint8) {
	r.errored = true
	r.deadline = time.Time{}
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
	r.sendIdx, r.sendPkt = 0, 0
	for r.sqConsumer != r.sqProducer {
		addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*host.SendWQESize
		in := inflight{signaled: true, index: r.sqConsumer}
		r.sqConsumer++
		if n.cfg.DMA.Read(addr, n.wqe[:]) != nil {
			continue
		}
		in.wqe.Decode(n.wqe[:])
		n.finish(qpn, q, &in, wcWRFlushErr)
	}
}
