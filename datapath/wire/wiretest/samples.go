package wiretest

import (
	"net/netip"

	"github.com/softrnic/softrnic/datapath/wire"
)

// Addresses the sample frames use (inside test namespaces only).
var (
	MACA = wire.MAC{0x02, 0x53, 0x52, 0x00, 0x00, 0x01}
	MACB = wire.MAC{0x02, 0x53, 0x52, 0x00, 0x00, 0x02}
	IP4A = netip.MustParseAddr("10.47.0.1")
	IP4B = netip.MustParseAddr("10.47.0.2")
	IP6A = netip.MustParseAddr("fd47::1")
	IP6B = netip.MustParseAddr("fd47::2")
)

// Opcodes returns every opcode in the table, in numeric order.
func Opcodes() []wire.Opcode {
	var ops []wire.Opcode
	for i := range 256 {
		if op := wire.Opcode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// SampleFields returns fields for a frame of opcode op with distinctive
// values in every header the opcode carries, and payloadLen bytes of a
// counting pattern when the opcode carries a payload. seq varies the PSN,
// QPs and keys so that frames differ.
func SampleFields(op wire.Opcode, payloadLen int, ipv6 bool, seq uint32) wire.FrameFields {
	f := wire.FrameFields{
		Ethernet: wire.EthernetFields{Dst: MACB, Src: MACA},
		IPv6:     ipv6,
		IP4:      wire.IPv4Fields{ID: uint16(seq), Flags: wire.IPv4FlagDF, TTL: 64, Src: IP4A, Dst: IP4B},
		IP6:      wire.IPv6Fields{FlowLabel: 0x12345 + seq, HopLimit: 64, Src: IP6A, Dst: IP6B},
		UDP:      wire.UDPFields{SrcPort: wire.SourcePort(0x11+seq, 0x22), DstPort: wire.RoCEv2Port},
		BTH: wire.BTHFields{
			Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x123456 ^ seq&0xffff,
			AckReq: seq%2 == 0, SE: seq%3 == 0, PSN: wire.PSN(0xabcdef).Add(seq),
		},
		DETH:           wire.DETHFields{QKey: 0x11111111 + seq, SrcQP: 0x000abc + seq},
		RETH:           wire.RETHFields{VA: 0x00007fdd538a2000 + uint64(seq)*4096, RKey: 0x0000053d + seq, DMALen: uint32(payloadLen) + 1000},
		AtomicETH:      wire.AtomicETHFields{VA: 0x00007fdd538a3000 + uint64(seq)*8, RKey: 0x00000600 + seq, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718 + uint64(seq)},
		AETH:           wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 0x000042 + seq},
		AtomicOrigData: 0x2122232425262728 + uint64(seq),
		Imm:            0xdeadbeef ^ seq,
		InvalidateRKey: 0x080002d7 + seq,
	}
	if op.Info().Flags&wire.OpPayload != 0 {
		f.Payload = make([]byte, payloadLen)
		for i := range f.Payload {
			f.Payload[i] = byte(i + int(seq))
		}
	}
	return f
}

// SampleFrame encodes SampleFields; it panics if the fields do not encode.
func SampleFrame(op wire.Opcode, payloadLen int, ipv6 bool, seq uint32) []byte {
	f := SampleFields(op, payloadLen, ipv6, seq)
	n, err := f.FrameLen()
	if err != nil {
		panic(err)
	}
	buf := make([]byte, n)
	if _, err := wire.Encode(buf, &f); err != nil {
		panic(err)
	}
	return buf
}
