package wire

import "encoding/binary"

// Packet is a parsed RoCEv2 frame: the frame and the offsets of its parts.
// Parse fills it; its views alias the frame.
type Packet struct {
	// Frame is the frame up to the end of its IP datagram; an Ethernet
	// trailer (padding of short frames) is cut off.
	Frame []byte
	// Opcode and Info are the BTH opcode and its row of the opcode table.
	Opcode Opcode
	Info   *OpInfo
	VLAN   bool // an 802.1Q tag precedes the IP header
	IPv6   bool // the network header is IPv6

	IPOff      int // IP header
	UDPOff     int // UDP header
	BTHOff     int // BTH
	PayloadOff int // payload (after the extension headers)
	PayloadLen int // payload without pad
	ICRCOff    int // ICRC, the last 4 bytes of Frame
}

// Parse checks frame as a RoCEv2 frame and fills p with its layout. It does
// not allocate and does not keep frame beyond p.
//
// Checks run in the order a NIC needs them: first whether the frame is
// RoCEv2 at all (EtherType, IP protocol, UDP port 4791: ErrNotIP, ErrNotUDP,
// ErrNotRoCE) and whether it holds all the bytes its length fields claim
// (ErrTruncated); then the ICRC (ErrBadICRC), so that a corrupted byte it
// covers is reported as such; then every header field (IP version and
// checksum, fragments, UDP length, BTH version, opcode, extension headers, pad
// count and payload length).
func Parse(frame []byte, p *Packet) error {
	if err := locate(frame, p); err != nil {
		return err
	}
	if p.ICRC() != p.ComputeICRC() {
		return ErrBadICRC
	}
	return p.validate()
}

// ParseNoICRC is Parse without the ICRC check, for frames whose ICRC was
// checked elsewhere or is about to be rewritten (see Packet.SetICRC).
func ParseNoICRC(frame []byte, p *Packet) error {
	if err := locate(frame, p); err != nil {
		return err
	}
	return p.validate()
}

// minIBLen is the smallest UDP payload that holds a BTH and an ICRC.
const minIBLen = BTHLen + ICRCLen

// locate classifies the frame and finds its IP, UDP and BTH headers and its
// ICRC, trusting only what it needs to.
func locate(frame []byte, p *Packet) error {
	*p = Packet{}
	if len(frame) < EthernetLen {
		return ErrTruncated
	}
	ipOff := EthernetLen
	etherType := binary.BigEndian.Uint16(frame[12:14])
	if etherType == EtherTypeVLAN {
		if len(frame) < EthernetLen+VLANTagLen {
			return ErrTruncated
		}
		p.VLAN = true
		ipOff += VLANTagLen
		etherType = binary.BigEndian.Uint16(frame[16:18])
	}
	var ipLen, ipEnd int
	switch etherType {
	case EtherTypeIPv4:
		if len(frame) < ipOff+IPv4MinLen {
			return ErrTruncated
		}
		ip := IPv4(frame[ipOff:])
		if ip.Protocol() != IPProtocolUDP {
			return ErrNotUDP
		}
		ipLen = max(ip.HeaderLen(), IPv4MinLen) // an IHL below 5 is reported by validate
		ipEnd = ipOff + int(ip.TotalLen())
	case EtherTypeIPv6:
		if len(frame) < ipOff+IPv6Len {
			return ErrTruncated
		}
		ip := IPv6(frame[ipOff:])
		if ip.NextHeader() != IPProtocolUDP {
			return ErrNotUDP
		}
		p.IPv6 = true
		ipLen = IPv6Len
		ipEnd = ipOff + IPv6Len + int(ip.PayloadLen())
	default:
		return ErrNotIP
	}
	udpOff := ipOff + ipLen
	if len(frame) < udpOff+UDPLen {
		return ErrTruncated
	}
	udp := UDP(frame[udpOff:])
	if udp.DstPort() != RoCEv2Port {
		return ErrNotRoCE
	}
	// The IP and UDP lengths both say where the packet ends. Use the IP one
	// when it is plausible, else the UDP one, so that a corrupted length is
	// caught by the ICRC; only when both claim more than the frame holds is
	// the frame truncated.
	udpEnd := udpOff + int(udp.Length())
	minEnd := udpOff + UDPLen + minIBLen
	end := ipEnd
	if end < minEnd || end > len(frame) {
		end = udpEnd
	}
	if end < minEnd || end > len(frame) {
		if ipEnd > len(frame) && udpEnd > len(frame) {
			return ErrTruncated
		}
		if ipEnd < udpOff+UDPLen {
			return ErrIPHeader
		}
		if udpEnd != ipEnd {
			return ErrUDPLength
		}
		return ErrMissingHeader
	}
	p.Frame = frame[:end]
	p.IPOff = ipOff
	p.UDPOff = udpOff
	p.BTHOff = udpOff + UDPLen
	p.ICRCOff = end - ICRCLen
	p.Opcode = Opcode(frame[p.BTHOff])
	p.Info = p.Opcode.Info()
	return nil
}

