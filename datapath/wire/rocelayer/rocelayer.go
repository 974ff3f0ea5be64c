// Package rocelayer decodes and builds RoCEv2 transport headers with
// github.com/google/gopacket: the BTH, its extension headers, pad and ICRC,
// as one layer registered on UDP port 4791.
//
// Importing the package registers the layer, so that
//
//	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
//	if bth, ok := pkt.Layer(rocelayer.LayerTypeBTH).(*rocelayer.BTH); ok { … }
//
// works on live frames and on pcap files read with pcapgo. It is meant for
// tools and tests; the NIC's own packet path uses package wire directly.
package rocelayer

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrnic/softrnic/datapath/wire"
)

// LayerTypeBTH is the RoCEv2 transport layer: the BTH and its extension
// headers.
var LayerTypeBTH = gopacket.RegisterLayerType(4791, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeBTH),
})

func init() {
	layers.RegisterUDPPortLayerType(wire.RoCEv2Port, LayerTypeBTH)
}

// BTH is a decoded RoCEv2 transport header: the BTH fields and whichever
// extension headers the opcode carries. Contents holds the headers; Payload
// the message payload without pad and ICRC.
type BTH struct {
	layers.BaseLayer
	wire.BTHFields
	PadCount int
	TVer     uint8

	// Headers says which of the extension header fields below are present.
	Headers        wire.Header
	DETH           wire.DETHFields
	RETH           wire.RETHFields
	AtomicETH      wire.AtomicETHFields
	AETH           wire.AETHFields
	AtomicOrigData uint64 // AtomicAckETH
	Imm            uint32 // ImmDt
	InvalidateRKey uint32 // IETH

	// ICRC is the invariant CRC as carried; use VerifyICRC on the whole
	// frame to check it.
	ICRC uint32
}

// LayerType returns LayerTypeBTH.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType is the payload layer, or none when there is no payload.
func (b *BTH) NextLayerType() gopacket.LayerType {
	if len(b.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes a UDP payload: BTH, extension headers, payload,
// pad and ICRC.
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.BTHLen+wire.ICRCLen {
		df.SetTruncated()
		return fmt.Errorf("rocelayer: %d bytes, too short for a BTH and ICRC", len(data))
	}
	h := wire.BTH(data)
	op := h.Opcode()
	info := op.Info()
	if !info.Valid {
		return fmt.Errorf("rocelayer: %w %#02x", wire.ErrUnknownOpcode, uint8(op))
	}
	if len(data) < info.HeaderLen+wire.ICRCLen {
		df.SetTruncated()
		return fmt.Errorf("rocelayer: %v needs %s: %w", op, info.Headers, wire.ErrMissingHeader)
	}
	var f wire.FrameFields
	wire.DecodeTransport(data, &f)
	*b = BTH{
		BTHFields:      f.BTH,
		PadCount:       h.PadCount(),
		TVer:           h.TVer(),
		Headers:        info.Headers,
		DETH:           f.DETH,
		RETH:           f.RETH,
		AtomicETH:      f.AtomicETH,
		AETH:           f.AETH,
		AtomicOrigData: f.AtomicOrigData,
		Imm:            f.Imm,
		InvalidateRKey: f.InvalidateRKey,
	}
	icrcOff := len(data) - wire.ICRCLen
	avail := icrcOff - info.HeaderLen
	if info.Flags&wire.OpPayload == 0 && avail > 0 {
		return fmt.Errorf("rocelayer: %v: %w", op, wire.ErrUnexpectedPayload)
	}
	if b.PadCount > avail {
		return fmt.Errorf("rocelayer: pad count %d with %d bytes: %w", b.PadCount, avail, wire.ErrPadCount)
	}
	b.ICRC = binary.LittleEndian.Uint32(data[icrcOff:])
	b.Contents = data[:info.HeaderLen]
	b.Payload = data[info.HeaderLen : icrcOff-b.PadCount]
	return nil
}

// SerializeTo writes the BTH, the opcode's extension headers, the pad for
// the payload already in buf, and an ICRC of zero: the ICRC covers the IP
// and UDP headers, so compute it on the finished frame with
// wire.UpdateICRC. The pad count is always derived from the payload.
func (b *BTH) SerializeTo(buf gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	info := b.Opcode.Info()
	if !info.Valid {
		return fmt.Errorf("rocelayer: %w %#02x", wire.ErrUnknownOpcode, uint8(b.Opcode))
	}
	payloadLen := len(buf.Bytes())
	if info.Flags&wire.OpPayload == 0 && payloadLen > 0 {
		return fmt.Errorf("rocelayer: %v: %w", b.Opcode, wire.ErrUnexpectedPayload)
	}
	pad := -payloadLen & 3
	tail, err := buf.AppendBytes(pad + wire.ICRCLen)
	if err != nil {
		return err
	}
	clear(tail)
	hdr, err := buf.PrependBytes(info.HeaderLen)
	if err != nil {
		return err
	}
	f := wire.FrameFields{
		BTH: b.BTHFields, DETH: b.DETH, RETH: b.RETH, AtomicETH: b.AtomicETH, AETH: b.AETH,
		AtomicOrigData: b.AtomicOrigData, Imm: b.Imm, InvalidateRKey: b.InvalidateRKey,
	}
	wire.EncodeTransport(hdr, &f, pad)
	return nil
}

func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	b := &BTH{}
	if err := b.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(b)
	return p.NextDecoder(b.NextLayerType())
}

// VerifyICRC parses a whole frame with package wire, ICRC included.
func VerifyICRC(pkt gopacket.Packet) error {
	var p wire.Packet
	return wire.Parse(pkt.Data(), &p)
}
