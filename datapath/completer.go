package datapath

import (
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// completeResponse is the completer: it hands each ACK, NAK, READ response
// and atomic ACK to the QP's sender (package reliability), which decides
// what it means; the completer places READ data and atomic results, and
// completes, in order, the work requests the sender has retired.
func (e *engine) completeResponse(qpn uint32, p *wire.Packet, q *hostmem.QPCEntry) {
	if !q.Valid {
		e.counters.RcvdUnknownQP.Add(1)
		return
	}
	r := &e.qps[qpn]
	if q.Type != ibv.QPTRC || !r.sndStarted || r.errored {
		return // nothing was sent that could be answered
	}
	defer e.senderStats(r)
	now := e.clock()
	if p.ECN() == wire.ECNCE {
		// An ACK or response that crossed a congested switch: its
		// sender's rate is cut as its requests' would be.
		e.notifyCongestion(q, r, now)
	}
	psn := p.BTH().PSN()
	var v reliability.Verdict
	switch p.Opcode {
	case wire.RCAtomicAcknowledge:
		v = e.atomicData(qpn, q, r, p, psn, now)
	case wire.RCAcknowledge:
		s := p.AETH().Syndrome()
		if s == wire.NAKSyndrome(wire.NAKPSNSequenceError) {
			// With selective repeat the NAK names a packet the peer
			// placed ahead (its MSN field); the sender ignores it
			// otherwise.
			r.snd.OnPlaced(psn, wire.PSN(p.AETH().MSN()), now)
		}
		v = r.snd.OnAETH(psn, s, now)
		switch {
		case s.IsRNRNAK() && v != reliability.Ignored:
			e.counters.RcvdRNRErr.Add(1)
			if v == reliability.Failed {
				e.counters.RetryRNRExceededErr.Add(1)
			}
		case s.IsNAK() && v == reliability.Accepted:
			e.counters.RcvdSeqErr.Add(1)
			if r.snd.Resending() {
				e.counters.Retransmits.Add(1)
			}
		}
	default:
		v = e.readData(qpn, q, r, p, psn, now)
	}
	switch v {
	case reliability.Failed:
		e.failed(qpn, q, r)
	case reliability.Accepted:
		e.retire(qpn, q, r)
		if !r.snd.Waiting() {
			e.request(qpn)
		}
	}
	e.timeQP(qpn, r) // the answer may have moved the sender's deadline (an RNR wait, an early timer)
}

// readData places a READ response where the sender says it belongs. A
// response that does not fit its place in the READ (a short ONLY for a
// long READ, say) is dropped and the timer asks again; it never completes
// the READ with data missing.
func (e *engine) readData(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, now time.Time) reliability.Verdict {
	ent, k, ok := r.snd.ReadSlot(psn, now)
	if !ok {
		// Not placed, but it may have acknowledged the requests before
		// its READ or asked for a gap again: the caller retires and
		// sends. The sender counted what it ignored.
		if r.snd.Resending() {
			e.counters.Retransmits.Add(1)
		}
		return reliability.Accepted
	}
	in := r.inflightOf(ent.WQE)
	mtu := pmtu(q)
	last := p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0
	// With selective repeat the answer to a request for a READ's missing
	// responses ends where that range ends: its LAST may come early.
	early := last && q.Flags&hostmem.QPFlagSelectiveRepeat != 0
	// k is the response's place in its request (one chunk of the READ,
	// requester.go's readChunk); i its place in the whole READ.
	end := k == ent.Span-1
	if in == nil || !in.started {
		e.counters.RcvdBadResponse.Add(1)
		return reliability.Accepted
	}
	i := responseIndex(in, psn)
	if len(p.Payload()) != segmentLen(int(in.length), i, mtu) || last != end && !early {
		e.counters.RcvdBadResponse.Add(1)
		return reliability.Accepted
	}
	if !e.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), hostmem.MaxSendSGE)], uint32(i*mtu), p.Payload()) {
		e.local(qpn, q, r, ibv.WCLocProtErr)
		return reliability.Accepted
	}
	r.snd.ReadPlaced(ent, psn, end, now)
	return reliability.Accepted
}

// atomicData places an atomic's original value and completes it.
func (e *engine) atomicData(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, now time.Time) reliability.Verdict {
	ent, ok := r.snd.AtomicSlot(psn)
	if !ok {
		return reliability.Ignored
	}
	in := r.inflightOf(ent.WQE)
	if in == nil {
		return reliability.Ignored
	}
	var orig [8]byte
	le.PutUint64(orig[:], p.AtomicAckETH().OrigData())
	if !e.scatter(q.PD, in.wqe.SGE[:min(int(in.wqe.NumSGE), hostmem.MaxSendSGE)], 0, orig[:]) {
		e.local(qpn, q, r, ibv.WCLocProtErr)
		return reliability.Accepted
	}
	r.snd.AtomicPlaced(ent, now)
	return reliability.Accepted
}

