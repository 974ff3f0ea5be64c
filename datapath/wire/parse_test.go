package wire_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

// variant is one network-layer shape of a sample frame.
type variant struct {
	name string
	ipv6 bool
	vlan bool
}

var variants = []variant{{"ipv4", false, false}, {"ipv6", true, false}, {"vlan-ipv4", false, true}}

func sample(t testing.TB, op wire.Opcode, payload int, v variant, seq uint32) (wire.FrameFields, []byte) {
	t.Helper()
	f := wiretest.SampleFields(op, payload, v.ipv6, seq)
	f.Ethernet.VLAN = v.vlan
	f.Ethernet.VLANTCI = 0x2064
	n, err := f.FrameLen()
	if err != nil {
		t.Fatalf("%v: FrameLen: %v", op, err)
	}
	buf := make([]byte, n)
	if m, err := wire.Encode(buf, &f); err != nil || m != n {
		t.Fatalf("%v: Encode = %d, %v; want %d", op, m, err, n)
	}
	return f, buf
}

// TestRoundTripEveryOpcode encodes every opcode at several payload sizes and
// checks that Parse gives back every field, the payload and the headers the
// opcode carries, and nothing else.
func TestRoundTripEveryOpcode(t *testing.T) {
	sizes := []int{0, 1, 2, 3, 4, 5, 255, 1023, 1024, 4096}
	headers := []struct {
		h   wire.Header
		get func(*wire.Packet) []byte
	}{
		{wire.HdrDETH, func(p *wire.Packet) []byte { return p.DETH() }},
		{wire.HdrRETH, func(p *wire.Packet) []byte { return p.RETH() }},
		{wire.HdrAtomicETH, func(p *wire.Packet) []byte { return p.AtomicETH() }},
		{wire.HdrAETH, func(p *wire.Packet) []byte { return p.AETH() }},
		{wire.HdrAtomicAckETH, func(p *wire.Packet) []byte { return p.AtomicAckETH() }},
		{wire.HdrImmDt, func(p *wire.Packet) []byte { return p.ImmDt() }},
		{wire.HdrIETH, func(p *wire.Packet) []byte { return p.IETH() }},
	}
	for _, op := range wiretest.Opcodes() {
		for _, v := range variants {
			for i, size := range sizes {
				if size > 0 && op.Info().Flags&wire.OpPayload == 0 {
					continue
				}
				t.Run(fmt.Sprintf("%v/%s/%d", op, v.name, size), func(t *testing.T) {
					want, frame := sample(t, op, size, v, uint32(i))
					var p wire.Packet
					if err := wire.Parse(frame, &p); err != nil {
						t.Fatalf("Parse: %v", err)
					}
					if p.Opcode != op || p.IPv6 != v.ipv6 || p.VLAN != v.vlan || p.PayloadLen != size || p.PadCount() != -size&3 {
						t.Errorf("opcode %v ipv6 %v vlan %v payload %d pad %d", p.Opcode, p.IPv6, p.VLAN, p.PayloadLen, p.PadCount())
					}
					if got := p.BTH().PadCount(); got != -size&3 {
						t.Errorf("BTH pad count %d, want %d", got, -size&3)
					}
					if len(frame)-p.BTHOff != op.Info().HeaderLen+size+(-size&3)+wire.ICRCLen {
						t.Errorf("IB packet length %d", len(frame)-p.BTHOff)
					}
					for _, h := range headers {
						if got := h.get(&p) != nil; got != op.Info().Has(h.h) {
							t.Errorf("%v present = %v, want %v", h.h, got, !got)
						}
					}
					var got wire.FrameFields
					p.Fields(&got)
					normalize(&want, op)
					normalize(&got, op)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("fields differ\n got %+v\nwant %+v", got, want)
					}
				})
			}
		}
	}
}

