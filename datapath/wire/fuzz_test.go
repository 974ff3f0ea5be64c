package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

func addSeedFrames(f *testing.F) {
	for i, op := range wiretest.Opcodes() {
		f.Add(wiretest.SampleFrame(op, i*7%70, i%2 == 1, uint32(i)))
	}
	b := wiretest.SampleFrame(wire.RCSendOnly, 3, false, 1)
	f.Add(b[:len(b)-2])
	f.Add(append(b, 0, 0))
}

// FuzzParse feeds arbitrary frames to Parse. It must not panic; a frame it
// accepts must have consistent offsets and a good ICRC, and decoding its
// fields and encoding them again must give the same packet (byte for byte
// when its reserved bits and pad are zero).
func FuzzParse(f *testing.F) {
	addSeedFrames(f)
	buf := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkParsed(t, frame, buf)
		// Random bytes rarely carry a good ICRC: repair it so that the
		// checks after the ICRC see the frame too.
		fixed := append([]byte{}, frame...)
		if wire.UpdateICRC(fixed) == nil {
			checkParsed(t, fixed, buf)
		}
	})
}

func checkParsed(t *testing.T, frame, buf []byte) {
	var p wire.Packet
	err := wire.Parse(frame, &p)
	qpn, req, ok := wire.PeekDestQP(frame) // on any bytes: never panics
	if err == nil && (!ok || qpn != p.BTH().DestQP() || req != (p.Info.Flags&wire.OpRequest != 0)) {
		t.Fatalf("PeekDestQP: QP %d request %v ok %v; Parse: QP %d, flags %v", qpn, req, ok, p.BTH().DestQP(), p.Info.Flags)
	}
	var pe wire.ParseError
	if err != nil {
		if !errors.As(err, &pe) || err.Error() == "" {
			t.Fatalf("error %v is not a ParseError", err)
		}
		return
	}
	if !(p.IPOff < p.UDPOff && p.UDPOff < p.BTHOff && p.BTHOff < p.PayloadOff &&
		p.PayloadOff+p.PayloadLen <= p.ICRCOff && p.ICRCOff+wire.ICRCLen == p.Len() && p.Len() <= len(frame)) {
		t.Fatalf("inconsistent offsets %+v", p)
	}
	if p.ICRC() != p.ComputeICRC() || p.PadCount() != p.BTH().PadCount() {
		t.Fatalf("accepted a frame with a bad ICRC or pad")
	}
	var fields wire.FrameFields
	p.Fields(&fields)
	n, err := wire.Encode(buf, &fields)
	if err != nil {
		if !p.IPv6 && p.IPv4Header().HeaderLen() > wire.IPv4MinLen {
			return // IPv4 options: accepted on receive, never sent
		}
		t.Fatalf("re-encode: %v", err)
	}
	var q wire.Packet
	if err := wire.Parse(buf[:n], &q); err != nil {
		t.Fatalf("re-encoded frame does not parse: %v", err)
	}
	var again wire.FrameFields
	q.Fields(&again)
	normalize(&fields, p.Opcode)
	normalize(&again, p.Opcode)
	if !reflect.DeepEqual(fields, again) {
		t.Fatalf("fields changed\n got %+v\nwant %+v", again, fields)
	}
	if reservedZero(&p) && !bytes.Equal(buf[:n], p.Frame) {
		t.Fatalf("re-encoded frame differs\n got %x\nwant %x", buf[:n], p.Frame)
	}
}

// reservedZero reports whether a packet's reserved bits and pad bytes are
// zero and its IPv4 header has no options: the frames Encode reproduces
// byte for byte.
func reservedZero(p *wire.Packet) bool {
	b := p.BTH()
	if b[4]&0x3f != 0 || b[8]&0x7f != 0 {
		return false
	}
	if d := p.DETH(); d != nil && d[4] != 0 {
		return false
	}
	if p.Info.Has(wire.HdrCNP) {
		off := p.BTHOff + p.Info.Offset(wire.HdrCNP)
		for _, c := range p.Frame[off : off+wire.CNPLen] {
			if c != 0 {
				return false
			}
		}
	}
	for _, c := range p.Frame[p.PayloadOff+p.PayloadLen : p.ICRCOff] {
		if c != 0 {
			return false
		}
	}
	return p.IPv6 || p.IPv4Header().HeaderLen() == wire.IPv4MinLen
}

