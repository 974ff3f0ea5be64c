package datapath

import (
	"bytes"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// READs longer than the port can take in at once go as several READ
// requests, and the engine's QPs together never ask for more responses
// than half the port's receive capacity: a QP whose next request would
// not fit waits (room_waits) until responses come, then goes. Every byte
// lands where it belongs and both READs complete.
func TestReadsStayWithinReceiveCapacity(t *testing.T) {
	h := newHarnessOn(t, &testPort{capacity: 16}) // room for 8 responses: requests of 4
	const mtu, size = 1024, 10 * 1024             // 10 responses per READ
	ring := h.cq(0, 16)
	local := make([]byte, 2*size)
	lkey, lva := h.mr(local, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	remote := make([]byte, 2*size) // the peer's memory the READs read
	for i := range remote {
		remote[i] = byte(i*7 + i/251)
	}
	qs := map[uint32]hostmem.QPCEntry{1: h.rcQP(1, 101, 0, 0, 0), 2: h.rcQP(2, 102, 0, 0, 0)}
	warmUp(h, lkey, lva, 1, 2)
	for qpn, q := range qs {
		i := uint64(qpn - 1)
		h.post(qpn, &q, 0, hostmem.SendWQE{WRID: uint64(qpn), Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled,
			RemoteAddr: 0x10000 + i*size, RKey: 9, NumSGE: 1,
			SGE: [hostmem.MaxSendSGE]hostmem.SGE{{Addr: lva + i*size, Length: size, LKey: lkey}}})
	}
	type request struct {
		qpn     uint32
		psn     wire.PSN
		va      uint64
		packets int
	}
	var pending []request
	asked := 0 // responses asked for and not yet sent by the peer
	for range 200 {
		h.after(pcieLatency)
		for _, p := range h.sent() {
			if p.Opcode != wire.RCRDMAReadRequest {
				continue
			}
			n := int(p.RETH().DMALen()+mtu-1) / mtu
			if n > 4 {
				t.Fatalf("a READ request asks for %d responses, more than the port's share of 4", n)
			}
			if asked += n; asked > 8 {
				t.Fatalf("%d responses asked for at once, more than half the port's 16", asked)
			}
			pending = append(pending, request{p.BTH().DestQP() - 100, p.BTH().PSN(), p.RETH().VA(), n})
		}
		if len(pending) == 0 {
			if len(h.cqes(ring, 16)) == 2 {
				break
			}
			continue
		}
		// The peer answers its oldest request in full.
		rq := pending[0]
		pending = pending[1:]
		asked -= rq.packets
		for i := range rq.packets {
			op := wire.RCRDMAReadResponseMiddle
			switch {
			case rq.packets == 1:
				op = wire.RCRDMAReadResponseOnly
			case i == 0:
				op = wire.RCRDMAReadResponseFirst
			case i == rq.packets-1:
				op = wire.RCRDMAReadResponseLast
			}
			off := rq.va - 0x10000 + uint64(i*mtu)
			f := wire.FrameFields{BTH: wire.BTHFields{Opcode: op, DestQP: rq.qpn, PSN: rq.psn.Add(uint32(i))}, Payload: remote[off : off+mtu]}
			if op != wire.RCRDMAReadResponseMiddle {
				f.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid)}
			}
			h.request(f)
		}
	}
	cqes := h.cqes(ring, 16)
	if len(cqes) != 2 {
		t.Fatalf("%d CQEs, want both READs'", len(cqes))
	}
	for _, c := range cqes {
		if c.Status != ibv.WCSuccess || c.ByteLen != size {
			t.Errorf("READ %d: %v, %d bytes", c.WRID, c.Status, c.ByteLen)
		}
	}
	if !bytes.Equal(local, remote) {
		t.Error("the READs' data differ from the peer's memory")
	}
	c := &h.nic.counters
	if c.RoomWaits.Load() == 0 {
		t.Error("no READ request waited for room: the test shows nothing")
	}
	if c.RcvdBadResponse.Load() != 0 || c.LocalACKTimeouts.Load() != 0 {
		t.Errorf("bad responses %d, timeouts %d", c.RcvdBadResponse.Load(), c.LocalACKTimeouts.Load())
	}
	if e := h.nic.owner(1); e.awaitOut != 0 {
		t.Errorf("the engine still counts %d answers awaited", e.awaitOut)
	}
}