// normalize clears the fields an opcode does not carry, and makes an empty
// payload nil, so that two FrameFields can be compared.
func normalize(f *wire.FrameFields, op wire.Opcode) {
	info := op.Info()
	if !info.Has(wire.HdrDETH) {
		f.DETH = wire.DETHFields{}
	}
	if !info.Has(wire.HdrRETH) {
		f.RETH = wire.RETHFields{}
	}
	if !info.Has(wire.HdrAtomicETH) {
		f.AtomicETH = wire.AtomicETHFields{}
	}
	if !info.Has(wire.HdrAETH) {
		f.AETH = wire.AETHFields{}
	}
	if !info.Has(wire.HdrAtomicAckETH) {
		f.AtomicOrigData = 0
	}
	if !info.Has(wire.HdrImmDt) {
		f.Imm = 0
	}
	if !info.Has(wire.HdrIETH) {
		f.InvalidateRKey = 0
	}
	if f.IPv6 {
		f.IP4 = wire.IPv4Fields{}
	} else {
		f.IP6 = wire.IPv6Fields{}
	}
	if !f.Ethernet.VLAN {
		f.Ethernet.VLANTCI = 0
	}
	if len(f.Payload) == 0 {
		f.Payload = nil
	}
	f.UDP.ComputeChecksum = false
}

// resize grows (delta > 0, zero bytes) or shrinks the packet just before its
// ICRC, fixing the IP and UDP lengths and the IPv4 header checksum.
func resize(t *testing.T, frame []byte, delta int) []byte {
	t.Helper()
	var p wire.Packet
	if err := wire.ParseNoICRC(frame, &p); err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, frame[:p.ICRCOff+min(delta, 0)]...)
	out = append(out, make([]byte, max(delta, 0))...)
	out = append(out, frame[p.ICRCOff:]...)
	if p.IPv6 {
		ip := wire.IPv6(out[p.IPOff:])
		ip.SetPayloadLen(uint16(int(ip.PayloadLen()) + delta))
	} else {
		ip := wire.IPv4(out[p.IPOff:])
		ip.SetTotalLen(uint16(int(ip.TotalLen()) + delta))
		ip.SetChecksum(ip.ComputeChecksum())
	}
	u := wire.UDP(out[p.UDPOff:])
	u.SetLength(uint16(int(u.Length()) + delta))
	return out
}

func fixIPv4Checksum(frame []byte, ipOff int) {
	ip := wire.IPv4(frame[ipOff:])
	ip.SetChecksum(ip.ComputeChecksum())
}