// FuzzEncodeParse builds frames from arbitrary field values: Encode either
// refuses them with a ParseError or writes a frame that Parse accepts and
// decodes to the same fields.
func FuzzEncodeParse(f *testing.F) {
	f.Add(uint8(wire.RCSendOnly), uint8(0), uint32(0x123456), uint32(7), uint64(0x7fdd538a2000), uint32(0x53d), uint64(1), uint64(2), []byte("hello"))
	f.Add(uint8(wire.UDSendOnlyWithImmediate), uint8(3), uint32(1), uint32(0xffffff), uint64(0), uint32(0), uint64(0), uint64(0), []byte{})
	f.Add(uint8(wire.RCCompareSwap), uint8(1), uint32(2), uint32(3), uint64(4), uint32(5), uint64(6), uint64(7), []byte(nil))
	f.Add(uint8(wire.CNP), uint8(2), uint32(2), uint32(3), uint64(4), uint32(5), uint64(6), uint64(7), []byte(nil))
	f.Add(uint8(0x15), uint8(0), uint32(0), uint32(0), uint64(0), uint32(0), uint64(0), uint64(0), []byte(nil))
	buf := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, op, flags uint8, qp, psn uint32, va uint64, key uint32, a, b uint64, payload []byte) {
		var fields wire.FrameFields
		fields.Ethernet = wire.EthernetFields{Dst: wire.MAC{2, 0, 0, 0, 0, byte(qp)}, Src: wire.MAC{2, 0, 0, 0, 1, byte(psn)}, VLAN: flags&8 != 0, VLANTCI: uint16(key)}
		fields.IPv6 = flags&1 != 0
		var a4 [4]byte
		binary.BigEndian.PutUint32(a4[:], key)
		fields.IP4 = wire.IPv4Fields{TOS: byte(a), ID: uint16(b), Flags: wire.IPv4FlagDF, TTL: byte(a >> 8), Src: netip.AddrFrom4(a4), Dst: netip.AddrFrom4([4]byte{10, 0, 0, byte(qp)})}
		var a16 [16]byte
		binary.BigEndian.PutUint64(a16[:], va)
		binary.BigEndian.PutUint64(a16[8:], a)
		fields.IP6 = wire.IPv6Fields{TrafficClass: byte(b), FlowLabel: uint32(a) & 0xfffff, HopLimit: byte(b >> 8), Src: netip.AddrFrom16(a16), Dst: netip.AddrFrom16([16]byte{0xfd, 15: byte(qp)})}
		fields.UDP = wire.UDPFields{SrcPort: uint16(psn), DstPort: wire.RoCEv2Port, Checksum: uint16(a >> 16), ComputeChecksum: flags&2 != 0}
		fields.BTH = wire.BTHFields{Opcode: wire.Opcode(op), SE: flags&16 != 0, MigReq: flags&32 != 0, PKey: uint16(key >> 16),
			FECN: flags&64 != 0, BECN: flags&128 != 0, DestQP: qp & 0xffffff, AckReq: flags&4 != 0, PSN: wire.PSN(psn) & wire.PSNMask}
		fields.DETH = wire.DETHFields{QKey: key, SrcQP: uint32(a) & 0xffffff}
		fields.RETH = wire.RETHFields{VA: va, RKey: key, DMALen: uint32(b)}
		fields.AtomicETH = wire.AtomicETHFields{VA: va, RKey: key, SwapAdd: a, Compare: b}
		fields.AETH = wire.AETHFields{Syndrome: wire.Syndrome(a), MSN: uint32(b) & 0xffffff}
		fields.AtomicOrigData = a
		fields.Imm = uint32(b)
		fields.InvalidateRKey = key
		fields.Payload = payload
		n, err := wire.Encode(buf, &fields)
		if err != nil {
			var pe wire.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Encode error %v is not a ParseError", err)
			}
			return
		}
		var p wire.Packet
		if err := wire.Parse(buf[:n], &p); err != nil {
			t.Fatalf("Parse(Encode(...)) = %v", err)
		}
		var got wire.FrameFields
		p.Fields(&got)
		want := fields
		normalize(&want, want.BTH.Opcode)
		normalize(&got, want.BTH.Opcode)
		if want.UDP.ComputeChecksum || fields.UDP.ComputeChecksum {
			got.UDP.Checksum, want.UDP.Checksum = 0, 0
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fields differ\n got %+v\nwant %+v", got, want)
		}
	})
}
