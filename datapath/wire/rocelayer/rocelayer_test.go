package rocelayer_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/rocelayer"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

// check compares a decoded layer with what package wire parsed.
func check(t *testing.T, where string, b *rocelayer.BTH, p *wire.Packet) {
	t.Helper()
	var f wire.FrameFields
	p.Fields(&f)
	if b.BTHFields != f.BTH || b.PadCount != p.PadCount() || b.Headers != p.Info.Headers || b.ICRC != p.ICRC() {
		t.Errorf("%s: BTH %+v pad %d, want %+v pad %d", where, b.BTHFields, b.PadCount, f.BTH, p.PadCount())
	}
	if b.DETH != f.DETH || b.RETH != f.RETH || b.AtomicETH != f.AtomicETH || b.AETH != f.AETH ||
		b.AtomicOrigData != f.AtomicOrigData || b.Imm != f.Imm || b.InvalidateRKey != f.InvalidateRKey {
		t.Errorf("%s: extension headers differ: %+v", where, b)
	}
	if !bytes.Equal(b.LayerPayload(), p.Payload()) {
		t.Errorf("%s: payload %d bytes, want %d", where, len(b.LayerPayload()), p.PayloadLen)
	}
}

// TestDecodeCaptures decodes every frame of the rxe captures with gopacket:
// each RoCEv2 frame yields a BTH layer that agrees with package wire, every
// other frame yields none.
func TestDecodeCaptures(t *testing.T) {
	var roce int
	for _, name := range wiretest.CaptureFiles(t) {
		frames, err := wiretest.ReadCapture(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range frames {
			pkt := gopacket.NewPacket(fr.Data, layers.LayerTypeEthernet, gopacket.Default)
			var p wire.Packet
			perr := wire.Parse(fr.Data, &p)
			b, ok := pkt.Layer(rocelayer.LayerTypeBTH).(*rocelayer.BTH)
			if ok != (perr == nil) {
				t.Errorf("%s frame %d: layer %v, wire.Parse %v", filepath.Base(name), fr.Index, ok, perr)
				continue
			}
			if !ok {
				continue
			}
			roce++
			if el := pkt.ErrorLayer(); el != nil {
				t.Errorf("%s frame %d: %v", filepath.Base(name), fr.Index, el.Error())
			}
			check(t, filepath.Base(name), b, &p)
			if err := rocelayer.VerifyICRC(pkt); err != nil {
				t.Errorf("%s frame %d: %v", filepath.Base(name), fr.Index, err)
			}
		}
	}
	if roce == 0 {
		t.Fatal("no RoCEv2 frames decoded")
	}
	t.Logf("%d RoCEv2 frames decoded", roce)
}

// TestDecodingLayerParser uses the layer without allocation per packet, the
// way a capture tool would, on a frame of every opcode.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth  layers.Ethernet
		ip4  layers.IPv4
		ip6  layers.IPv6
		udp  layers.UDP
		bth  rocelayer.BTH
		body gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &bth, &body)
	var decoded []gopacket.LayerType
	for i, op := range wiretest.Opcodes() {
		frame := wiretest.SampleFrame(op, 100+i, i%2 == 0, uint32(i))
		if err := parser.DecodeLayers(frame, &decoded); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		if decoded[3] != rocelayer.LayerTypeBTH {
			t.Fatalf("%v: layers %v", op, decoded)
		}
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			t.Fatal(err)
		}
		check(t, op.String(), &bth, &p)
	}
}

