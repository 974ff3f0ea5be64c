package wire_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

// headerChange changes a header field of a parsed packet in place.
type headerChange struct {
	name string
	do   func(p *wire.Packet, r *rand.Rand)
}

var headerChanges = []headerChange{
	{"IPv4 ID", func(p *wire.Packet, r *rand.Rand) {
		if ip := p.IPv4Header(); ip != nil {
			ip.SetID(uint16(r.Uint32()))
		}
	}},
	{"UDP source port", func(p *wire.Packet, r *rand.Rand) { p.UDP().SetSrcPort(uint16(r.Uint32())) }},
	{"source address", func(p *wire.Packet, r *rand.Rand) {
		if ip := p.IPv4Header(); ip != nil {
			ip.SetSrc(netip.AddrFrom4([4]byte{10, byte(r.Uint32()), byte(r.Uint32()), 1}))
		} else {
			p.IPv6Header().SetSrc(netip.AddrFrom16([16]byte{0xfd, 15: byte(r.Uint32())}))
		}
	}},
	{"TOS and checksum (masked)", func(p *wire.Packet, r *rand.Rand) {
		if ip := p.IPv4Header(); ip != nil {
			ip.SetTOS(uint8(r.Uint32()))
			ip.SetChecksum(ip.ComputeChecksum())
		}
	}},
	{"nothing", func(*wire.Packet, *rand.Rand) {}},
}

// TestUpdateICRCFrom: the ICRC carried forward from a header change is the
// one computed afresh over the whole packet, for every change, family and
// payload length (table of changes; random values).
func TestUpdateICRCFrom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, ch := range headerChanges {
		t.Run(ch.name, func(t *testing.T) {
			for _, ipv6 := range []bool{false, true} {
				for _, size := range []int{0, 1, 3, 4, 255, 1024, 4096, 9000 - 100} {
					for _, op := range []wire.Opcode{wire.RCRDMAWriteMiddle, wire.RCRDMAWriteFirst, wire.UDSendOnly, wire.RCAcknowledge} {
						f := wiretest.SampleFields(op, size, ipv6, uint32(size))
						if op == wire.RCAcknowledge {
							f.Payload = nil
						}
						n, err := f.FrameLen()
						if err != nil {
							t.Fatal(err)
						}
						b := make([]byte, n)
						wire.Encode(b, &f)
						var p wire.Packet
						if err := wire.Parse(b, &p); err != nil {
							t.Fatal(err)
						}
						old := p.CopyHeaders()
						ch.do(&p, r)
						p.UpdateICRCFrom(&old)
						if got, want := p.ICRC(), p.ComputeICRC(); got != want {
							t.Fatalf("%v ipv6=%v payload %d: ICRC %#x, want %#x", op, ipv6, size, got, want)
						}
					}
				}
			}
		})
	}
}

// FuzzUpdateICRCFrom: any change to the IP and UDP headers of a valid
// packet is carried into its ICRC as a full recomputation would.
func FuzzUpdateICRCFrom(f *testing.F) {
	f.Add(false, uint16(100), []byte{4, 0x12, 5, 0x34})
	f.Add(true, uint16(4096), []byte{8, 0xff, 30, 1, 41, 2})
	f.Fuzz(func(t *testing.T, ipv6 bool, size uint16, edits []byte) {
		fs := wiretest.SampleFields(wire.RCRDMAWriteMiddle, int(size%9000), ipv6, 1)
		n, _ := fs.FrameLen()
		b := make([]byte, n)
		wire.Encode(b, &fs)
		var p wire.Packet
		if err := wire.Parse(b, &p); err != nil {
			t.Fatal(err)
		}
		old := p.CopyHeaders()
		hdr := p.Frame[p.IPOff : p.UDPOff+wire.UDPLen]
		for i := 0; i+1 < len(edits); i += 2 {
			hdr[int(edits[i])%len(hdr)] ^= edits[i+1]
		}
		p.UpdateICRCFrom(&old)
		if got, want := p.ICRC(), p.ComputeICRC(); got != want {
			t.Fatalf("ICRC %#x, want %#x", got, want)
		}
	})
}