func TestParseErrors(t *testing.T) {
	const ip, udp, bth = wire.EthernetLen, wire.EthernetLen + wire.IPv4MinLen, wire.EthernetLen + wire.IPv4MinLen + wire.UDPLen
	const ip6bth = wire.EthernetLen + wire.IPv6Len + wire.UDPLen
	tests := []struct {
		name   string
		op     wire.Opcode
		size   int
		ipv6   bool
		mutate func(t *testing.T, b []byte) []byte
		fix    bool // rewrite the ICRC after mutating
		want   error
	}{
		{"good", wire.RCSendOnly, 64, false, nil, false, nil},
		{"empty", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return nil }, false, wire.ErrTruncated},
		{"cut in Ethernet", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return b[:13] }, false, wire.ErrTruncated},
		{"cut in IP", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return b[:ip+19] }, false, wire.ErrTruncated},
		{"cut in UDP", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return b[:udp+7] }, false, wire.ErrTruncated},
		{"cut in BTH", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return b[:bth+5] }, false, wire.ErrTruncated},
		{"cut in ICRC", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { return b[:len(b)-1] }, false, wire.ErrTruncated},
		{"ARP", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }, false, wire.ErrNotIP},
		{"TCP", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip+9] = 6; return b }, false, wire.ErrNotUDP},
		{"IPv6 TCP", wire.RCSendOnly, 64, true, func(t *testing.T, b []byte) []byte { b[ip+6] = 6; return b }, false, wire.ErrNotUDP},
		{"other UDP port", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[udp+3]++; return b }, false, wire.ErrNotRoCE},
		{"bad ICRC", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[len(b)-5] ^= 1; return b }, false, wire.ErrBadICRC},
		{"bad ICRC IPv6", wire.RCAcknowledge, 0, true, func(t *testing.T, b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, false, wire.ErrBadICRC},
		{"IP version", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip] = 0x55; fixIPv4Checksum(b, ip); return b }, true, wire.ErrIPVersion},
		{"IPv6 version", wire.RCSendOnly, 64, true, func(t *testing.T, b []byte) []byte { b[ip] = 0x40 | b[ip]&0xf; return b }, true, wire.ErrIPVersion},
		{"IHL 4", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip] = 0x44; return b }, true, wire.ErrIPHeader},
		{"IP checksum", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip+8]--; return b }, false, wire.ErrIPChecksum},
		{"more fragments", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip+6] |= 0x20; fixIPv4Checksum(b, ip); return b }, true, wire.ErrFragmented},
		{"fragment offset", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip+7] = 1; fixIPv4Checksum(b, ip); return b }, true, wire.ErrFragmented},
		{"UDP length", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte {
			binary.BigEndian.PutUint16(b[udp+4:], binary.BigEndian.Uint16(b[udp+4:])-4)
			return b
		}, true, wire.ErrUDPLength},
		{"IPv6 payload length", wire.RCSendOnly, 64, true, func(t *testing.T, b []byte) []byte {
			binary.BigEndian.PutUint16(b[ip+4:], binary.BigEndian.Uint16(b[ip+4:])-4)
			return b
		}, true, wire.ErrUDPLength},
		{"IP shorter than UDP", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte {
			binary.BigEndian.PutUint16(b[ip+2:], 24)
			binary.BigEndian.PutUint16(b[udp+4:], 4)
			fixIPv4Checksum(b, ip)
			return b
		}, false, wire.ErrIPHeader},
		{"UDP too short for BTH", wire.RCSendOnly, 0, false, func(t *testing.T, b []byte) []byte {
			b = b[:bth+8]
			binary.BigEndian.PutUint16(b[ip+2:], wire.IPv4MinLen+wire.UDPLen+8)
			binary.BigEndian.PutUint16(b[udp+4:], wire.UDPLen+8)
			fixIPv4Checksum(b, ip)
			return b
		}, false, wire.ErrMissingHeader},
		{"TVer 1", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth+1] |= 1; return b }, true, wire.ErrBTHVersion},
		{"reserved RC opcode", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth] = 0x15; return b }, true, wire.ErrUnknownOpcode},
		{"RD opcode", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth] = 0x44; return b }, true, wire.ErrUnknownOpcode},
		{"UD write", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth] = 0x6a; return b }, true, wire.ErrUnknownOpcode},
		{"UC read", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth] = 0x2c; return b }, true, wire.ErrUnknownOpcode},
		{"READ without RETH", wire.RCSendOnly, 0, false, func(t *testing.T, b []byte) []byte { b[bth] = byte(wire.RCRDMAReadRequest); return b }, true, wire.ErrMissingHeader},
		{"ATOMIC without AtomicETH", wire.RCAcknowledge, 0, true, func(t *testing.T, b []byte) []byte { b[ip6bth] = byte(wire.RCCompareSwap); return b }, true, wire.ErrMissingHeader},
		{"UD without DETH", wire.RCSendOnly, 0, false, func(t *testing.T, b []byte) []byte { b[bth] = byte(wire.UDSendOnly); return b }, true, wire.ErrMissingHeader},
		{"pad beyond payload", wire.RCSendOnly, 0, false, func(t *testing.T, b []byte) []byte { b[bth+1] |= 0x10; return b }, true, wire.ErrPadCount},
		{"pad on ACK", wire.RCAcknowledge, 0, false, func(t *testing.T, b []byte) []byte { b[bth+1] |= 0x30; return b }, true, wire.ErrPadCount},
		{"unaligned length", wire.RCSendOnly, 8, false, func(t *testing.T, b []byte) []byte { return resize(t, b, -1) }, true, wire.ErrPadCount},
		{"payload on ACK", wire.RCAcknowledge, 0, false, func(t *testing.T, b []byte) []byte { return resize(t, b, 4) }, true, wire.ErrUnexpectedPayload},
		{"payload on READ request", wire.RCRDMAReadRequest, 0, true, func(t *testing.T, b []byte) []byte { return resize(t, b, 8) }, true, wire.ErrUnexpectedPayload},
		{"Ethernet padding kept out", wire.RCAcknowledge, 0, false, func(t *testing.T, b []byte) []byte { return append(b, 0, 0, 0, 0, 0, 0) }, false, nil},
		{"FECN and BECN are variant", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth+4] = 0xc0; return b }, false, nil},
		{"TTL and TOS are variant", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[ip+1], b[ip+8] = 0x02, 1; fixIPv4Checksum(b, ip); return b }, false, nil},
		{"UDP checksum is variant", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[udp+6] = 0x12; return b }, false, nil},
		{"IPv6 flow label is variant", wire.RCSendOnly, 64, true, func(t *testing.T, b []byte) []byte { b[ip+3] ^= 0x55; b[ip+7] = 3; return b }, false, nil},
		{"MigReq accepted", wire.RCSendOnly, 64, false, func(t *testing.T, b []byte) []byte { b[bth+1] |= 0x40; return b }, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := variant{ipv6: tt.ipv6}
			_, frame := sample(t, tt.op, tt.size, v, 7)
			if tt.mutate != nil {
				frame = tt.mutate(t, frame)
			}
			if tt.fix {
				if err := wire.UpdateICRC(frame); err != nil {
					t.Fatalf("UpdateICRC: %v", err)
				}
			}
			var p wire.Packet
			err := wire.Parse(frame, &p)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
			if err != nil && err.Error() == "" {
				t.Errorf("empty error text")
			}
		})
	}
}