// validate checks every header field of a located packet and finds its
// payload.
func (p *Packet) validate() error {
	end := len(p.Frame)
	if p.IPv6 {
		ip := IPv6(p.Frame[p.IPOff:])
		if ip.Version() != 6 {
			return ErrIPVersion
		}
		if p.IPOff+IPv6Len+int(ip.PayloadLen()) != end {
			return ErrUDPLength
		}
	} else {
		ip := IPv4(p.Frame[p.IPOff:])
		if ip.Version() != 4 {
			return ErrIPVersion
		}
		if ip.HeaderLen() < IPv4MinLen {
			return ErrIPHeader
		}
		if ip.Checksum() != ip.ComputeChecksum() {
			return ErrIPChecksum
		}
		if ip.Flags()&IPv4FlagMF != 0 || ip.FragOffset() != 0 {
			return ErrFragmented
		}
		if p.IPOff+int(ip.TotalLen()) != end {
			return ErrUDPLength
		}
	}
	if p.UDPOff+int(UDP(p.Frame[p.UDPOff:]).Length()) != end {
		return ErrUDPLength
	}
	bth := BTH(p.Frame[p.BTHOff:])
	if bth.TVer() != 0 {
		return ErrBTHVersion
	}
	info := p.Info
	if !info.Valid {
		return ErrUnknownOpcode
	}
	p.PayloadOff = p.BTHOff + info.HeaderLen
	avail := p.ICRCOff - p.PayloadOff // payload and pad
	if avail < 0 {
		return ErrMissingHeader
	}
	pad := bth.PadCount()
	switch {
	case info.Flags&OpPayload == 0 && avail > 0:
		return ErrUnexpectedPayload
	case pad > avail, (end-p.BTHOff)%4 != 0:
		return ErrPadCount
	}
	p.PayloadLen = avail - pad
	return nil
}

// Len is the length of the frame up to the end of the IP datagram.
func (p *Packet) Len() int { return len(p.Frame) }

// Ethernet returns the Ethernet header's view (addresses and outer EtherType).
func (p *Packet) Ethernet() Ethernet { return Ethernet(p.Frame[:EthernetLen]) }

// VLANTCI returns the 802.1Q tag control information, or 0 without a tag.
func (p *Packet) VLANTCI() uint16 {
	if !p.VLAN {
		return 0
	}
	return binary.BigEndian.Uint16(p.Frame[14:16])
}

// IPv4Header returns the IPv4 header, or nil for an IPv6 packet.
func (p *Packet) IPv4Header() IPv4 {
	if p.IPv6 {
		return nil
	}
	return IPv4(p.Frame[p.IPOff:p.UDPOff])
}

// IPv6Header returns the IPv6 header, or nil for an IPv4 packet.
func (p *Packet) IPv6Header() IPv6 {
	if !p.IPv6 {
		return nil
	}
	return IPv6(p.Frame[p.IPOff:p.UDPOff])
}

