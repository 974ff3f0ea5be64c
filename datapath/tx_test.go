package datapath

import (
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
)

// The ECN field a NIC's packets carry, by its choice and whether its RC
// senders react to CNPs; every choice by its name.
func TestECNChoice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noCC  bool
		field uint8
	}{
		{"auto", false, wire.ECT0},
		{"auto", true, wire.ECNNotECT}, // no one would slow down for a mark
		{"off", false, wire.ECNNotECT},
		{"ect0", true, wire.ECT0},
		{"ect1", false, wire.ECT1},
	} {
		c, err := ParseECN(tc.name)
		if err != nil || c.String() != tc.name {
			t.Fatalf("ParseECN(%q) = %v, %v", tc.name, c, err)
		}
		if got := c.field(tc.noCC); got != tc.field {
			t.Errorf("%s, no congestion control %v: ECN field %d, want %d", tc.name, tc.noCC, got, tc.field)
		}
	}
	if _, err := ParseECN("ce"); err == nil {
		t.Error("ParseECN took ce")
	}

	// A NIC with the default choice sends its ACKs ECT(0).
	h := newHarness(t)
	h.cq(0, 16)
	h.rcQP(17, 100, 0, 0, 0)
	key, va := h.mr(make([]byte, 64), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	h.write(17, 0, key, va, []byte("x"))
	for range 8 {
		h.after(pcieLatency)
	}
	sent := h.sent()
	if len(sent) != 1 || sent[0].ECN() != wire.ECT0 {
		t.Fatalf("sent %d packets; want one ACK, ECT(0)", len(sent))
	}
}

// TestTrafficClass: a QP's traffic class (its AV's, rdma_cm's TOS) gives
// its frames' DSCP, for responses too, and the NIC keeps the ECN bits its
// own; a UD send takes its WQE's address vector's.
func TestTrafficClass(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	q.TClass = 46<<2 | 3 // DSCP 46 (EF) and ECN bits the NIC must not take
	h.rcQPAt(17, q)
	key, va := h.mr(make([]byte, 64), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	h.write(17, 0, key, va, []byte("x"))
	for range 8 {
		h.after(pcieLatency)
	}
	sent := h.sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d packets; want one ACK", len(sent))
	}
	if tos := sent[0].Frame[sent[0].IPOff+1]; tos>>2 != 46 || sent[0].ECN() != wire.ECT0 {
		t.Errorf("ACK's TOS %#x: want DSCP 46 and ECT(0)", tos)
	}
}

// TestTxBufferWhenPortFull: a turn that sends more frames than the port
// has transmit buffers waits for them to come free (txBuffer flushes the
// batch and the port) and goes on: every frame leaves in its own buffer,
// in PSN order, none lost or sent twice. (The buffer taken after that
// wait was put in the batch's old place, which the flush had emptied, and
// the frame went out under the last sent frame's emptied name: on the
// xsk port, another buffer's bytes. A UC WRITE of 4 MiB, 4096 frames
// through 1024 buffers, arrived with packets of a thousand PSNs later in
// its place, and broke.)
func TestTxBufferWhenPortFull(t *testing.T) {
	h := newHarnessOn(t, &testPort{txSlots: 3})
	h.cq(0, 64)
	lkey, lva := h.mr(make([]byte, 64), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	q := h.rcQP(1, 101, 0, 0, 0)
	warmUp(h, lkey, lva, 1)
	const writes = 10
	for i := range uint32(writes) {
		h.writeWQE(&q, i, inlineWrite(uint64(i), "data", 0x10000, 9))
	}
	h.nic.Ring(Doorbell{QPN: 1, Producer: writes}) // one doorbell: the turns send what the window allows
	var sent []wire.Packet
	for round := 0; len(sent) < writes && round < 100; round++ {
		for range 8 { // the WQEs' fetch
			h.after(pcieLatency)
		}
		got := h.sent()
		sent = append(sent, got...)
		if len(got) > 0 {
			h.ack(1, got[len(got)-1].BTH().PSN(), 0)
		}
	}
	if h.port.badSend > 0 {
		t.Fatalf("%d frames went out under a buffer's name that was not lent", h.port.badSend)
	}
	if len(sent) != writes {
		t.Fatalf("%d frames sent, want %d", len(sent), writes)
	}
	for i, p := range sent {
		if p.Opcode != wire.RCRDMAWriteOnly || p.BTH().PSN() != wire.PSN(i) {
			t.Fatalf("frame %d: %v PSN %d, want WRITE_ONLY PSN %d", i, p.Opcode, p.BTH().PSN(), i)
		}
	}
	if h.port.allocShort == 0 {
		t.Fatal("the port never ran out of transmit buffers: the test tests nothing")
	}
}

// The address a frame leaves from, by its destination: IP for its own
// family, else the first of Addrs of the destination's family and scope,
// else IP.
func TestSources(t *testing.T) {
	a := netip.MustParseAddr
	v4, v6, ll, v6b := a("10.0.0.1"), a("fd00::1"), a("fe80::1"), a("2001:db8::1")
	for _, tc := range []struct {
		name  string
		ip    netip.Addr
		addrs []netip.Addr
		dst   netip.Addr
		want  netip.Addr
	}{
		{"IPv4 alone, to IPv4", v4, nil, a("10.0.0.2"), v4},
		{"IPv4 alone, to IPv6: no better", v4, nil, a("fd00::2"), v4},
		{"to IPv6 global", v4, []netip.Addr{ll, v6, v6b}, a("fd00::2"), v6},
		{"to IPv6 link-local", v4, []netip.Addr{v6, ll}, a("fe80::2"), ll},
		{"to IPv4 with the netdev's GIDs, IP among them", v4, []netip.Addr{ll, a("::ffff:10.0.0.1"), v6}, a("10.0.0.2"), v4},
		{"IPv6 first, to IPv4", v6, []netip.Addr{ll, v4}, a("10.0.0.2"), v4},
		{"IPv6 first, to IPv6", v6, []netip.Addr{v6b}, a("2001:db8::2"), v6},
	} {
		s := newSources(tc.ip, tc.addrs)
		if got := s.forDst(tc.dst); got != tc.want {
			t.Errorf("%s: from %v to %v, want %v", tc.name, got, tc.dst, tc.want)
		}
	}
}
