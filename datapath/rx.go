package datapath

// The receive stage: a frame from the port (or handed over from another
// queue's engine) is parsed and its ICRC checked, goes to the engine that
// owns its QP, waits parked while its contexts miss (park.go), and is
// dispatched to the responder, the completer or congestion handling.

import (
	"net/netip"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// receive parses a frame and hands it to the responder (requests) or the
// completer (ACKs and responses).
func (e *engine) receive(fr *Frame) {
	e.begin()
	var p wire.Packet
	var err error
	if fr.NoICRC {
		err = wire.ParseNoICRC(fr.Data, &p)
	} else {
		err = wire.Parse(fr.Data, &p)
	}
	switch {
	case err == wire.ErrBadICRC:
		e.counters.RcvdBadICRC.Add(1)
		return
	case err != nil:
		e.counters.RcvdMalformed.Add(1)
		return
	}
	qpn := p.BTH().DestQP()
	if qpn == MulticastQPN {
		e.counters.RcvdPkts.Add(1)
		e.receiveMulticast(fr, &p)
		return
	}
	if qpn >= uint32(len(e.qps)) {
		e.counters.RcvdPkts.Add(1)
		e.counters.RcvdUnknownQP.Add(1)
		return
	}
	// A frame whose QP another engine owns goes to that engine, its ICRC
	// already checked.
	if to := e.nic.owner(qpn); to != e {
		e.handOff(to, fr, true)
		return
	}
	e.counters.RcvdPkts.Add(1)
	if !wire.PKeyMatch(p.BTH().PKey(), wire.DefaultPKey) {
		e.counters.RcvdBadPKey.Add(1) // another partition: dropped, as rxe drops it
		return
	}
	// A QP whose context is not cached waits, its packets parked in
	// order, while the packets of other QPs go on.
	r := &e.qps[qpn]
	if r.parkN > 0 {
		e.parkPacket(qpn, fr, &p)
		return
	}
	var q hostmem.QPCEntry
	if e.mustWait(qpn, &p, &q) || e.dispatch(qpn, &p, &q) {
		e.parkPacket(qpn, fr, &p)
	}
}

// parkPacket parks a packet; an ACK or response parked (its handling
// deferred to when its contexts come) is what rxe counts as ack_deferred.
func (e *engine) parkPacket(qpn uint32, fr *Frame, p *wire.Packet) {
	if p.Info.Flags&wire.OpRequest == 0 && p.Info.Transport != wire.TransportCNP {
		e.counters.AckDeferred.Add(1)
	}
	e.park(qpn, fr)
}

// dispatch hands a parsed packet, with its QP's context, to the responder
// or the completer. It reports whether the packet must wait, parked, for
// a context the responder found missing (a receive WQE's memory).
func (e *engine) dispatch(qpn uint32, p *wire.Packet, q *hostmem.QPCEntry) (wait bool) {
	if q.Valid && q.Type != ibv.QPTUD && !e.fromPeer(p, q) {
		// A connected QP takes packets (requests, responses, CNPs) only
		// from its peer's address to its own, as rxe checks them.
		e.counters.RcvdBadAddr.Add(1)
		return false
	}
	if p.Info.Transport == wire.TransportCNP {
		e.congestion(qpn, q)
		return false
	}
	if p.Info.Flags&wire.OpRequest != 0 {
		return e.respond(qpn, p, q)
	}
	e.completeResponse(qpn, p, q)
	return false
}

// fromPeer reports whether a packet came from a connected QP's peer
// (its destination GID's address) to this NIC's address for that peer
// (the one its frames leave from).
func (e *engine) fromPeer(p *wire.Packet, q *hostmem.QPCEntry) bool {
	var src, dst netip.Addr
	if p.IPv6 {
		h := p.IPv6Header()
		src, dst = h.Src(), h.Dst()
	} else {
		h := p.IPv4Header()
		src, dst = h.Src(), h.Dst()
	}
	peer := gidAddr(q.DestGID)
	return src == peer && dst == e.nic.src.forDst(peer)
}

// handoffBuffers is how many frames an engine can hold that arrived on
// another queue for one of its QPs and wait for it to take them.
const handoffBuffers = 1024

// KernelRxBuffers is how many frames taken in through NIC.Deliver a
// single-queue NIC holds for its engine. The kernel's UDP stack usually
// brings few (what the XDP program missed), but a peer that sends to
// another of the host's MAC addresses (a bridge's, which answers ARP for
// every address of its namespace by default) sends it all its traffic:
// room for a window of packets keeps such a path from dropping what the
// engine takes a turn later.
const KernelRxBuffers = 512

// handoffBatch is how many handed-off frames an engine takes in a turn.
const handoffBatch = 32

// handoff is a frame passed from the engine whose queue received it to the
// engine that owns its QP.
type handoff struct {
	buf    []byte // a buffer of the owner's handoff pool, resliced to the frame
	noICRC bool
}

// handOff passes a frame that arrived on this engine's queue to the engine
// that owns its QP. The frame is copied: the port's buffer goes back with
// the batch. With no spare buffer the frame is dropped and counted, as a
// NIC drops what it has no room for; RC retransmits it.
func (e *engine) handOff(to *engine, fr *Frame, verified bool) {
	if !to.takeIn(fr.Data, fr.NoICRC || verified) {
		e.counters.HandoffDropped.Add(1)
		return
	}
	e.stats.HandoffOut.Add(1)
	e.counters.HandedOff.Add(1)
}

// takeIn copies a frame into one of the engine's spare buffers and
// queues it on its inbox, waking it; it reports false when there is no
// spare buffer, or none large enough (the caller counts the drop). Any
// goroutine may call it.
func (e *engine) takeIn(frame []byte, noICRC bool) bool {
	select {
	case buf := <-e.spare:
		if len(frame) > cap(buf) {
			e.spare <- buf
			return false
		}
		buf = buf[:copy(buf[:cap(buf)], frame)]
		e.stats.HandoffQueued.Add(1)
		e.inbox <- handoff{buf: buf, noICRC: noICRC}
		e.wake()
		return true
	default:
		return false
	}
}

// handoffsDue takes in up to a batch of the frames other engines passed
// to this one (a batch at a time, as from its own queue, so that a QP
// whose context misses drains between batches instead of overflowing its
// parking).
func (e *engine) handoffsDue() bool {
	for served := 0; ; served++ {
		if served == handoffBatch {
			return true
		}
		select {
		case h := <-e.inbox:
			e.stats.HandoffQueued.Add(-1)
			e.stats.HandoffIn.Add(1)
			fr := Frame{Data: h.buf, NoICRC: h.noICRC}
			e.inHandoff = true // a multicast frame goes to this engine's QPs only
			e.receive(&fr)
			e.inHandoff = false
			e.spare <- h.buf[:cap(h.buf)]
		default:
			return served > 0
		}
	}
}
