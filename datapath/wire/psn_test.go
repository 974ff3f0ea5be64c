package wire_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
)

func TestPSN(t *testing.T) {
	tests := []struct {
		a, b  wire.PSN
		diff  int32
		after bool
	}{
		{0, 0, 0, false},
		{1, 0, 1, true},
		{0, 1, -1, false},
		{0, 0xffffff, 1, true}, // wraps
		{0xffffff, 0, -1, false},
		{0x7fffff, 0, 0x7fffff, true},   // the far edge of the window
		{0x800000, 0, -0x800000, false}, // exactly half way: before
		{0x5878e9, 0x5878e0, 9, true},
	}
	for _, tt := range tests {
		if d := tt.a.Diff(tt.b); d != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.a, tt.b, d, tt.diff)
		}
		if tt.a.After(tt.b) != tt.after {
			t.Errorf("%#x.After(%#x) = %v", tt.a, tt.b, !tt.after)
		}
		if tt.a.Before(tt.b) != (tt.diff < 0) {
			t.Errorf("%#x.Before(%#x) wrong", tt.a, tt.b)
		}
	}
	if got := wire.PSN(0xfffffe).Add(3); got != 1 {
		t.Errorf("Add wraps to %#x", got)
	}
	if got := wire.PSN(1).Sub(3); got != 0xfffffe {
		t.Errorf("Sub wraps to %#x", got)
	}
	if got := wire.PSNMask.Next(); got != 0 {
		t.Errorf("Next wraps to %#x", got)
	}
	if !wire.PSN(2).InWindow(0xfffff0, 20) || wire.PSN(4).InWindow(0xfffff0, 20) {
		t.Error("InWindow across the wrap")
	}
}

// TestPSNModel checks PSN arithmetic against plain integers: a sender that
// numbers packets from a random start, and pairs within half the space.
func TestPSNModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		base := r.Int64N(1 << 40)    // an unbounded packet count
		d := r.Int64N(1<<24) - 1<<23 // a distance in [-2^23, 2^23)
		a := wire.PSN(uint32(base+d) & uint32(wire.PSNMask))
		b := wire.PSN(uint32(base) & uint32(wire.PSNMask))
		if a.Diff(b) != int32(d) {
			t.Fatalf("base %d d %d: Diff = %d", base, d, a.Diff(b))
		}
		if a.After(b) != (d > 0) || a.Before(b) != (d < 0) {
			t.Fatalf("base %d d %d: After/Before wrong", base, d)
		}
		n := uint32(r.Int64N(1 << 24))
		if b.Add(n) != wire.PSN(uint32(base+int64(n))&uint32(wire.PSNMask)) {
			t.Fatalf("Add(%d) wrong", n)
		}
		if d >= 0 && !a.InWindow(b, uint32(d)+1) || d >= 0 && a.InWindow(b, uint32(d)) {
			t.Fatalf("InWindow(base %d, d %d) wrong", base, d)
		}
	}
}

func TestPKeyMatch(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{
		{0xffff, 0xffff, true},  // default, full members
		{0x7fff, 0xffff, true},  // limited member meets a full one
		{0xffff, 0x7fff, true},  //
		{0x7fff, 0x7fff, false}, // two limited members may not talk
		{0x1234, 0xffff, false}, // another partition
		{0x9234, 0xffff, false}, //
		{0x8000, 0x8000, false}, // the invalid P_Key
		{0x0000, 0xffff, false},
	} {
		if got := wire.PKeyMatch(tc.a, tc.b); got != tc.want {
			t.Errorf("PKeyMatch(%#04x, %#04x) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestECN(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, ecn := range []uint8{wire.ECNNotECT, 1, wire.ECT0, wire.ECNCE} {
			var f wire.FrameFields
			f.Ethernet = wire.EthernetFields{}
			if v6 {
				f.IPv6 = true
				f.IP6 = wire.IPv6Fields{TrafficClass: 0xa0 | ecn, HopLimit: 64, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
			} else {
				f.IP4 = wire.IPv4Fields{TOS: 0xa0 | ecn, TTL: 64, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
			}
			f.UDP.DstPort = wire.RoCEv2Port
			f.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: 17}
			b := make([]byte, 256)
			k, err := wire.Encode(b, &f)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			if err := wire.Parse(b[:k], &p); err != nil {
				t.Fatal(err)
			}
			if p.ECN() != ecn {
				t.Errorf("IPv6 %v: ECN %d, want %d", v6, p.ECN(), ecn)
			}
		}
	}
}
