package wire

import "encoding/binary"

// FrameFields describes a whole RoCEv2 frame for Encode. Extension header
// fields are used only when the opcode carries that header; lengths, the pad
// count, the IPv4 header checksum and the ICRC are computed.
type FrameFields struct {
	Ethernet EthernetFields
	IPv6     bool // use IP6 rather than IP4
	IP4      IPv4Fields
	IP6      IPv6Fields
	UDP      UDPFields
	BTH      BTHFields

	DETH           DETHFields
	RETH           RETHFields
	AtomicETH      AtomicETHFields
	AETH           AETHFields
	AtomicOrigData uint64 // AtomicAckETH
	Imm            uint32 // ImmDt, as on the wire (big-endian)
	InvalidateRKey uint32 // IETH

	Payload []byte
}

// FrameLen returns the length of the frame Encode would write, or an error
// if the fields cannot make a frame.
func (f *FrameFields) FrameLen() (int, error) {
	info := f.BTH.Opcode.Info()
	if !info.Valid {
		return 0, ErrUnknownOpcode
	}
	if info.Flags&OpPayload == 0 && len(f.Payload) > 0 {
		return 0, ErrUnexpectedPayload
	}
	if f.IPv6 {
		if !f.IP6.Src.Is6() || !f.IP6.Dst.Is6() {
			return 0, ErrAddress
		}
	} else if !f.IP4.Src.Is4() || !f.IP4.Dst.Is4() {
		return 0, ErrAddress
	}
	ipLen := IPv4MinLen
	if f.IPv6 {
		ipLen = IPv6Len
	}
	ib := info.HeaderLen + len(f.Payload) + padFor(len(f.Payload)) + ICRCLen
	if ipLen+UDPLen+ib > ipv4MaxTotalLen {
		return 0, ErrPayloadTooLarge
	}
	return f.Ethernet.Len() + ipLen + UDPLen + ib, nil
}

func padFor(n int) int { return -n & 3 }

// PayloadOffset is where Encode puts the payload in the frame of f: a
// sender may write the payload there first (gathering it straight into
// the transmit buffer) and set f.Payload to that very slice, which Encode
// then leaves in place.
func PayloadOffset(f *FrameFields) int {
	ipLen := IPv4MinLen
	if f.IPv6 {
		ipLen = IPv6Len
	}
	return f.Ethernet.Len() + ipLen + UDPLen + f.BTH.Opcode.Info().HeaderLen
}

// Encode writes the frame f describes, Ethernet header to ICRC, at the start
// of buf and returns its length. It does not allocate.
func Encode(buf []byte, f *FrameFields) (int, error) {
	n, err := f.FrameLen()
	if err != nil {
		return 0, err
	}
	if len(buf) < n {
		return 0, ErrBufferTooSmall
	}
	frame := buf[:n]
	info := f.BTH.Opcode.Info()
	ipOff := f.Ethernet.Len()
	var udpOff int
	if f.IPv6 {
		f.Ethernet.encode(frame, EtherTypeIPv6)
		udpOff = ipOff + IPv6Len
		f.IP6.Encode(frame[ipOff:], n-udpOff)
	} else {
		f.Ethernet.encode(frame, EtherTypeIPv4)
		udpOff = ipOff + IPv4MinLen
		f.IP4.Encode(frame[ipOff:], n-ipOff)
	}
	udp := UDP(frame[udpOff:])
	udp.SetSrcPort(f.UDP.SrcPort)
	udp.SetDstPort(f.UDP.DstPort)
	udp.SetLength(uint16(n - udpOff))
	udp.SetChecksum(f.UDP.Checksum)

	bthOff := udpOff + UDPLen
	pad := padFor(len(f.Payload))
	EncodeTransport(frame[bthOff:], f, pad)
	payloadOff := bthOff + info.HeaderLen
	if len(f.Payload) > 0 && &frame[payloadOff] != &f.Payload[0] { // not already in place (PayloadOffset)
		copy(frame[payloadOff:], f.Payload)
	}
	icrcOff := n - ICRCLen
	clear(frame[payloadOff+len(f.Payload) : icrcOff])
	binary.LittleEndian.PutUint32(frame[icrcOff:], computeICRC(frame, ipOff, udpOff-ipOff, icrcOff, f.IPv6))
	if f.UDP.ComputeChecksum {
		if f.IPv6 {
			udp.SetChecksum(udpChecksum(frame[udpOff:], frame[ipOff+8:ipOff+24], frame[ipOff+24:ipOff+40]))
		} else {
			udp.SetChecksum(udpChecksum(frame[udpOff:], frame[ipOff+12:ipOff+16], frame[ipOff+16:ipOff+20]))
		}
	}
	return n, nil
}

