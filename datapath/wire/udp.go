package wire

import "encoding/binary"

// UDP constants for RoCEv2.
const (
	UDPLen     = 8
	RoCEv2Port = 4791
)

// UDP is a view of a UDP header.
type UDP []byte

func (u UDP) SrcPort() uint16      { return binary.BigEndian.Uint16(u[0:2]) }
func (u UDP) DstPort() uint16      { return binary.BigEndian.Uint16(u[2:4]) }
func (u UDP) Length() uint16       { return binary.BigEndian.Uint16(u[4:6]) }
func (u UDP) Checksum() uint16     { return binary.BigEndian.Uint16(u[6:8]) }
func (u UDP) SetSrcPort(v uint16)  { binary.BigEndian.PutUint16(u[0:2], v) }
func (u UDP) SetDstPort(v uint16)  { binary.BigEndian.PutUint16(u[2:4], v) }
func (u UDP) SetLength(v uint16)   { binary.BigEndian.PutUint16(u[4:6], v) }
func (u UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(u[6:8], v) }

// UDPFields describes a UDP header. The length is computed by Encode.
type UDPFields struct {
	SrcPort, DstPort uint16
	// Checksum is written as given (RoCEv2 senders, rxe among them, send 0)
	// unless ComputeChecksum is set.
	Checksum        uint16
	ComputeChecksum bool
}

// SourcePort returns the UDP source port rxe uses for a QP pair:
// the flow label of lqpn*rqpn folded to 14 bits, or 0xC000. Keeping it fixed per QP keeps a
// QP's packets in one flow, and so on one RX queue of a multi-queue NIC.
func SourcePort(lqpn, rqpn uint32) uint16 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	fl := uint32(v & 0xfffff)
	return 0xc000 | uint16(fl&0x3fff^fl>>14)
}

// udpChecksum computes the UDP checksum of the datagram u (header and data)
// carried between the given pseudo-header addresses.
func udpChecksum(u []byte, src, dst []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(src); i += 2 {
		sum += uint32(src[i])<<8 | uint32(src[i+1])
		sum += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	sum += IPProtocolUDP + uint32(len(u))
	for i := 0; i+1 < len(u); i += 2 {
		if i == 6 {
			continue
		}
		sum += uint32(u[i])<<8 | uint32(u[i+1])
		if sum > 0x7fffffff {
			sum = uint32(fold(sum))
		}
	}
	if len(u)%2 == 1 {
		sum += uint32(u[len(u)-1]) << 8
	}
	c := ^fold(sum)
	if c == 0 {
		c = 0xffff
	}
	return c
}
