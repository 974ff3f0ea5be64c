package wire

import (
	"encoding/binary"
	"net/netip"
)

// IP header sizes and constants.
const (
	IPv4MinLen      = 20
	IPv4MaxLen      = 60
	IPv6Len         = 40
	IPProtocolUDP   = 17
	IPv4FlagDF      = 0x2 // don't fragment, in IPv4Fields.Flags
	IPv4FlagMF      = 0x1 // more fragments
	ipv4MaxTotalLen = 0xffff
)

// IPv4 is a view of an IPv4 header.
type IPv4 []byte

func (h IPv4) Version() uint8       { return h[0] >> 4 }
func (h IPv4) HeaderLen() int       { return int(h[0]&0xf) * 4 }
func (h IPv4) TOS() uint8           { return h[1] }
func (h IPv4) TotalLen() uint16     { return binary.BigEndian.Uint16(h[2:4]) }
func (h IPv4) ID() uint16           { return binary.BigEndian.Uint16(h[4:6]) }
func (h IPv4) Flags() uint8         { return h[6] >> 5 }
func (h IPv4) FragOffset() uint16   { return binary.BigEndian.Uint16(h[6:8]) & 0x1fff }
func (h IPv4) TTL() uint8           { return h[8] }
func (h IPv4) Protocol() uint8      { return h[9] }
func (h IPv4) Checksum() uint16     { return binary.BigEndian.Uint16(h[10:12]) }
func (h IPv4) Src() netip.Addr      { return netip.AddrFrom4([4]byte(h[12:16])) }
func (h IPv4) Dst() netip.Addr      { return netip.AddrFrom4([4]byte(h[16:20])) }
func (h IPv4) SetTOS(v uint8)       { h[1] = v }
func (h IPv4) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(h[2:4], v) }
func (h IPv4) SetID(v uint16)       { binary.BigEndian.PutUint16(h[4:6], v) }
func (h IPv4) SetTTL(v uint8)       { h[8] = v }
func (h IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[10:12], v) }
func (h IPv4) SetSrc(a netip.Addr)  { b := a.As4(); copy(h[12:16], b[:]) }
func (h IPv4) SetDst(a netip.Addr)  { b := a.As4(); copy(h[16:20], b[:]) }
func (h IPv4) SetProtocol(p uint8)  { h[9] = p }
func (h IPv4) SetFlagsFrag(flags uint8, off uint16) {
	binary.BigEndian.PutUint16(h[6:8], uint16(flags&7)<<13|off&0x1fff)
}

// ComputeChecksum returns the header checksum the header should carry.
func (h IPv4) ComputeChecksum() uint16 {
	n := h.HeaderLen()
	var sum uint32
	for i := 0; i+1 < n; i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	return ^fold(sum)
}

// fold reduces a one's-complement sum to 16 bits.
func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// IPv4Fields describes an IPv4 header without options.
type IPv4Fields struct {
	TOS      uint8 // DSCP and ECN
	ID       uint16
	Flags    uint8 // IPv4FlagDF and friends; RoCEv2 sets DF
	TTL      uint8
	Src, Dst netip.Addr
}

// Encode writes a 20-byte header, checksum included, for a datagram of
// totalLen bytes carrying UDP.
func (f *IPv4Fields) Encode(b []byte, totalLen int) {
	h := IPv4(b[:IPv4MinLen])
	h[0] = 4<<4 | 5
	h.SetTOS(f.TOS)
	h.SetTotalLen(uint16(totalLen))
	h.SetID(f.ID)
	h.SetFlagsFrag(f.Flags, 0)
	h.SetTTL(f.TTL)
	h.SetProtocol(IPProtocolUDP)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
	h.SetChecksum(0)
	h.SetChecksum(h.ComputeChecksum())
}

// IPv6 is a view of an IPv6 header.
type IPv6 []byte

func (h IPv6) Version() uint8         { return h[0] >> 4 }
func (h IPv6) TrafficClass() uint8    { return h[0]<<4 | h[1]>>4 }
func (h IPv6) FlowLabel() uint32      { return binary.BigEndian.Uint32(h[0:4]) & 0xfffff }
func (h IPv6) PayloadLen() uint16     { return binary.BigEndian.Uint16(h[4:6]) }
func (h IPv6) NextHeader() uint8      { return h[6] }
func (h IPv6) HopLimit() uint8        { return h[7] }
func (h IPv6) Src() netip.Addr        { return netip.AddrFrom16([16]byte(h[8:24])) }
func (h IPv6) Dst() netip.Addr        { return netip.AddrFrom16([16]byte(h[24:40])) }
func (h IPv6) SetPayloadLen(v uint16) { binary.BigEndian.PutUint16(h[4:6], v) }
func (h IPv6) SetHopLimit(v uint8)    { h[7] = v }
func (h IPv6) SetSrc(a netip.Addr)    { b := a.As16(); copy(h[8:24], b[:]) }
func (h IPv6) SetDst(a netip.Addr)    { b := a.As16(); copy(h[24:40], b[:]) }
func (h IPv6) SetNextHeader(v uint8)  { h[6] = v }
func (h IPv6) SetTrafficClassFlowLabel(tc uint8, fl uint32) {
	binary.BigEndian.PutUint32(h[0:4], 6<<28|uint32(tc)<<20|fl&0xfffff)
}

// IPv6Fields describes an IPv6 header with UDP as the next header.
type IPv6Fields struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// Encode writes a 40-byte header for payloadLen bytes of UDP.
func (f *IPv6Fields) Encode(b []byte, payloadLen int) {
	h := IPv6(b[:IPv6Len])
	h.SetTrafficClassFlowLabel(f.TrafficClass, f.FlowLabel)
	h.SetPayloadLen(uint16(payloadLen))
	h.SetNextHeader(IPProtocolUDP)
	h.SetHopLimit(f.HopLimit)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
}