// TestSerialize builds frames with gopacket's serializer, fixes the ICRC
// with wire.UpdateICRC, and checks that package wire parses them to the
// same fields as the wire encoder's frame of the same description.
func TestSerialize(t *testing.T) {
	for i, op := range wiretest.Opcodes() {
		size := 0
		if op.Info().Flags&wire.OpPayload != 0 {
			size = 5 + i
		}
		f := wiretest.SampleFields(op, size, false, uint32(i))
		eth := &layers.Ethernet{SrcMAC: f.Ethernet.Src[:], DstMAC: f.Ethernet.Dst[:], EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, IHL: 5, Id: f.IP4.ID, Flags: layers.IPv4DontFragment, TTL: f.IP4.TTL,
			Protocol: layers.IPProtocolUDP, SrcIP: f.IP4.Src.AsSlice(), DstIP: f.IP4.Dst.AsSlice()}
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.UDP.SrcPort), DstPort: wire.RoCEv2Port}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		bth := &rocelayer.BTH{BTHFields: f.BTH, DETH: f.DETH, RETH: f.RETH, AtomicETH: f.AtomicETH, AETH: f.AETH,
			AtomicOrigData: f.AtomicOrigData, Imm: f.Imm, InvalidateRKey: f.InvalidateRKey}
		buf := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, bth, gopacket.Payload(f.Payload)); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		frame := buf.Bytes()
		// gopacket computes a UDP checksum; RoCEv2 ignores it (the ICRC masks it).
		if err := wire.UpdateICRC(frame); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			t.Fatalf("%v: Parse: %v", op, err)
		}
		want := wiretest.SampleFrame(op, size, false, uint32(i))
		// Equal apart from the UDP checksum, which the ICRC does not cover.
		udpCsum := p.UDPOff + 6
		frame[udpCsum], frame[udpCsum+1] = 0, 0
		if !bytes.Equal(frame, want) {
			t.Errorf("%v: gopacket frame\n%x\nwire frame\n%x", op, frame, want)
		}
	}
	// An opcode that carries no payload refuses one.
	bth := &rocelayer.BTH{BTHFields: wire.BTHFields{Opcode: wire.RCAcknowledge}}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, bth, gopacket.Payload{1, 2, 3})
	if !errors.Is(err, wire.ErrUnexpectedPayload) {
		t.Errorf("payload on ACK: %v", err)
	}
}

// TestDecodeErrors: malformed transport headers give an error layer, never a
// panic or a BTH layer.
func TestDecodeErrors(t *testing.T) {
	good := wiretest.SampleFrame(wire.RCRDMAWriteOnly, 8, false, 1)
	const bth = wire.EthernetLen + wire.IPv4MinLen + wire.UDPLen
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"unknown opcode", func(b []byte) []byte { b[bth] = 0x15; return b }},
		{"too short for BTH", func(b []byte) []byte { return b[:bth+10] }},
		{"too short for RETH", func(b []byte) []byte { return b[:bth+20] }},
		{"pad beyond payload", func(b []byte) []byte { b[bth] = byte(wire.RCSendOnly); b[bth+1] |= 0x30; return b[:bth+14] }},
		{"payload on READ request", func(b []byte) []byte { b[bth] = byte(wire.RCRDMAReadRequest); return b }},
	}
	for _, tt := range tests {
		frame := tt.mutate(append([]byte{}, good...))
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if pkt.Layer(rocelayer.LayerTypeBTH) != nil || pkt.ErrorLayer() == nil {
			t.Errorf("%s: decoded without error", tt.name)
		}
	}
}

// FuzzDecodeBTH feeds arbitrary UDP payloads to the layer: it must not
// panic, and what it accepts must agree with package wire on the same bytes
// inside a frame.
func FuzzDecodeBTH(f *testing.F) {
	for i, op := range wiretest.Opcodes() {
		frame := wiretest.SampleFrame(op, i*5%40, false, uint32(i))
		f.Add(frame[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b rocelayer.BTH
		if err := b.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if len(b.Contents) != b.Opcode.Info().HeaderLen || len(b.Contents)+len(b.Payload)+b.PadCount+wire.ICRCLen != len(data) {
			t.Fatalf("layer lengths: headers %d payload %d pad %d of %d", len(b.Contents), len(b.Payload), b.PadCount, len(data))
		}
		var f wire.FrameFields
		wire.DecodeTransport(data, &f)
		if f.BTH != b.BTHFields || f.RETH != b.RETH || f.AETH != b.AETH || f.DETH != b.DETH || f.AtomicETH != b.AtomicETH {
			t.Fatalf("layer and wire disagree: %+v vs %+v", b.BTHFields, f.BTH)
		}
	})
}
