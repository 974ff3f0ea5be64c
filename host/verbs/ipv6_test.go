package verbs_test

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestIPv6GID: two NICs whose netdevs have an IPv4 address (their IP)
// and an IPv6 one (NICConfig.Addrs), their RC QPs connected by the IPv6
// GIDs, as a program that picks an IPv6 GID index connects them: a
// WRITE and a READ go through, every frame IPv6 between those two
// addresses. (Sent from the IPv4 address in an IPv6 header, and taken
// only when sent to it, such a QP's frames were all dropped.)
func TestIPv6GID(t *testing.T) {
	a6, b6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	var v6, other atomic.Int64
	watch := func(frame []byte) bool {
		var p wire.Packet
		if wire.Parse(frame, &p) == nil && p.IPv6 {
			if h := p.IPv6Header(); h.Src() == a6 && h.Dst() == b6 || h.Src() == b6 && h.Dst() == a6 {
				v6.Add(1)
				return false
			}
		}
		other.Add(1)
		return false
	}
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192, Drop: watch})
	cfg := func(p datapath.Port, last byte, ip6 netip.Addr) verbs.DeviceConfig {
		return verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}),
			Addrs: []netip.Addr{netip.MustParseAddr("fe80::1:" + string('0'+rune(last))), ip6}}, Port: p}
	}
	a := verbstest.NewEndConfig(t, cfg(pa, 1, a6), bufSize)
	b := verbstest.NewEndConfig(t, cfg(pb, 2, b6), bufSize)
	if err := verbs.ConnectRC(a.QP, b.QP, verbs.AH{DestMAC: a.MAC, DestGID: a6}, verbs.AH{DestMAC: b.MAC, DestGID: b6}, 3, 14); err != nil {
		t.Fatal(err)
	}
	const size = 100000
	fill(a.Buf[:size], 9)
	if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, 1, 0, size, 0),
		{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: sgl(a, 1<<20, size), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %+v", wc)
		}
	}
	b.Dev.Fence()
	if !bytes.Equal(b.Buf[:size], a.Buf[:size]) || !bytes.Equal(a.Buf[1<<20:1<<20+size], a.Buf[:size]) {
		t.Fatal("data differs")
	}
	if v6.Load() == 0 || other.Load() != 0 {
		t.Fatalf("%d frames IPv6 between the QPs' GIDs, %d others", v6.Load(), other.Load())
	}
	if c := b.Counts; c.RcvdBadAddr.Load() != 0 {
		t.Fatalf("the responder dropped %d frames for their addresses", c.RcvdBadAddr.Load())
	}
}