// Many QPs streaming WRITEs at once never ask for more ACKs than half
// their port can take in: each packet that asks for one (AckReq) counts
// until it is answered, and a QP whose next packet would not fit waits
// (room_waits) until ACKs come. Every WRITE completes. (Without
// congestion control: the harness's clock stands while the engine works,
// and pacing would hold a packet for ever.)
func TestAcksStayWithinReceiveCapacity(t *testing.T) {
	h := newHarnessOn(t, &testPort{capacity: 16}, func(c *NICConfig) { c.NoCongestionControl = true }) // room for 8 answers
	const qps, writes = 4, 12
	ring := h.cq(0, 64)
	lkey, lva := h.mr(make([]byte, 64), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	qs := make([]hostmem.QPCEntry, qps+1)
	for qpn := uint32(1); qpn <= qps; qpn++ {
		qs[qpn] = h.rcQP(qpn, 100+qpn, 0, 0, 0)
	}
	warmUp(h, lkey, lva, 1, 2, 3, 4)
	for qpn := uint32(1); qpn <= qps; qpn++ {
		q := qs[qpn]
		for i := range uint32(writes) {
			h.post(qpn, &q, i, inlineWrite(uint64(qpn)<<8|uint64(i), "data", 0x10000, 9))
		}
	}
	asked := map[uint32][]wire.PSN{} // per QP, the PSNs that asked for an ACK, unanswered
	outstanding, most := 0, 0
	for range 400 {
		h.after(pcieLatency)
		for _, p := range h.sent() {
			if !p.BTH().AckReq() {
				continue
			}
			qpn := p.BTH().DestQP() - 100
			asked[qpn] = append(asked[qpn], p.BTH().PSN())
			outstanding++
		}
		most = max(most, outstanding)
		if outstanding > 8 {
			t.Fatalf("%d packets ask for an ACK at once, more than half the port's 16", outstanding)
		}
		// The peer ACKs one QP's packets in full, in turn.
		for qpn := uint32(1); qpn <= qps; qpn++ {
			if l := asked[qpn]; len(l) > 0 {
				h.ack(qpn, l[len(l)-1], 0)
				outstanding -= len(l)
				asked[qpn] = nil
				break
			}
		}
		if outstanding == 0 && len(h.cqes(ring, 64)) == qps*writes {
			break
		}
	}
	cqes := h.cqes(ring, 64)
	if len(cqes) != qps*writes {
		t.Fatalf("%d CQEs, want %d", len(cqes), qps*writes)
	}
	for _, c := range cqes {
		if c.Status != ibv.WCSuccess {
			t.Errorf("WRITE %#x: %v", c.WRID, c.Status)
		}
	}
	c := &h.nic.counters
	if c.RoomWaits.Load() == 0 || most < 8 {
		t.Errorf("room_waits %d, at most %d ACKs asked for at once: the test shows nothing", c.RoomWaits.Load(), most)
	}
	if c.LocalACKTimeouts.Load() != 0 || c.RetransmittedPkts.Load() != 0 {
		t.Errorf("timeouts %d, retransmitted %d", c.LocalACKTimeouts.Load(), c.RetransmittedPkts.Load())
	}
	if e := h.nic.owner(1); e.awaitOut != 0 {
		t.Errorf("the engine still counts %d answers awaited", e.awaitOut)
	}
}

// A packet the transmit gate holds (here: the QP's replay entries are
// all taken) costs no memory lookups while it waits: the requester asks
// the gate before it resolves the memory the packet sends from, so each
// packet that leaves has looked up its MPT entry and MTT line at most
// once, however often its QP's doorbell rang meanwhile.
func TestHeldPacketCostsNoLookups(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 64)
	const qpn, peer, entries, posts = 1, 101, 2, 6
	q := h.rcQP(qpn, peer, 0, 0, 0)
	r := &h.nic.qps[qpn]
	if err := h.nic.owner(qpn).openQP(qpn, r, entries, &q); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 4096)
	lkey, lva := h.mr(src, ibv.AccessLocalWrite)
	one := func(i uint32) hostmem.SendWQE {
		return hostmem.SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
			RemoteAddr: 0x10000 + uint64(i)*64, RKey: 9, NumSGE: 1,
			SGE: [hostmem.MaxSendSGE]hostmem.SGE{{Addr: lva + uint64(i)*64, Length: 64, LKey: lkey}}}
	}
	// The first WRITE warms the caches: its WQE, MPT entry and MTT line.
	h.post(qpn, &q, 0, one(0))
	for range 8 {
		h.after(pcieLatency)
	}
	if got := len(h.sent()); got != 1 {
		t.Fatalf("the first WRITE: %d packets sent, want 1", got)
	}
	h.ack(qpn, 0, 1)
	h.turns()

	mpt, mtt := h.nic.counters.CtxLookups[hostmem.MPT].Load(), h.nic.counters.CtxLookups[hostmem.MTT].Load()
	sent := 0
	for i := uint32(1); i <= posts; i++ { // each post rings the doorbell and runs the requester again
		h.post(qpn, &q, i, one(i))
		for range 4 {
			h.after(pcieLatency)
		}
		sent += len(h.sent())
	}
	if sent != entries {
		t.Fatalf("%d WRITEs left with %d replay entries and no ACK, want %d", sent, entries, entries)
	}
	for sent < posts { // the peer acknowledges what came (PSN sent, the warm-up's 0 before it)
		h.ack(qpn, wire.PSN(sent), uint32(sent+1))
		for range 4 {
			h.after(pcieLatency)
		}
		n := len(h.sent())
		if n == 0 {
			t.Fatalf("after the ACK of PSN %d no more WRITEs left (%d of %d sent)", sent, sent, posts)
		}
		sent += n
	}
	// Packets that leave in one turn share their lookups: at most one
	// each, at least one per turn.
	if got := h.nic.counters.CtxLookups[hostmem.MPT].Load() - mpt; got == 0 || got > posts {
		t.Errorf("%d MPT lookups for %d WRITE packets, want at most one each (a held packet looked its memory up again)", got, posts)
	}
	if got := h.nic.counters.CtxLookups[hostmem.MTT].Load() - mtt; got == 0 || got > posts {
		t.Errorf("%d MTT lookups for %d WRITE packets, want at most one each", got, posts)
	}
}