// ECN field values (RFC 3168), in the low two bits of IPv4's TOS and
// IPv6's traffic class.
const (
	ECNNotECT = 0
	ECT1      = 1 // ECN-capable transport (1), as L4S marks its packets
	ECT0      = 2 // ECN-capable transport, as RoCEv2 NICs mark their packets
	ECNCE     = 3 // Congestion Experienced, set by a congested switch
)

// ECN returns the packet's ECN field.
func (p *Packet) ECN() uint8 {
	ip := p.Frame[p.IPOff:]
	if p.IPv6 {
		return (ip[1] >> 4) & 3
	}
	return ip[1] & 3
}

// UDP returns the UDP header.
func (p *Packet) UDP() UDP { return UDP(p.Frame[p.UDPOff:p.BTHOff]) }

// BTH returns the Base Transport Header.
func (p *Packet) BTH() BTH { return BTH(p.Frame[p.BTHOff : p.BTHOff+BTHLen]) }

// ext returns extension header h, or nil when the opcode has none.
func (p *Packet) ext(h Header, n int) []byte {
	off := p.Info.Offset(h)
	if off < 0 {
		return nil
	}
	off += p.BTHOff
	return p.Frame[off : off+n : off+n]
}

// Extension headers; each is nil when the opcode does not carry it.
func (p *Packet) DETH() DETH           { return DETH(p.ext(HdrDETH, DETHLen)) }
func (p *Packet) RETH() RETH           { return RETH(p.ext(HdrRETH, RETHLen)) }
func (p *Packet) AtomicETH() AtomicETH { return AtomicETH(p.ext(HdrAtomicETH, AtomicETHLen)) }
func (p *Packet) AETH() AETH           { return AETH(p.ext(HdrAETH, AETHLen)) }
func (p *Packet) AtomicAckETH() AtomicAckETH {
	return AtomicAckETH(p.ext(HdrAtomicAckETH, AtomicAckETHLen))
}
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.ext(HdrImmDt, ImmDtLen)) }
func (p *Packet) IETH() IETH   { return IETH(p.ext(HdrIETH, IETHLen)) }

// Payload returns the payload without pad.
func (p *Packet) Payload() []byte {
	return p.Frame[p.PayloadOff : p.PayloadOff+p.PayloadLen : p.PayloadOff+p.PayloadLen]
}

// PadCount returns the number of pad bytes after the payload.
func (p *Packet) PadCount() int { return p.ICRCOff - p.PayloadOff - p.PayloadLen }

// Classify checks everything Parse does except the ICRC: the test a port
// applies before passing a frame up, leaving the ICRC (the bulk of the cost)
// to the engine.
func Classify(frame []byte) error {
	var p Packet
	return ParseNoICRC(frame, &p)
}

// PeekDestQP reads a frame's destination QP and whether its opcode is a
// request's, without checking the frame: a hint for warming the QP's
// state before the frame is parsed (Parse decides what it is). ok is
// false where the frame is too short or not IP to hold a BTH.
func PeekDestQP(frame []byte) (qpn uint32, request, ok bool) {
	off := EthernetLen
	if len(frame) < off {
		return 0, false, false
	}
	etherType := binary.BigEndian.Uint16(frame[12:14])
	if etherType == EtherTypeVLAN && len(frame) >= off+VLANTagLen {
		off += VLANTagLen
		etherType = binary.BigEndian.Uint16(frame[off-2 : off])
	}
	switch etherType {
	case EtherTypeIPv4:
		if len(frame) <= off {
			return 0, false, false
		}
		off += max(IPv4(frame[off:]).HeaderLen(), IPv4MinLen) + UDPLen
	case EtherTypeIPv6:
		off += IPv6Len + UDPLen
	default:
		return 0, false, false
	}
	if len(frame) < off+BTHLen {
		return 0, false, false
	}
	b := BTH(frame[off : off+BTHLen])
	return b.DestQP(), b.Opcode().Info().Flags&OpRequest != 0, true
}
