package datapath

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// Every packet a QP receives marked Congestion Experienced is answered by
// a CNP to its peer, an ACK as a request (at most one per cnpInterval).
func TestCNPForMarkedAck(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 64)
	q := h.rcQP(respQP, respPeer, 0, 0, 0)
	h.post(respQP, &q, 0, inlineWrite(1, "hello", 0x1000, 7))
	var got []wire.Packet
	settle := func() {
		got = got[:0]
		for range 20 {
			h.after(pcieLatency)
			got = append(got, h.sent()...)
		}
	}
	if settle(); len(got) != 1 {
		t.Fatalf("%d packets for one WRITE", len(got))
	}
	h.tos = wire.ECNCE
	h.ack(respQP, 0, 1)
	settle()
	if len(got) != 1 || got[0].Opcode != wire.CNP || got[0].BTH().DestQP() != respPeer || !got[0].BTH().BECN() {
		t.Fatalf("a marked ACK was answered by %v, want one CNP to QP %d", got, respPeer)
	}
	if n := h.nic.counters.NPCNPSent.Load(); n != 1 {
		t.Errorf("np_cnp_sent %d, want 1", n)
	}
}

// With DCQCN, a CNP limits a QP's rate, and the READ responses it
// answers with go at that rate, even on a QP that never sent a request.
func TestDCQCNPacesReadResponses(t *testing.T) {
	p := reliability.DefaultDCQCN()
	p.LineRate, p.FirstRate = 10e9, 1e9 // the first CNP: 1 Gbit/s, cut to 0.5
	p.RateTimer = time.Second           // and no increase during the test
	h := newHarnessOn(t, &testPort{}, func(c *NICConfig) { c.DCQCN = &p })
	rt := &respTest{harness: h, ring: h.cq(0, 64)}
	rt.q = h.rcQP(respQP, respPeer, 0, 0, 8)
	const packets, mtu = 256, 1024
	key, va := rt.mr(make([]byte, packets*mtu), ibv.AccessRemoteRead)
	rt.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.CNP, DestQP: respQP, BECN: true}})
	for range 20 {
		rt.after(pcieLatency)
	}
	if n := h.nic.counters.RPCNPHandled.Load(); n != 1 {
		t.Fatalf("rp_cnp_handled %d, want 1", n)
	}
	rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAReadRequest, 0),
		RETH: wire.RETHFields{VA: va, RKey: key, DMALen: packets * mtu}})
	n := 0
	start := rt.clock.Now()
	for range 200 {
		rt.after(10 * time.Microsecond)
		n += len(rt.sent())
	}
	// 0.5 Gbit/s, after a burst of 16 KiB.
	span := rt.clock.Now().Sub(start)
	bits := float64(n*(mtu+reliability.PacketOverhead)*8) / span.Seconds()
	if bits < 0.45e9 || bits > 0.6e9 {
		t.Errorf("%d responses in %v: %.2f Gbit/s, want about 0.5", n, span, bits/1e9)
	}
}
