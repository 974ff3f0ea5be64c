package datapath

import (
	"github.com/softrnic/softrnic/ctxcache"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// The responder: a request, its QP's context resolved, goes through
// named checks in order, as rxe's responder does (rxe_resp.c), each of
// which either passes it on or ends it with the protocol's answer and a
// counter:
//
//	checkQP        the QP is valid, in RTR or RTS, not in error, of the
//	               packet's transport (else dropped: rcvd_unknown_qp,
//	               rcvd_wrong_transport)
//	checkPSN       RC: new, duplicate (answered again: duplicate) or out
//	               of sequence (a NAK per gap); UC: a gap drops the rest
//	               of the message (respondUC); UD has none
//	checkOpSeq     the opcode fits the message under way: a MIDDLE or
//	               LAST continues a FIRST of its kind, a FIRST or ONLY
//	               starts after a LAST (rcvd_op_seq_err, invalid request)
//	checkLength    the payload fits the path MTU and its place in the
//	               message, the RETH's length the message (rcvd_length_err,
//	               invalid request)
//	checkKey       the R_Key, its PD, access rights and bounds allow the
//	               access, an atomic's address is aligned (rcvd_rkey_err,
//	               remote access error; rcvd_misaligned_atomic, invalid
//	               request)
//	handlers       the one seam of the HPU stage: a message an execution
//	               context's handlers take is theirs from here (hpu.go)
//	checkResources a SEND's first packet, and a WRITE_WITH_IMM's last,
//	               have a receive WQE (else RNR NAK); no READ or atomic
//	               overtakes messages with their handlers (hpu_refused)
//	execute        data placed, receive WQEs consumed and completed, READs
//	               answered, atomics carried out
//	acknowledge    the ACK the packet asks for (or, with selective
//	               repeat, a NAK of the next hole)
//
// The order differs from rxe's in one place: length and key come before
// resources, so that a request refused for either takes no receive WQE.

// respond is the responder: it runs a request through the checks and
// executes it. It reports whether the request must wait, parked with its
// QP, for memory a receive WQE it took names (the WQE stays taken).
func (e *engine) respond(qpn uint32, p *wire.Packet, q *hostmem.QPCEntry) (wait bool) {
	r := &e.qps[qpn]
	if !e.checkQP(qpn, q, r, p) {
		return false
	}
	if p.ECN() == wire.ECNCE && q.Type != ibv.QPTUD {
		e.notifyCongestion(q, r, e.clock())
	}
	psn := p.BTH().PSN()
	switch q.Type {
	case ibv.QPTUD:
		return e.respondUD(qpn, q, r, p)
	case ibv.QPTUC:
		return e.respondUC(q, r, p, psn)
	}
	now := e.clock() // the request's arrival, for its PSN's check and its quiet deadline
	if !e.checkPSN(qpn, q, r, p, psn, now) {
		return false
	}
	if accepted, wait := e.checkAndExecute(q, r, p, psn); !accepted {
		return wait
	}
	e.acknowledgeRequest(qpn, q, r, p, now)
	return false
}

// checkQP passes a request for a valid QP in RTR or RTS, not in the
// error state, of the packet's transport; it starts the QP's receiver on
// its first request.
func (e *engine) checkQP(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet) bool {
	if !q.Valid || (q.State != ibv.QPSRTR && q.State != ibv.QPSRTS) {
		e.counters.RcvdUnknownQP.Add(1)
		return false
	}
	r.hpu.qpn = qpn
	r.startReceiver(q)
	if r.errored {
		return false // a QP in the error state takes no requests
	}
	want := wire.TransportRC
	switch q.Type {
	case ibv.QPTUD:
		want = wire.TransportUD
	case ibv.QPTUC:
		want = wire.TransportUC
	}
	if p.Info.Transport != want {
		// An RC packet for a UC QP, or the like: the peer runs another
		// connection type.
		e.counters.RcvdWrongTransport.Add(1)
		e.counters.lastWrongTransport.Store(uint32(p.Info.Transport))
		return false
	}
	return true
}

// checkPSN classifies an RC request's PSN: a new request passes; a
// duplicate is answered again (duplicate); one beyond the expected PSN
// gets a sequence NAK, one per gap and not more often than
// SeqNAKInterval per QP (a stream of forged requests ahead of the window
// must not make the requester go back at each), and with selective
// repeat a WRITE_ONLY ahead is placed at once.
func (e *engine) checkPSN(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, now time.Time) bool {
	switch class, nak := r.rcv.Classify(psn, now); class {
	case reliability.Duplicate:
		e.duplicate(q, r, p, psn)
		return false
	case reliability.AlreadyPlaced:
		e.counters.DuplicateRequest.Add(1)
		return false
	case reliability.Ahead, reliability.OutOfSequence:
		e.counters.OutOfSeqRequest.Add(1)
		placed := class == reliability.Ahead && e.placeAhead(q, r, p, psn)
		if placed {
			e.counters.PlacedAhead.Add(1)
		}
		switch {
		case placed:
			// Selective repeat, as IRN's receiver: each packet placed
			// ahead of the hole is NAKed, the NAK naming it, so that the
			// sender knows what landed (its window goes on while the
			// hole is repaired) and what did not (every hole is sent
			// again at once, and a lost NAK or repair is seen within a
			// round trip).
			if nak {
				if r.rcv.RepeatedNAK() {
					e.counters.SeqNAKRepeated.Add(1)
				}
			} else {
				e.counters.PlacedReports.Add(1)
			}
			e.nakPlaced(q, r, psn)
		case nak:
			if r.rcv.RepeatedNAK() {
				e.counters.SeqNAKRepeated.Add(1)
			}
			if !r.rcv.Selective() && r.rcv.Expected() != r.rcvFirst {
				// A go-back-N NAK goes behind an ACK of what came in
				// order: rxe's requester, once a NAK has started a
				// retry, ignores every later NAK until a positive ACK
				// at or past the PSN it went back to (reset_retry_counters
				// in rxe_comp.c), so a second loss inside the packets it
				// sends again would else wait for its local ACK timeout
				// (2 s for rdma_cm's QPs). The ACK says nothing the NAK
				// does not: a NAK acknowledges every PSN before its own.
				e.counters.ACKsBeforeNAK.Add(1)
				e.acknowledge(q, r)
			}
			e.ack(q, r, r.rcv.Expected(), wire.NAKSyndrome(wire.NAKPSNSequenceError))
		default:
			e.counters.SeqNAKSuppressed.Add(1)
		}
		if !r.rcv.QuietDeadline().IsZero() {
			e.timeQP(qpn, r) // a go-back-N gap NAKed: its quiet timer
		}
		return false
	}
	return true
}

// rnrRepairTimer is the RNR timer code of an RNR NAK that asks for a
// quiet go-back-N gap again (QPFlagRNRRepair): 0.01 ms, the shortest
// (rxe waits one jiffy at least).
const rnrRepairTimer = 1

// quietNAK answers a go-back-N sender gone quiet (reliability.GapQuiet)
// while the receiver waits on it: a gap NAKed before is NAKed again, and
// a message left open is NAKed at its next PSN (its last packet, or the
// ACK that would have let the sender go on, was lost), each behind an ACK
// of what came in order, as checkPSN's NAKs. A sender that retries RNR
// NAKs without end (QPFlagRNRRepair) gets an RNR NAK of that PSN instead
// of a sequence NAK: rxe's requester, once a NAK has started a retry,
// ignores every later NAK until a positive ACK at or past the PSN it
// went back to (rxe_comp.c), so when the packet it sent again is lost
// it waits for its local ACK timeout (about 2 s on rdma_cm's QPs); an
// RNR NAK makes it send again from that PSN after the RNR timer. It is
// sent only once the sender is quiet, never into its stream: a retry
// started while rxe is still sending one can send a message's packets
// under the wrong PSNs (seen in captures).
func (e *engine) quietNAK(q *hostmem.QPCEntry, r *qpRun, k reliability.QuietKind) {
	switch k {
	case reliability.QuietTail:
		e.counters.SeqNAKTail.Add(1)
	case reliability.QuietIdle:
		e.counters.SeqNAKIdle.Add(1)
	default:
		e.counters.SeqNAKRepeated.Add(1)
		e.counters.SeqNAKQuiet.Add(1)
	}
	if r.rcv.Expected() != r.rcvFirst && !r.rcv.LastAnswered() {
		// What came, acknowledged first, unless the last request was a
		// READ or an atomic, which its response acknowledges: a plain ACK
		// of its PSN would complete it at rxe without its data.
		e.counters.ACKsBeforeNAK.Add(1)
		e.acknowledge(q, r)
	}
	if k == reliability.QuietIdle && r.rcv.LastAnswered() {
		if _, ok := r.rcv.FindAtomic(r.rcv.Expected().Sub(1)); ok {
			// The last request was an atomic: the responses of those the
			// requester may wait for go again first. One whose response
			// was lost waits on exactly that PSN, and an rxe in a retry
			// heeds no NAK beyond it (in captures through 5 % loss,
			// atomic_lat's rxe ignored eight probes of the next PSN, and
			// atomic_bw's the last atomic's response again, waiting on
			// an older one, until its 2.1 s timer fired).
			var rep [reliability.MaxRdAtomic]reliability.AtomicRecord
			n := r.rcv.AtomicsToRepeat(&rep)
			for _, a := range rep[:n] {
				e.atomicAck(q, r, a.PSN, a.Orig, a.MSN)
			}
			e.counters.AtomicRepairs.Add(uint64(n))
		}
	}
	if q.Flags&hostmem.QPFlagRNRRepair != 0 {
		e.counters.RNRRepairs.Add(1)
		e.ack(q, r, r.rcv.Expected(), wire.RNRNAKSyndrome(rnrRepairTimer))
		return
	}
	e.ack(q, r, r.rcv.Expected(), wire.NAKSyndrome(wire.NAKPSNSequenceError))
}

// checkAndExecute runs an in-sequence RC or UC request through the
// checks after the PSN's and executes it. It reports whether the packet
// was accepted (READs and atomics report false: they move the expected
// PSN themselves), and if not, whether it must wait for its receive
// WQE's memory (checkResources).
func (e *engine) checkAndExecute(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) (accepted, wait bool) {
	if !e.checkOpSeq(q, r, p, psn) || !e.checkLength(q, r, p, psn) || !e.checkKey(q, r, p, psn) {
		return false, false
	}
	first := p.Info.Flags&(wire.OpFirst|wire.OpOnly) != 0
	last := p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0
	if handled, ok := e.handlers(q, r, p, psn, first, last); handled {
		accepted = ok
	} else if ok, w := e.checkResources(q, r, p, psn, first, last); w {
		return false, true
	} else if ok {
		accepted = e.execute(q, r, p, psn, first, last)
	}
	if accepted {
		r.opSeq(p.Info.Flags, first, last)
	}
	return accepted, false
}

// Messages under way on a QP's responder, for checkOpSeq.
const (
	msgNone uint8 = iota
	msgSend
	msgWrite
)

// opSeq notes an executed packet's place in its message.
func (r *qpRun) opSeq(flags wire.OpFlags, first, last bool) {
	switch {
	case last:
		r.inMsg = msgNone
	case first && flags&wire.OpSend != 0:
		r.inMsg = msgSend
	case first && flags&wire.OpWrite != 0:
		r.inMsg = msgWrite
	}
}

// checkOpSeq passes a request whose opcode fits the message under way: a
// MIDDLE or LAST packet continues a message its FIRST began, of the same
// kind; a FIRST, an ONLY, a READ or an atomic comes between messages.
func (e *engine) checkOpSeq(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) bool {
	f := p.Info.Flags
	cont := f&(wire.OpFirst|wire.OpOnly) == 0 && f&(wire.OpSend|wire.OpWrite) != 0
	ok := false
	switch r.inMsg {
	case msgSend:
		ok = cont && f&wire.OpSend != 0
	case msgWrite:
		ok = cont && f&wire.OpWrite != 0
	default:
		ok = !cont
	}
	if !ok {
		e.counters.RcvdOpSeqErr.Add(1)
		e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
	}
	return ok
}

// checkLength passes a request whose lengths fit: a SEND or WRITE packet
// cut as the path MTU cuts a message (FIRST and MIDDLE full, ONLY and
// LAST no longer), a WRITE's packets adding up to its RETH's length, no
// message longer than IBTA allows.
func (e *engine) checkLength(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) bool {
	f := p.Info.Flags
	first := f&(wire.OpFirst|wire.OpOnly) != 0
	last := f&(wire.OpLast|wire.OpOnly) != 0
	size := uint32(len(p.Payload()))
	ok := true
	switch {
	case f&(wire.OpSend|wire.OpWrite) != 0 && !fitsMTU(int(size), first, last, pmtu(q)):
		ok = false
	case p.Opcode == wire.RCRDMAReadRequest:
		ok = p.RETH().DMALen() <= maxMessage
	case f&wire.OpWrite != 0:
		left := r.writeLeft
		if l, ok := r.handlersWriteLeft(); ok {
			left = l
		}
		if h := p.RETH(); h != nil {
			// An ONLY packet carries the whole message; a FIRST one
			// begins one longer than a packet.
			m := h.DMALen()
			ok = m <= maxMessage && (last && m == size || !last && m > size)
			left = m
		}
		// No more than the RETH announced, and all of it by the LAST.
		ok = ok && size <= left && (!last || size == left)
		if !ok {
			r.writeLeft = 0
			e.handlersBreak(qpnOf(p), r)
		}
	}
	if !ok {
		e.counters.RcvdLengthErr.Add(1)
		e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
	}
	return ok
}

// checkKey passes a request whose memory access its R_Key allows: the
// key, its PD, the access rights and the bounds, for a WRITE's whole
// message (on its first packet: a refused WRITE changes nothing, not
// even its first packets' bytes; a zero-length one needs no key, IBTA
// C9-88), a READ's range and an atomic's aligned word.
func (e *engine) checkKey(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) bool {
	f := p.Info.Flags
	var key uint32
	var va, length uint64
	var need ibv.Access
	switch {
	case f&wire.OpAtomic != 0:
		h := p.AtomicETH()
		if h.VA()%8 != 0 {
			e.counters.RcvdMisalignedAtomic.Add(1)
			e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
			return false
		}
		key, va, length, need = h.RKey(), h.VA(), 8, ibv.AccessRemoteAtomic
	case p.Opcode == wire.RCRDMAReadRequest:
		h := p.RETH()
		key, va, length, need = h.RKey(), h.VA(), uint64(h.DMALen()), ibv.AccessRemoteRead
	case f&wire.OpWrite != 0 && p.RETH() != nil:
		h := p.RETH()
		key, va, length, need = h.RKey(), h.VA(), uint64(h.DMALen()), ibv.AccessRemoteWrite
	}
	if length == 0 || e.allowed(key, q.PD, va, length, need) {
		return true
	}
	if f&wire.OpWrite != 0 {
		r.writeLeft = 0
	}
	e.counters.RcvdRKeyErr.Add(1)
	e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
	return false
}

// handlers is the HPU stage's one seam on the responder: a SEND or WRITE
// message that an execution context's handlers take (its first packet
// matched) goes to them, and they place it (hpu.go). It reports whether
// they took the packet, and if so whether it was accepted.
func (e *engine) handlers(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, first, last bool) (handled, accepted bool) {
	if p.Info.Flags&(wire.OpSend|wire.OpWrite) == 0 || !r.hpu.on && e.nic.hpu.Load() == nil {
		return false, false
	}
	return e.toHandlers(qpnOf(p), q, r, e.nic.binding(qpnOf(p)), p, psn, first, last)
}

// checkResources passes a request that has what it needs: a SEND's first
// packet takes a receive WQE (one a UC message that broke off had taken
// is taken again, from its start), a WRITE_WITH_IMM's last packet one
// too (without one it is refused with an RNR NAK before it changes
// anything, so that the requester's retry finds the message where it
// was); a READ or an atomic waits while messages wait for their handlers
// (its response would acknowledge them: the requester asks again). A
// SEND's first packet whose receive WQE's memory is not cached (the MPT
// entry or MTT lines it lands in) waits for it, parked, the WQE taken:
// it reports wait, and the packet takes the same WQE when it comes back.
func (e *engine) checkResources(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, first, last bool) (ok, wait bool) {
	f := p.Info.Flags
	switch {
	case r.handlersPending() && (p.Opcode == wire.RCRDMAReadRequest || f&wire.OpAtomic != 0):
		e.counters.HPURefused.Add(1)
		return false, false
	case f&wire.OpSend != 0 && first && r.recvActive:
		r.recvOff = 0
	case f&wire.OpSend != 0 && first, f&wire.OpWrite != 0 && last && p.ImmDt() != nil && !r.recvActive:
		if !e.takeRecv(q, r) {
			e.counters.SendRNRErr.Add(1)
			e.reply(q, r, psn, wire.RNRNAKSyndrome(q.MinRNRTimer))
			return false, false
		}
	case f&wire.OpSend != 0 && !r.recvActive:
		e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
		return false, false
	}
	if f&wire.OpSend != 0 && first && e.recvMiss(r, 0, uint32(len(p.Payload())), qpnOf(p)) {
		return false, true
	}
	return true, false
}

// recvMiss looks up, without waiting, the memory of the receive WQE a
// QP has taken that size bytes at offset off land in; on a miss it
// records the ticket for the QP and reports true.
func (e *engine) recvMiss(r *qpRun, off, size uint32, qpn uint32) bool {
	if size == 0 {
		return false
	}
	sges := r.recv.SGE[:min(int(r.recv.NumSGE), hostmem.MaxRecvSGE)]
	return e.sglMiss(sges, off, size, qpn+1) || e.sglMiss(sges, off+size-1, 1, qpn+1)
}

// acknowledgeRequest sends the ACK an executed RC request asks for, after
// moving the expected PSN past it; with selective repeat, a hole filled
// while packets placed ahead lie beyond another gets that hole's NAK now
// (it acknowledges the rest). With go-back-N it sets the receiver's quiet
// deadline: a message left open is NAKed at its next PSN if the sender
// goes quiet, and on a QP that has seen loss an ACK is sent again (see
// quietNAK and expire).
func (e *engine) acknowledgeRequest(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, now time.Time) {
	last := p.Info.Flags&(wire.OpLast|wire.OpOnly) != 0
	r.rcv.Executed(1, last)
	if r.rcv.PlacedAhead() {
		e.ack(q, r, r.rcv.Expected(), wire.NAKSyndrome(wire.NAKPSNSequenceError))
		return
	}
	ackReq := p.BTH().AckReq()
	if ackReq {
		e.acknowledge(q, r)
	}
	switch {
	case r.rcv.Selective():
		return
	case !last:
		r.rcv.Opened(now)
	case ackReq:
		r.rcv.Acknowledged(now)
	}
	if r.idleExpected() {
		r.rcv.Expecting(now)
	}
	if !r.rcv.QuietDeadline().IsZero() {
		e.timeQP(qpn, r)
	}
}

// idleExpected reports whether the QP's idle probe is to be armed: an RC
// QP with hostmem.QPFlagIdleProbe, moved to RTS and not in error, whose
// application may wait for a message: a receive is posted on its own
// queue, or its peer has sent it requests before. The second is a
// one-sided ping-pong (perftest's write_lat, read_lat and atomic_lat, an
// RPC over WRITEs that polls memory): no receive is posted, and a
// request whose only packet is lost, with nothing behind it, would wait
// for the peer's local ACK timeout (2.1 s with rdma_cm's), stalling both
// sides. Loss seen first is no condition: a lost request comes again as
// a new one, so a QP can lose request after request and see nothing.
func (r *qpRun) idleExpected() bool {
	return r.idleProbe && r.rcvStarted && !r.errored && (r.rqProducer != r.rqConsumer || r.rcv.MSN() != 0)
}

// expecting arms the idle probe of an RC QP with hostmem.QPFlagIdleProbe
// (moved to RTS, not in error) whose application waits for a message, a
// receive posted on its own queue (reliability.Receiver.Expecting; the
// receiver keeps a deadline it has already), and puts the QP on the
// timing wheel for it. A zero now reads the clock, only for a QP it arms.
func (e *engine) expecting(qpn uint32, r *qpRun, now time.Time) {
	if !r.idleExpected() {
		return
	}
	if now.IsZero() {
		now = e.clock()
	}
	r.rcv.Expecting(now)
	if !r.rcv.QuietDeadline().IsZero() {
		e.timeQP(qpn, r)
	}
}

// placeAhead places, with selective repeat, a packet that came ahead of
// order, if it can stand on its own: a WRITE_ONLY, whose RETH says where
// its bytes go. Anything else, or a WRITE its key does not allow (it will
// be refused with a NAK when it comes in order), waits for its
// retransmission.
func (e *engine) placeAhead(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) bool {
	if p.Opcode != wire.RCRDMAWriteOnly || e.nic.binding(qpnOf(p)) != nil { // a QP with handlers takes its messages in order
		return false // a QP with handlers takes its messages in order
	}
	h, payload := p.RETH(), p.Payload()
	if h.DMALen() != uint32(len(payload)) || len(payload) > pmtu(q) ||
		!e.memory(h.RKey(), q.PD, h.VA(), payload, ibv.AccessRemoteWrite, true) {
		return false
	}
	e.nic.writePlaced()
	r.rcv.Placed(psn)
	return true
}

// cnpInterval is the least time between two CNPs a QP sends (DCQCN's
// notification point sends at most one per 50 us per flow).
const cnpInterval = reliability.CNPInterval

// notifyCongestion answers a packet that crossed a congested switch (ECN
// Congestion Experienced: a request, an ACK, a READ response) with a CNP
// to its sender's QP, as a RoCEv2 notification point does, no more often
// than cnpInterval per QP.
func (e *engine) notifyCongestion(q *hostmem.QPCEntry, r *qpRun, now time.Time) {
	e.counters.NPECNMarked.Add(1)
	if now.Sub(r.lastCNP) < cnpInterval {
		return
	}
	r.lastCNP = now
	var f wire.FrameFields
	e.frameTo(&f, q, wire.CNP, 0)
	f.BTH.BECN = true
	e.send(&f)
	e.counters.NPCNPSent.Add(1)
}

// congestion is a CNP's arrival at the QP whose packets were marked: its
// sender cuts its window, or with DCQCN its rate (a reaction point).
func (e *engine) congestion(qpn uint32, q *hostmem.QPCEntry) {
	r := &e.qps[qpn]
	if !q.Valid || q.Type != ibv.QPTRC {
		return
	}
	if !r.sndStarted {
		// A QP that has only answered (READ responses, ACKs) starts its
		// sender for DCQCN's rate, which its responses spend.
		if e.cfg.DCQCN == nil || e.cfg.NoCongestionControl || q.State != ibv.QPSRTS || r.alloc.Len() == 0 {
			return
		}
		r.startSender(q, e.cfg, &e.path)
	}
	e.counters.RPCNPHandled.Add(1)
	r.snd.OnCNP(e.clock())
}

// duplicate answers a request whose PSN is behind the expected one: a
// READ the responder remembers is answered again (from the PSN asked
// for), an atomic it remembers gets its saved result, anything else that
// is a READ or an atomic is dropped (it answers nothing this QP executed:
// a NAK for it could fail the live connection), and a SEND or WRITE is
// acknowledged with the newest PSN executed.
func (e *engine) duplicate(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) {
	e.counters.DuplicateRequest.Add(1)
	switch {
	case p.Opcode == wire.RCRDMAReadRequest:
		h := p.RETH()
		if rr, ok := r.rcv.FindRead(psn, h.VA(), h.RKey(), h.DMALen()); ok {
			if h.VA()+uint64(h.DMALen()) == rr.VA+uint64(rr.Length) && q.Flags&hostmem.QPFlagSelectiveRepeat == 0 { // the rest of the READ: go-back-N (with selective repeat, a hole at its end)
				if r.readPace.retry(e.clock(), psn) {
					e.counters.ReadPaceCuts.Add(1)
				}
			}
			e.readResponse(q, r, p, psn, rr.MSN, false)
			return
		}
		e.counters.DuplicateDropped.Add(1)
	case p.Info.Flags&wire.OpAtomic != 0:
		if a, ok := r.rcv.FindAtomic(psn); ok {
			e.atomicAck(q, r, psn, a.Orig, a.MSN)
			e.expecting(qpnOf(p), r, time.Time{}) // the answer, or the next request, may be lost again
			return
		}
		e.counters.DuplicateDropped.Add(1)
	default:
		e.acknowledge(q, r)
		e.expecting(qpnOf(p), r, time.Time{})
	}
}

func qpnOf(p *wire.Packet) uint32 { return p.BTH().DestQP() }

// takeRecv fetches the next receive WQE of a QP.
// A QP with an SRQ takes it from the SRQ, whose context comes through the
// cache like every other.
func (e *engine) takeRecv(q *hostmem.QPCEntry, r *qpRun) bool {
	if e.takeRecvWQE(q, r) {
		return true
	}
	// A receive posted before the peer sent may have its doorbell still
	// queued: take the doorbells in and look again.
	return e.recvBellsDue() && e.takeRecvWQE(q, r)
}

func (e *engine) takeRecvWQE(q *hostmem.QPCEntry, r *qpRun) bool {
	var b [hostmem.RecvWQESize]byte
	if q.SRQ != 0 {
		srqn := q.SRQ - 1
		if srqn >= uint32(len(e.nic.srqs)) || !e.ctx(hostmem.SRQC, uint64(srqn), e.entry[:64]) {
			return false
		}
		var ent hostmem.RingEntry
		ent.Decode(e.entry[:64])
		s := &e.nic.srqs[srqn]
		s.mu.Lock()
		if !ent.Valid || ent.Size == 0 || ent.PD != q.PD || s.consumer == s.producer.Load() ||
			e.cfg.DMA.Read(ent.Base+uint64(s.consumer%ent.Size)*hostmem.RecvWQESize, b[:]) != nil {
			s.mu.Unlock()
			return false
		}
		r.recvIndex = s.consumer
		s.consumer++
		s.mu.Unlock()
	} else {
		if r.rqConsumer == r.rqProducer || q.RQSize == 0 {
			return false
		}
		if e.cfg.DMA.Read(q.RQBase+uint64(r.rqConsumer%q.RQSize)*hostmem.RecvWQESize, b[:]) != nil {
			return false
		}
		r.recvIndex = r.rqConsumer
		r.rqConsumer++
	}
	r.recv.Decode(b[:])
	r.recvActive, r.recvOff = true, 0
	return true
}

// ack sends an ACK or NAK for psn.
func (e *engine) ack(q *hostmem.QPCEntry, r *qpRun, psn wire.PSN, s wire.Syndrome) {
	psn, msn, ok := r.ackCap(psn, s)
	if !ok {
		if !s.IsACK() {
			e.counters.SeqNAKSuppressed.Add(1)
		}
		return
	}
	if r.rcv.Selective() && s == wire.NAKSyndrome(wire.NAKPSNSequenceError) {
		// Between selective-repeat peers a sequence NAK's MSN field
		// names the newest packet placed beyond the hole (IRN's NACK
		// carries it; the sender reads no NAK's MSN otherwise); with
		// none, the PSN before the hole, which names nothing.
		msn = uint32(psn.Sub(1))
		if newest, ok := r.rcv.NewestPlaced(); ok {
			msn = uint32(newest)
		}
	}
	e.sendACK(q, psn, s, msn)
}

// nakPlaced sends, with selective repeat, the hole's sequence NAK naming
// the packet at placed, just placed ahead of it.
func (e *engine) nakPlaced(q *hostmem.QPCEntry, r *qpRun, placed wire.PSN) {
	e.sendACK(q, r.rcv.Expected(), wire.NAKSyndrome(wire.NAKPSNSequenceError), uint32(placed))
}

// sendACK sends an ACK or NAK of psn with the AETH's MSN field msn.
func (e *engine) sendACK(q *hostmem.QPCEntry, psn wire.PSN, s wire.Syndrome, msn uint32) {
	var f wire.FrameFields
	e.frameTo(&f, q, wire.RCAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: s, MSN: msn}
	n := e.txN
	e.send(&f)
	if s.IsACK() && e.txN != n { // queued, not staged behind reads
		e.ackHold.acks++
	}
}

// acknowledge sends an ACK of every request executed so far, with the
// QP's end-to-end credits.
func (e *engine) acknowledge(q *hostmem.QPCEntry, r *qpRun) {
	e.ack(q, r, r.rcv.AckPSN(), wire.ACKSyndrome(e.credits(q, r)))
}

// credits is the end-to-end credit code an RC QP's ACKs carry: the
// receive WQEs posted and not yet taken (IBTA 9.7.7.2), so that a
// requester that honours them stops before an RNR NAK. A QP with an SRQ
// has no count of its own and says so (CreditsInvalid), as IBTA asks.
func (e *engine) credits(q *hostmem.QPCEntry, r *qpRun) uint8 {
	if q.SRQ != 0 || q.Type != ibv.QPTRC {
		return wire.CreditsInvalid
	}
	if e.handlersTakeSends(r) {
		return wire.CreditsInvalid // handlers take SENDs without receive WQEs
	}
	if r.rqProducer == 0 {
		// Nothing was ever posted to its receive queue (a QP that only
		// takes WRITEs and READs): it keeps no count a requester should
		// hold its SENDs on, and says so, as rxe always does.
		return wire.CreditsInvalid
	}
	return wire.CreditCode(r.rqProducer - r.rqConsumer)
}

// readResponse starts answering an RDMA READ request: the response packets
// go out a few at a time from the engine's loop (pump reads), so that a
// long READ neither starves the engine's other work nor floods the
// requester. A new request on the QP (a retry, full or partial) replaces
// the one being answered.
func (e *engine) readResponse(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, msn uint32, fresh bool) {
	h := p.RETH()
	total := int(h.DMALen())
	packets := max(1, (total+pmtu(q)-1)/pmtu(q))
	if !fresh && total > 0 && !e.allowed(h.RKey(), q.PD, h.VA(), uint64(total), ibv.AccessRemoteRead) {
		e.counters.RcvdRKeyErr.Add(1) // a duplicate's key (a new READ's passed checkKey)
		e.ack(q, r, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
		return
	}
	if fresh {
		msn = r.rcv.ExecutedRead(reliability.ReadRecord{Packets: uint32(packets), VA: h.VA(), RKey: h.RKey(), Length: h.DMALen()})
		e.expecting(qpnOf(p), r, time.Time{}) // a lost response: the probe's NAK has the READ asked again
	}
	if !fresh && q.Flags&hostmem.QPFlagSelectiveRepeat != 0 {
		// Selective repeat: the requester asks for the responses it
		// lacks, and only those; the READs being answered go on after
		// this one, which goes before them, behind the re-reads already
		// queued (its requester waits on the oldest to complete in
		// order). With no place free it is dropped: the
		// requester's timer asks again. The places of max_rd_atomic's
		// new READs stay theirs.
		if r.readN == len(r.reads) || r.rereads() >= maxRereads {
			e.counters.DuplicateDropped.Add(1)
			return
		}
		// After the re-reads already queued, which ask for older holes.
		n := len(r.reads)
		k := 0
		for k < r.readN && r.reads[(r.readHead+k)%n].again {
			k++
		}
		r.readHead = (r.readHead + n - 1) % n
		for i := range k {
			r.reads[(r.readHead+i)%n] = r.reads[(r.readHead+i+1)%n]
		}
		r.readN++
		r.reads[(r.readHead+k)%n] = readState{psn: psn, va: h.VA(), key: h.RKey(), total: total, packets: packets, msn: msn, again: true}
		e.startReads(q, r, p.BTH().DestQP())
		return
	}
	if !fresh {
		// A retry: the requester went back to this PSN and asks again for
		// every later READ, so the answers queued from here on go, and so
		// does one this retry restarts in its middle (the retried
		// requests that follow queue up behind this one).
		for r.readN > 0 {
			last := &r.reads[(r.readHead+r.readN-1)%len(r.reads)]
			if last.psn.Add(uint32(last.packets - 1)).Before(psn) {
				break
			}
			r.readN--
		}
	}
	if r.readN == len(r.reads) {
		// Full: the oldest answer goes, as rxe reuses its oldest
		// responder resource. It is a stale retry's (a requester keeps
		// no more READs outstanding than there are places); if not, the
		// requester times out and asks again.
		r.readHead = (r.readHead + 1) % len(r.reads)
		r.readN--
	}
	r.reads[(r.readHead+r.readN)%len(r.reads)] = readState{psn: psn, va: h.VA(), key: h.RKey(), total: total, packets: packets, msn: msn, again: !fresh}
	r.readN++
	qpn := p.BTH().DestQP()
	if r.readRepairAllowed(q) {
		r.rcv.AnsweredRead(e.clock())
	}
	if !r.rcv.QuietDeadline().IsZero() {
		e.timeQP(qpn, r) // a requester that went back for READs: the repair if it goes quiet
	}
	e.startReads(q, r, qpn)
}

// readRepairTimeout is the least local ACK timeout (its IBTA code) of a
// QP whose responder repeats READs to a quiet requester: the QP's own,
// taken for its peer's (rdma_cm gives both ends the same, 0x13: 2.1 s).
// A requester whose timer asks again within a fraction of a second gains
// little from a repair.
const readRepairTimeout = 17 // 0.54 s

// readRepairAllowed reports whether the responder may repeat READs to a quiet
// requester on the QP (reliability.QuietRead, RepairsReads): go-back-N,
// a long local ACK timeout (or none: 0), and a requester its responses
// have not overrun lately (no READ pace): a slow requester's backlog of
// responses can outlast any quiet wait, and responses repeated behind it
// would send it back for each READ after the one it is taking (seen with
// 8 MiB READs into an emulated rxe).
func (r *qpRun) readRepairAllowed(q *hostmem.QPCEntry) bool {
	return q.Flags&hostmem.QPFlagSelectiveRepeat == 0 && (q.Timeout == 0 || q.Timeout >= readRepairTimeout) && r.readPace.gap == 0
}

// repeatReads answers again, unasked, the READs a go-back-N requester
// gone quiet after them may still wait for (reliability.QuietRead): each
// from the PSN it last went back to, its responses as first sent (their
// PSNs and opcodes); none while answers are still queued. It returns how
// many response packets it queued.
func (e *engine) repeatReads(q *hostmem.QPCEntry, r *qpRun, qpn uint32) (packets int) {
	if r.readN > 0 || !r.readRepairAllowed(q) {
		return 0 // still answering (the requester is not waiting on what went), or not to this requester
	}
	var rep [reliability.MaxRdAtomic]reliability.ReadRepeat
	n := r.rcv.ReadsToRepeat(&rep)
	queued := 0
	for _, rr := range rep[:n] {
		if r.readN == len(r.reads) {
			break
		}
		r.reads[(r.readHead+r.readN)%len(r.reads)] = readState{psn: rr.PSN, va: rr.VA, key: rr.RKey, total: int(rr.Length),
			packets: max(1, int(rr.Packets)), next: int(rr.From), until: int(rr.Until), msn: rr.MSN, again: true}
		r.readN++
		queued++
		packets += int(rr.Until - rr.From)
	}
	if queued > 0 {
		e.counters.ReadRepairs.Add(uint64(queued))
		e.startReads(q, r, qpn)
	}
	return packets
}

// smallReadRepair is the most response packets a READ repair may send
// for the idle probe's NAK to go with it (QuietRead): small READs (a
// latency test's, an RPC's) whose next request may have been lost as
// well as their response; a NAK beside a large READ's repair could send
// a requester still taking a backlog of responses back for all of them.
const smallReadRepair = 16

// startReads sends the first packets of a QP's READ answers now, in the
// unit that resolved its contexts, when no READ was ahead of them, and
// lists the QP for the engine's passes to send the rest.
func (e *engine) startReads(q *hostmem.QPCEntry, r *qpRun, qpn uint32) {
	if r.readListed {
		return
	}
	if e.pumpRead(q, r, qpn, e.clock()); r.readN > 0 {
		r.readListed = true
		e.readers = append(e.readers, qpn)
	}
}

// rereads counts the partial re-reads queued (readState.again).
func (r *qpRun) rereads() int {
	k := 0
	for i := range r.readN {
		if r.reads[(r.readHead+i)%len(r.reads)].again {
			k++
		}
	}
	return k
}

// readBurst is how many READ response packets a QP sends per engine pass.
const readBurst = 16

// pumpReads sends the next packets of every READ being answered, and
// reports whether it sent any. A QP whose context is not cached waits
// for the ticket's answer, and one whose pace holds its next response
// waits for its time (e.readWake: the earliest, when every QP left
// waits so); the other QPs' READs go on.
func (e *engine) pumpReads() bool {
	sent, paced, now := 0, true, e.clock()
	e.readWake = time.Time{}
	kept := e.readers[:0]
	for _, qpn := range e.readers {
		r := &e.qps[qpn]
		e.begin()
		var q hostmem.QPCEntry
		if r.readN == 0 {
			r.readListed = false
			continue
		}
		if st, pid, _ := e.look(hostmem.QPC, uint64(qpn)); st == ctxcache.Miss {
			e.parkPID[hostmem.QPC][pid] = qpn + 1
			kept = append(kept, qpn)
			continue
		}
		if !e.qpc(qpn, &q) {
			r.readN, r.readListed = 0, false
			continue
		}
		if sent += e.pumpRead(&q, r, qpn, now); r.readN > 0 {
			kept = append(kept, qpn)
			at, held := r.readHold(now)
			switch {
			case !held:
				paced = false
			case e.readWake.IsZero() || at.Before(e.readWake):
				e.readWake = at
			}
		} else {
			r.readListed = false
		}
	}
	e.readers = kept
	if !paced {
		e.readWake = time.Time{}
	}
	return sent > 0
}

// readHold reports whether the QP's next READ response waits at now, and
// until when: for its READ pace, or for the QP's DCQCN rate, which its
// responses spend as its requests do.
func (r *qpRun) readHold(now time.Time) (time.Time, bool) {
	at, held := r.readPace.holds(now)
	if !r.sndStarted {
		return at, held
	}
	if until, rate := r.snd.RateHold(now); rate && (!held || until.After(at)) {
		return until, true
	}
	return at, held
}

// pumpRead sends at now up to a burst of the next packets of the READ a
// QP answers first, as its pace allows, and returns how many it sent. It
// stops early where the memory's MPT entry or MTT line is not cached (the
// ticket's answer comes before the next pass).
func (e *engine) pumpRead(q *hostmem.QPCEntry, r *qpRun, qpn uint32, now time.Time) int {
	rd := &r.reads[r.readHead]
	n := 0
	mtu := pmtu(q)
	var f wire.FrameFields
	end := rd.packets
	if rd.until > 0 {
		end = rd.until
	}
	for burst := 0; burst < readBurst && rd.next < end; burst++ {
		if _, held := r.readHold(now); held {
			break
		}
		i := rd.next
		op := opsRead.at(i, rd.packets)
		buf := e.payload[:segmentLen(rd.total, i, mtu)]
		if len(buf) > 0 && e.regionMiss(rd.key, rd.va+uint64(i*mtu), uint64(len(buf)), qpn+1) {
			break
		}
		if !e.memory(rd.key, q.PD, rd.va+uint64(i*mtu), buf, ibv.AccessRemoteRead, false) {
			e.ack(q, r, rd.psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
			rd.next = rd.packets // abandoned
			break
		}
		e.frameTo(&f, q, op, rd.psn.Add(uint32(i)))
		f.Payload = buf
		f.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: rd.msn & 0xffffff}
		e.send(&f)
		if rd.again {
			e.counters.ReadResponsesResent.Add(1)
		}
		rd.next++
		n++
		r.readPace.sent(now, rd.psn.Add(uint32(i)), i == 0)
		if r.sndStarted {
			r.snd.RateSent(now, len(buf)+reliability.PacketOverhead)
		}
	}
	if rd.next >= end {
		r.readHead = (r.readHead + 1) % len(r.reads)
		r.readN--
		r.readPace.answered(rd.total, now)
		if r.readN == 0 {
			r.rcv.ReadsSent(now) // a READ repair's wait counts from the last response
		}
	}
	return n
}

// atomic executes a compare-and-swap or fetch-and-add on an aligned 8-byte
// word of registered memory. The NIC's atomics lock makes the
// read-modify-write atomic with respect to the atomics of every engine.
func (e *engine) atomic(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) {
	h := p.AtomicETH()
	va, key := h.VA(), h.RKey()
	var word [8]byte
	e.nic.atomicMu.Lock()
	defer e.nic.atomicMu.Unlock()
	if !e.memory(key, q.PD, va, word[:], ibv.AccessRemoteAtomic, false) {
		e.counters.RcvdRKeyErr.Add(1)
		e.ack(q, r, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
		return
	}
	orig := le.Uint64(word[:])
	next := orig
	if p.Opcode == wire.RCCompareSwap {
		if orig == h.Compare() {
			next = h.SwapAdd()
		}
	} else {
		next = orig + h.SwapAdd()
	}
	le.PutUint64(word[:], next)
	if next != orig && !e.memory(key, q.PD, va, word[:], ibv.AccessRemoteAtomic, true) {
		e.ack(q, r, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
		return
	}
	r.rcv.ExecutedAtomic(orig)
	e.expecting(qpnOf(p), r, time.Time{})
	e.atomicAck(q, r, psn, orig, r.rcv.MSN())
}

// atomicAck answers an atomic request with the original value.
func (e *engine) atomicAck(q *hostmem.QPCEntry, r *qpRun, psn wire.PSN, orig uint64, msn uint32) {
	var f wire.FrameFields
	e.frameTo(&f, q, wire.RCAtomicAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(e.credits(q, r)), MSN: msn & 0xffffff}
	f.AtomicOrigData = orig
	e.send(&f)
}

// execute carries out a request that passed every check: a SEND's data
// scattered into its receive WQE (a buffer too short fails it with a
// local length error), a WRITE's placed, a READ's response begun, an
// atomic carried out. It reports whether the packet was accepted (READs
// and atomics report false: they move the expected PSN themselves).
func (e *engine) execute(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, first, last bool) bool {
	info := p.Info
	payload := p.Payload()
	switch {
	case p.Opcode == wire.RCRDMAReadRequest:
		e.readResponse(q, r, p, psn, 0, true)
		return false
	case info.Flags&wire.OpAtomic != 0:
		e.atomic(q, r, p, psn)
		return false
	case info.Flags&wire.OpSend != 0:
		sges := r.recv.SGE[:min(int(r.recv.NumSGE), hostmem.MaxRecvSGE)]
		if uint64(r.recvOff)+uint64(len(payload)) > sglLen(sges) {
			// Longer than the receive buffer: an invalid request NAK, and
			// the receive completes with a local length error (IBTA, rxe).
			e.counters.RcvdLengthErr.Add(1)
			e.recvError(q, r, p, psn, ibv.WCLocLenErr, wire.NAKInvalidRequest)
			return false
		}
		if !e.scatter(q.PD, sges, r.recvOff, payload) {
			e.recvError(q, r, p, psn, ibv.WCLocProtErr, wire.NAKRemoteOperationalErr)
			return false
		}
		r.recvOff += uint32(len(payload))
		if last {
			c := hostmem.CQE{WRID: r.recv.WRID, Opcode: ibv.WCRecv, ByteLen: r.recvOff, QPN: qpnOf(p), WQEIndex: r.recvIndex}
			if h := p.ImmDt(); h != nil {
				c.Flags, c.Imm = ibv.WCWithImm, h.Imm()
			}
			if h := p.IETH(); h != nil {
				c.Flags, c.Imm = ibv.WCWithInv, h.RKey()
			}
			if p.BTH().SE() {
				c.Flags |= ibv.WCSolicited
			}
			e.complete(q.RecvCQ, &c)
			r.recvActive = false
			e.counters.RdmaRecvs.Add(1)
		}
	case info.Flags&wire.OpWrite != 0:
		if h := p.RETH(); h != nil {
			r.writeVA, r.writeKey, r.writeLeft, r.writeLen = h.VA(), h.RKey(), h.DMALen(), h.DMALen()
		}
		if !e.memory(r.writeKey, q.PD, r.writeVA, payload, ibv.AccessRemoteWrite, true) {
			e.counters.RcvdRKeyErr.Add(1)
			e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
			return false
		}
		r.writeVA += uint64(len(payload))
		r.writeLeft -= uint32(len(payload))
		if last {
			e.nic.writePlaced()
		}
		if imm := p.ImmDt(); last && imm != nil {
			// byte_len is the WRITE's length, as rxe and libibverbs give it
			// (under selective repeat, where every packet is a message of
			// its own on the wire, the last packet's).
			c := hostmem.CQE{WRID: r.recv.WRID, Opcode: ibv.WCRecvRDMAWithImm, Flags: ibv.WCWithImm, Imm: imm.Imm(), ByteLen: r.writeLen,
				QPN: qpnOf(p), WQEIndex: r.recvIndex}
			if p.BTH().SE() {
				c.Flags |= ibv.WCSolicited
			}
			e.complete(q.RecvCQ, &c)
			r.recvActive = false
			e.counters.RdmaRecvs.Add(1)
		}
	default:
		e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
		return false
	}
	return true
}

// maxMessage is the longest message IBTA allows (2^31 bytes).
const maxMessage = 1 << 31

// fitsMTU reports whether a SEND or WRITE packet's payload length fits its
// place in a message cut at the path MTU.
func fitsMTU(n int, first, last bool, mtu int) bool {
	switch {
	case first && last: // ONLY
		return n <= mtu
	case last:
		return n > 0 && n <= mtu
	default: // FIRST, MIDDLE
		return n == mtu
	}
}

// recvError ends a SEND that its receive WQE cannot take. On RC the
// requester gets the NAK, the receive WQE completes with status, and the
// QP goes to the error state, flushing its other work (IBTA's responder
// class B/C errors, as rxe handles them). UC drops the rest of the
// message and keeps the WQE for the next one.
func (e *engine) recvError(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN, status ibv.WCStatus, nak uint8) {
	if q.Type == ibv.QPTUC {
		r.ucDrop = true
		return
	}
	e.ack(q, r, psn, wire.NAKSyndrome(nak))
	c := hostmem.CQE{WRID: r.recv.WRID, Status: status, Opcode: ibv.WCRecv, ByteLen: r.recvOff, QPN: qpnOf(p), WQEIndex: r.recvIndex}
	e.complete(q.RecvCQ, &c)
	r.recvActive = false
	e.fail(qpnOf(p), q, r, ibv.WCWRFlushErr)
	e.recvBellsDue() // the receives posted so far, flushed with the rest
	e.flushRecv(qpnOf(p), q, r)
}

// flushRecv completes every receive WQE posted to a QP in the error state
// with a flush error (a QP with an SRQ leaves the SRQ's WQEs to the QPs
// that share it).
func (e *engine) flushRecv(qpn uint32, q *hostmem.QPCEntry, r *qpRun) {
	if q.SRQ != 0 {
		return
	}
	for r.rqConsumer != r.rqProducer && q.RQSize != 0 {
		var b [hostmem.RecvWQESize]byte
		index := r.rqConsumer
		r.rqConsumer++
		if e.cfg.DMA.Read(q.RQBase+uint64(index%q.RQSize)*hostmem.RecvWQESize, b[:]) != nil {
			continue
		}
		var w hostmem.RecvWQE
		w.Decode(b[:])
		c := hostmem.CQE{WRID: w.WRID, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpn, WQEIndex: index}
		e.complete(q.RecvCQ, &c)
	}
}

// reply sends an ACK, NAK or RNR NAK on an RC QP; UC has none.
func (e *engine) reply(q *hostmem.QPCEntry, r *qpRun, psn wire.PSN, s wire.Syndrome) {
	if q.Type == ibv.QPTUC {
		r.ucDrop = true // the rest of the message is dropped
		return
	}
	e.ack(q, r, psn, s)
}

// respondUC is the UC responder: no ACKs, no retries. A gap drops the rest
// of the message; the next FIRST or ONLY packet starts over, reusing a
// receive WQE that the dropped message had taken.
func (e *engine) respondUC(q *hostmem.QPCEntry, r *qpRun, p *wire.Packet, psn wire.PSN) (wait bool) {
	first := p.Info.Flags&(wire.OpFirst|wire.OpOnly) != 0
	if psn != r.ucExp || r.ucDrop {
		if !first {
			if psn != r.ucExp {
				e.counters.OutOfSeqRequest.Add(1)
			}
			e.handlersBreak(qpnOf(p), r)
			r.ucDrop = true
			r.ucExp = psn.Next()
			return false
		}
		r.ucExp = psn
	}
	if first {
		r.inMsg = msgNone // a FIRST or ONLY ends a message that broke off, as rxe's UC does
	}
	r.ucDrop = false
	if _, wait := e.checkAndExecute(q, r, p, psn); wait {
		return true
	}
	r.ucExp = psn.Next()
	return false
}

// respondUD delivers a datagram: the Q_Key must match the QP's; the
// receive buffer gets the 40-byte GRH first (for IPv4, the IPv4 header in
// its last 20 bytes, as rxe writes it), then the payload.
func (e *engine) respondUD(qpn uint32, q *hostmem.QPCEntry, r *qpRun, p *wire.Packet) (wait bool) {
	d := p.DETH()
	if d.QKey() != q.QKey {
		e.counters.RcvdMalformed.Add(1) // Q_Key violation: dropped
		return false
	}
	if !r.recvActive && !e.takeRecv(q, r) { // one a datagram waiting for its memory took is its still
		e.counters.SendRNRErr.Add(1) // no receive posted: UD drops
		return false
	}
	if e.recvMiss(r, 0, uint32(40+p.PayloadLen), qpn) {
		return true // the WQE's memory is not cached: the datagram waits for it, parked
	}
	r.recvActive = false
	var grh [40]byte
	if p.IPv6 {
		copy(grh[:], p.Frame[p.IPOff:p.IPOff+wire.IPv6Len])
	} else {
		copy(grh[20:], p.Frame[p.IPOff:p.IPOff+wire.IPv4MinLen])
	}
	sges := r.recv.SGE[:min(int(r.recv.NumSGE), hostmem.MaxRecvSGE)]
	c := hostmem.CQE{WRID: r.recv.WRID, Opcode: ibv.WCRecv, Flags: ibv.WCWithGRH, ByteLen: uint32(40 + p.PayloadLen), QPN: qpn, SrcQP: d.SrcQP(), WQEIndex: r.recvIndex}
	if !e.scatter(q.PD, sges, 0, grh[:]) || !e.scatter(q.PD, sges, 40, p.Payload()) {
		c.Status = ibv.WCLocLenErr
	}
	if h := p.ImmDt(); h != nil {
		c.Flags |= ibv.WCWithImm
		c.Imm = h.Imm()
	}
	if p.BTH().SE() {
		c.Flags |= ibv.WCSolicited
	}
	e.complete(q.RecvCQ, &c)
	e.counters.RdmaRecvs.Add(1)
	return false
}