// corpus returns sample frames of several shapes plus a share of the rxe
// captures' RoCEv2 frames.
func corpus(t *testing.T) [][]byte {
	var frames [][]byte
	for i, op := range []wire.Opcode{wire.RCSendOnly, wire.RCRDMAWriteFirst, wire.RCRDMAReadRequest, wire.RCAcknowledge,
		wire.RCAtomicAcknowledge, wire.RCCompareSwap, wire.UCRDMAWriteOnlyWithImmediate, wire.UDSendOnlyWithImmediate,
		wire.RCSendLastWithInvalidate, wire.RCRDMAReadResponseMiddle, wire.CNP} {
		for _, v := range variants {
			_, b := sample(t, op, 61+i, v, uint32(i))
			frames = append(frames, b)
		}
	}
	if files := wiretest.CaptureFiles(t); len(files) > 0 {
		for _, name := range files {
			capture, err := wiretest.ReadCapture(name)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[wire.Opcode]bool{}
			for _, fr := range capture {
				var p wire.Packet
				if wire.Parse(fr.Data, &p) == nil && !seen[p.Opcode] {
					seen[p.Opcode] = true
					frames = append(frames, fr.Data)
				}
			}
		}
	}
	return frames
}

// TestCorruptEveryByte flips bits in every byte the ICRC covers and checks
// that Parse refuses the frame with ErrBadICRC. The exceptions are the
// fields that RoCEv2 defines as variant (masked out of the ICRC: IPv4 TOS,
// TTL and checksum, IPv6 traffic class, flow label and hop limit, the UDP
// checksum, the BTH's FECN/BECN byte), which the IPv4 header checksum guards
// or nothing does, and the fields that decide whether the frame is RoCEv2 at
// all (IP protocol, UDP destination port, IPv4 header length), which make it
// a frame of another protocol.
func TestCorruptEveryByte(t *testing.T) {
	masks := []byte{0x01, 0x02, 0x10, 0x80, 0xff}
	for n, frame := range corpus(t) {
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			t.Fatalf("corpus frame %d: %v", n, err)
		}
		ip, udp, bth := p.IPOff, p.UDPOff, p.BTHOff
		for i := ip; i < p.Len(); i++ {
			for _, m := range masks {
				b := append([]byte{}, frame...)
				b[i] ^= m
				var q wire.Packet
				err := wire.Parse(b, &q)
				var want error = wire.ErrBadICRC
				switch {
				case !p.IPv6 && (i == ip+1 || i == ip+8 || i == ip+10 || i == ip+11):
					want = wire.ErrIPChecksum
				case p.IPv6 && i == ip && m&0xf0 != 0: // the version nibble is covered
				case p.IPv6 && (i < ip+4 || i == ip+7), i == udp+6, i == udp+7, i == bth+4:
					want = nil
				case !p.IPv6 && i == ip+9, p.IPv6 && i == ip+6:
					want = wire.ErrNotUDP
				case i == udp+2 || i == udp+3:
					want = wire.ErrNotRoCE
				case !p.IPv6 && i == ip && b[i]&0xf > 5:
					if err == nil {
						t.Errorf("frame %d (%v): byte %d ^ %#x (IHL %d) accepted", n, p.Opcode, i-ip, m, b[i]&0xf)
					}
					continue
				}
				if err != want {
					t.Errorf("frame %d (%v): IP byte %d ^ %#02x: Parse = %v, want %v", n, p.Opcode, i-ip, m, err, want)
				}
			}
		}
	}
}