// retire completes, in order, the in-flight work requests the sender has
// retired: every one whose PSNs all lie before its oldest unacknowledged
// PSN (a READ or atomic only once its answer has come: the sender does not
// move past it before).
func (e *engine) retire(qpn uint32, q *hostmem.QPCEntry, r *qpRun) {
	una := r.snd.Una()
	for r.ifN > 0 && r.sendIdx > 0 {
		in := &r.inflight[r.ifHead]
		if !in.started || !in.lastPSN.Before(una) {
			break
		}
		e.finish(qpn, q, in, ibv.WCSuccess)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
		r.sendIdx--
	}
}

// failed handles a sender that failed the QP (a NAK, retries exhausted):
// what it retired before completes; the oldest work request left
// completes with the sender's status, and the rest are flushed.
func (e *engine) failed(qpn uint32, q *hostmem.QPCEntry, r *qpRun) {
	e.retire(qpn, q, r)
	_, status := r.snd.Failed()
	e.fail(qpn, q, r, status)
}

// local fails a QP for a local error (the requester's own memory).
func (e *engine) local(qpn uint32, q *hostmem.QPCEntry, r *qpRun, status ibv.WCStatus) {
	r.snd.Fail(status)
	e.failed(qpn, q, r)
}

// fail completes the oldest in-flight work request with status, moves the
// QP to the error state and flushes everything else.
func (e *engine) fail(qpn uint32, q *hostmem.QPCEntry, r *qpRun, status ibv.WCStatus) {
	r.errored = true
	e.hpuReset(qpn, r)
	r.snd.Fail(status)
	for first := true; r.ifN > 0; first = false {
		in := &r.inflight[r.ifHead]
		in.signaled = true // errors always complete
		st := status
		if !first {
			st = ibv.WCWRFlushErr
		}
		e.finish(qpn, q, in, st)
		r.ifHead = (r.ifHead + 1) % len(r.inflight)
		r.ifN--
	}
	r.sendIdx, r.sendPkt = 0, 0
	e.dropFetch(r) // the flush reads the WQEs again
	for r.sqConsumer != r.sqProducer && q.SQSize != 0 {
		addr := q.SQBase + uint64(r.sqConsumer%q.SQSize)*hostmem.SendWQESize
		in := inflight{signaled: true, index: r.sqConsumer}
		r.sqConsumer++
		if e.cfg.DMA.Read(addr, e.wqe[:]) != nil {
			continue
		}
		in.wqe.Decode(e.wqe[:])
		e.finish(qpn, q, &in, ibv.WCWRFlushErr)
	}
}

// senderStats adds what a QP's sender counted since last time to the
// NIC's counters.
func (e *engine) senderStats(r *qpRun) {
	g := r.snd.StatsGen()
	if g == r.seenGen {
		// Nothing to add (the usual case: no stall, no loss): neither
		// eight atomic adds of zero per packet nor a read of the QP's
		// counters (cold, with many QPs).
		e.answersAwaited(r)
		return
	}
	r.seenGen = g
	s := r.snd.TransportStats()
	addNonZero(&e.counters.ReplayStalls, s.Stalls-r.seen.Stalls)
	addNonZero(&e.counters.ReplayStalledNs, uint64(s.Stalled-r.seen.Stalled))
	addNonZero(&e.counters.RetransmittedPkts, s.Retransmitted-r.seen.Retransmitted)
	addNonZero(&e.counters.LocalACKTimeouts, s.Timeouts-r.seen.Timeouts)
	addNonZero(&e.counters.EarlyRetransmits, s.Early-r.seen.Early)
	addNonZero(&e.counters.RcvdStaleResponse, s.Stale-r.seen.Stale)
	addNonZero(&e.counters.CreditWaits, s.CreditWaits-r.seen.CreditWaits)
	addNonZero(&e.counters.RepairNAKs, s.NAKsOfRepair-r.seen.NAKsOfRepair)
	r.seen = s
	e.answersAwaited(r)
}

// addNonZero adds d to c unless it is 0 (an atomic add costs as much
// either way).
func addNonZero(c *atomic.Uint64, d uint64) {
	if d != 0 {
		c.Add(d)
	}
}

// responseIndex is the place in its READ of the response of psn: its
// packet's offset, in path MTUs, in the work request's scatter list.
func responseIndex(in *inflight, psn wire.PSN) int { return int(psn.Diff(in.firstPSN)) }