// encodeExtensions writes the opcode's extension headers; b starts at the BTH.
func (f *FrameFields) encodeExtensions(b []byte, info *OpInfo) {
	if off := info.Offset(HdrDETH); off >= 0 {
		h := DETH(b[off:])
		h.SetQKey(f.DETH.QKey)
		h.SetSrcQP(f.DETH.SrcQP)
	}
	if off := info.Offset(HdrRETH); off >= 0 {
		h := RETH(b[off:])
		h.SetVA(f.RETH.VA)
		h.SetRKey(f.RETH.RKey)
		h.SetDMALen(f.RETH.DMALen)
	}
	if off := info.Offset(HdrAtomicETH); off >= 0 {
		h := AtomicETH(b[off:])
		h.SetVA(f.AtomicETH.VA)
		h.SetRKey(f.AtomicETH.RKey)
		h.SetSwapAdd(f.AtomicETH.SwapAdd)
		h.SetCompare(f.AtomicETH.Compare)
	}
	if off := info.Offset(HdrAETH); off >= 0 {
		h := AETH(b[off:])
		h.SetSyndrome(f.AETH.Syndrome)
		h.SetMSN(f.AETH.MSN)
	}
	if off := info.Offset(HdrAtomicAckETH); off >= 0 {
		AtomicAckETH(b[off:]).SetOrigData(f.AtomicOrigData)
	}
	if off := info.Offset(HdrImmDt); off >= 0 {
		ImmDt(b[off:]).SetImm(f.Imm)
	}
	if off := info.Offset(HdrIETH); off >= 0 {
		IETH(b[off:]).SetRKey(f.InvalidateRKey)
	}
	if off := info.Offset(HdrCNP); off >= 0 {
		clear(b[off : off+CNPLen])
	}
}

// Fields reads the whole packet back into f, so that Encode(buf, f)
// reproduces it. f.Payload aliases the frame.
func (p *Packet) Fields(f *FrameFields) {
	*f = FrameFields{}
	e := p.Ethernet()
	f.Ethernet = EthernetFields{Dst: e.Dst(), Src: e.Src(), VLAN: p.VLAN, VLANTCI: p.VLANTCI()}
	if p.IPv6 {
		ip := p.IPv6Header()
		f.IPv6 = true
		f.IP6 = IPv6Fields{TrafficClass: ip.TrafficClass(), FlowLabel: ip.FlowLabel(), HopLimit: ip.HopLimit(), Src: ip.Src(), Dst: ip.Dst()}
	} else {
		ip := p.IPv4Header()
		f.IP4 = IPv4Fields{TOS: ip.TOS(), ID: ip.ID(), Flags: ip.Flags(), TTL: ip.TTL(), Src: ip.Src(), Dst: ip.Dst()}
	}
	u := p.UDP()
	f.UDP = UDPFields{SrcPort: u.SrcPort(), DstPort: u.DstPort(), Checksum: u.Checksum()}
	DecodeTransport(p.Frame[p.BTHOff:], f)
	f.Payload = p.Payload()
}

// EncodeTransport writes the BTH and the extension headers of f's opcode at
// the start of b, with the given pad count; b must hold the opcode's
// HeaderLen bytes. It is the transport half of Encode, for callers that
// frame the packet themselves.
func EncodeTransport(b []byte, f *FrameFields, pad int) {
	f.BTH.encode(b, pad)
	f.encodeExtensions(b, f.BTH.Opcode.Info())
}

// DecodeTransport reads the BTH at the start of b, and the extension headers
// its opcode carries, into f; it is the inverse of EncodeTransport.
//
// Preconditions: b holds at least the opcode's HeaderLen bytes.
func DecodeTransport(b []byte, f *FrameFields) {
	BTH(b).fields(&f.BTH)
	info := f.BTH.Opcode.Info()
	if off := info.Offset(HdrDETH); off >= 0 {
		h := DETH(b[off:])
		f.DETH = DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()}
	}
	if off := info.Offset(HdrRETH); off >= 0 {
		h := RETH(b[off:])
		f.RETH = RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()}
	}
	if off := info.Offset(HdrAtomicETH); off >= 0 {
		h := AtomicETH(b[off:])
		f.AtomicETH = AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
	}
	if off := info.Offset(HdrAETH); off >= 0 {
		h := AETH(b[off:])
		f.AETH = AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()}
	}
	if off := info.Offset(HdrAtomicAckETH); off >= 0 {
		f.AtomicOrigData = AtomicAckETH(b[off:]).OrigData()
	}
	if off := info.Offset(HdrImmDt); off >= 0 {
		f.Imm = ImmDt(b[off:]).Imm()
	}
	if off := info.Offset(HdrIETH); off >= 0 {
		f.InvalidateRKey = IETH(b[off:]).RKey()
	}
}