// TestTruncateEverywhere cuts every frame at every length short of its end:
// Parse must say it is truncated, and never panic.
func TestTruncateEverywhere(t *testing.T) {
	for n, frame := range corpus(t) {
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			t.Fatalf("corpus frame %d: %v", n, err)
		}
		for k := 0; k < p.Len(); k++ {
			if err := wire.Parse(frame[:k], &p); err != wire.ErrTruncated {
				t.Errorf("frame %d cut to %d of %d bytes: Parse = %v, want ErrTruncated", n, k, len(frame), err)
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	f := wiretest.SampleFields(wire.RCSendOnly, 100, false, 1)
	buf := make([]byte, 70000)
	tests := []struct {
		name   string
		mutate func(f *wire.FrameFields)
		buf    int
		want   error
	}{
		{"ok", func(f *wire.FrameFields) {}, 4096, nil},
		{"small buffer", func(f *wire.FrameFields) {}, 100, wire.ErrBufferTooSmall},
		{"unknown opcode", func(f *wire.FrameFields) { f.BTH.Opcode = 0x15 }, 4096, wire.ErrUnknownOpcode},
		{"payload on ACK", func(f *wire.FrameFields) { f.BTH.Opcode = wire.RCAcknowledge }, 4096, wire.ErrUnexpectedPayload},
		{"IPv6 address in IPv4", func(f *wire.FrameFields) { f.IP4.Dst = wiretest.IP6B }, 4096, wire.ErrAddress},
		{"missing IPv6 address", func(f *wire.FrameFields) { f.IPv6 = true; f.IP6.Src = wiretest.IP4A }, 4096, wire.ErrAddress},
		{"payload too large", func(f *wire.FrameFields) { f.Payload = make([]byte, 65536) }, 70000, wire.ErrPayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := f
			tt.mutate(&g)
			if _, err := wire.Encode(buf[:tt.buf], &g); err != tt.want {
				t.Errorf("Encode = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestUDPChecksum checks an encoder-computed UDP checksum the way a receiver
// does: the one's-complement sum over pseudo-header and datagram is 0xffff.
func TestUDPChecksum(t *testing.T) {
	for _, v := range variants {
		for _, size := range []int{0, 1, 2, 3, 1000} {
			f := wiretest.SampleFields(wire.RCSendOnly, size, v.ipv6, 3)
			f.UDP.ComputeChecksum = true
			buf := make([]byte, 2048)
			n, err := wire.Encode(buf, &f)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			if err := wire.Parse(buf[:n], &p); err != nil {
				t.Fatal(err)
			}
			var src, dst []byte
			if v.ipv6 {
				src, dst = p.Frame[p.IPOff+8:p.IPOff+24], p.Frame[p.IPOff+24:p.IPOff+40]
			} else {
				src, dst = p.Frame[p.IPOff+12:p.IPOff+16], p.Frame[p.IPOff+16:p.IPOff+20]
			}
			dgram := p.Frame[p.UDPOff:]
			var sum uint32
			add := func(b []byte) {
				for i := 0; i < len(b); i += 2 {
					w := uint32(b[i]) << 8
					if i+1 < len(b) {
						w |= uint32(b[i+1])
					}
					sum += w
				}
			}
			add(src)
			add(dst)
			sum += 17 + uint32(len(dgram))
			add(dgram)
			for sum > 0xffff {
				sum = sum>>16 + sum&0xffff
			}
			if sum != 0xffff || p.UDP().Checksum() == 0 {
				t.Errorf("%s size %d: checksum %#04x sums to %#04x", v.name, size, p.UDP().Checksum(), sum)
			}
		}
	}
}

// TestNoAllocs checks that the packet path allocates nothing.
func TestNoAllocs(t *testing.T) {
	f, frame := sample(t, wire.RCRDMAWriteOnlyWithImmediate, 1024, variant{}, 1)
	buf := make([]byte, len(frame))
	var p wire.Packet
	var g wire.FrameFields
	for _, c := range []struct {
		name string
		fn   func()
	}{
		{"Parse", func() { _ = wire.Parse(frame, &p) }},
		{"Encode", func() { _, _ = wire.Encode(buf, &f) }},
		{"Fields", func() { p.Fields(&g) }},
		{"bad frame", func() { _ = wire.Parse(frame[:40], &p) }},
		{"error", func() { _ = wire.Parse(frame[:40], &p).Error() }},
	} {
		if a := testing.AllocsPerRun(100, c.fn); a != 0 {
			t.Errorf("%s: %v allocs per run", c.name, a)
		}
	}
}
