package tests

import (
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestGSOOnTheWire: frames the kernel UDP port sends as UDP GSO messages
// reach the wire as one RoCEv2 packet a segment, each with the IPv4 ID
// the kernel gave it and an ICRC that covers it: an xsk port, which sees
// the frames as they crossed the veth, verifies every ICRC. This is what
// a peer that checks the ICRC (rxe, a hardware RNIC) receives.
func TestGSOOnTheWire(t *testing.T) {
	spec := topo.PairSpec(9000, 1)
	tp := topo.New(t, spec)
	l := spec.Links[0]
	tx := openPort(t, tp.NS("a"), l.A, "udp").(*udpport.Port)
	rx := openPort(t, tp.NS("b"), l.B, "xsk")
	src, dst := l.A.Addrs[0].Addr(), l.B.Addrs[0].Addr()
	var frames [][]byte
	const n = 40
	for i := range n {
		size := 4096
		if i == n-1 {
			size = 100
		}
		f := wiretest.SampleFields(wire.RCRDMAWriteMiddle, size, false, uint32(i))
		f.Ethernet.Src, f.Ethernet.Dst = wire.MAC(l.A.MAC), wire.MAC(l.B.MAC)
		f.IP4.Src, f.IP4.Dst = src, dst
		f.UDP.SrcPort = 0xc001 // one flow
		k, _ := f.FrameLen()
		b := make([]byte, k)
		wire.Encode(b, &f)
		frames = append(frames, b)
	}
	porttest.SendAll(t, tx, frames)
	got := porttest.ReceiveN(t, rx, n)
	if len(got) != n {
		t.Fatalf("%d of %d frames", len(got), n)
	}
	if s := tx.Stats().TxSegmented.Load(); s == 0 {
		t.Fatal("no frame went in a GSO message")
	}
	for i, g := range got {
		var pkt wire.Packet
		if err := wire.Parse(g.Data, &pkt); err != nil {
			t.Fatalf("frame %d as it crossed the wire: %v", i, err)
		}
		if pkt.BTH().PSN() != wire.PSN(0xabcdef).Add(uint32(i)) {
			t.Fatalf("frame %d: PSN %v, out of order", i, pkt.BTH().PSN())
		}
	}
}
