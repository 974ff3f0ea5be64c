package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// ICRCLen is the size of the invariant CRC that ends every RoCEv2 packet.
const ICRCLen = 4

// icrcSeed is the CRC-32 of the eight 0xff bytes that stand for the masked
// InfiniBand LRH in a RoCEv2 ICRC.
var icrcSeed = crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// computeICRC returns the ICRC of the packet whose IP header starts at ipOff
// (ipLen bytes), whose UDP header follows it, and whose ICRC starts at end.
// The variant fields are masked to ones in a copy of the headers on the stack:
// IPv4 TOS, TTL and header checksum, or IPv6 traffic class, flow label and hop
// limit; the UDP checksum; the BTH's FECN/BECN byte.
//
// Preconditions: ipOff+ipLen+UDPLen+BTHLen <= end <= len(frame), ipLen <= IPv4MaxLen or == IPv6Len.
func computeICRC(frame []byte, ipOff, ipLen, end int, ipv6 bool) uint32 {
	var masked [IPv4MaxLen + UDPLen + BTHLen]byte
	n := copy(masked[:], frame[ipOff:ipOff+ipLen+UDPLen+BTHLen])
	if ipv6 {
		masked[0] |= 0x0f
		masked[1], masked[2], masked[3] = 0xff, 0xff, 0xff
		masked[7] = 0xff
	} else {
		masked[1] = 0xff
		masked[8] = 0xff
		masked[10], masked[11] = 0xff, 0xff
	}
	masked[ipLen+6], masked[ipLen+7] = 0xff, 0xff
	masked[ipLen+UDPLen+4] = 0xff
	// The masked copy goes through slicing-by-8 here: handing a stack
	// buffer to hash/crc32 would move it to the heap. The rest, where the
	// bulk of the bytes are, goes through hash/crc32's CLMUL path.
	crc := updateHeaderCRC(icrcSeed, masked[:n])
	return crc32.Update(crc, crc32.IEEETable, frame[ipOff+ipLen+UDPLen+BTHLen:end])
}

// slicing8 holds the tables of a slicing-by-8 CRC-32 (IEEE, reflected).
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// updateHeaderCRC is crc32.Update(crc, crc32.IEEETable, p) for the short,
// stack-resident masked headers.
func updateHeaderCRC(crc uint32, p []byte) uint32 {
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = slicing8[7][crc&0xff] ^ slicing8[6][crc>>8&0xff] ^ slicing8[5][crc>>16&0xff] ^ slicing8[4][crc>>24] ^
			slicing8[3][p[4]] ^ slicing8[2][p[5]] ^ slicing8[1][p[6]] ^ slicing8[0][p[7]]
		p = p[8:]
	}
	for _, b := range p {
		crc = slicing8[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// ComputeICRC returns the ICRC the packet should carry, computed over the
// frame as it is now.
func (p *Packet) ComputeICRC() uint32 {
	return computeICRC(p.Frame, p.IPOff, p.UDPOff-p.IPOff, p.ICRCOff, p.IPv6)
}

// ICRC returns the ICRC the packet carries.
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Frame[p.ICRCOff:]) }

// SetICRC recomputes the packet's ICRC and writes it into the frame, after a
// header field has been changed in place.
func (p *Packet) SetICRC() {
	binary.LittleEndian.PutUint32(p.Frame[p.ICRCOff:], p.ComputeICRC())
}

// UpdateICRC rewrites the ICRC of a RoCEv2 frame after its headers or payload
// were changed in place. It checks only what it needs to find the ICRC, so it
// also serves to build deliberately malformed frames.
func UpdateICRC(frame []byte) error {
	var p Packet
	if err := locate(frame, &p); err != nil {
		return err
	}
	p.SetICRC()
	return nil
}

// HeaderCopy holds a copy of a packet's IP and UDP headers, taken before
// they are changed in place, so that UpdateICRCFrom can carry the change
// into the ICRC without reading the payload again.
type HeaderCopy struct {
	b [IPv4MaxLen + UDPLen]byte
	n int
}

// CopyHeaders returns a copy of the packet's IP and UDP headers.
func (p *Packet) CopyHeaders() HeaderCopy {
	var h HeaderCopy
	h.n = copy(h.b[:], p.Frame[p.IPOff:p.UDPOff+UDPLen])
	return h
}

// UpdateICRCFrom updates the packet's ICRC for what changed in its IP and
// UDP headers since old was copied (CopyHeaders), as SetICRC would, at the
// cost of the headers' bytes instead of the packet's: a CRC is linear, so
// the ICRC moves by the CRC of the change alone, carried past the bytes
// that follow it. Changes to masked fields (TTL, TOS or traffic class,
// flow label, the checksums) do not move it.
func (p *Packet) UpdateICRCFrom(old *HeaderCopy) {
	var delta [IPv4MaxLen + UDPLen]byte
	cur := p.Frame[p.IPOff : p.UDPOff+UDPLen]
	changed := false
	for i := range old.n {
		delta[i] = cur[i] ^ old.b[i]
		changed = changed || delta[i] != 0
	}
	if !changed {
		return
	}
	ipLen := p.UDPOff - p.IPOff
	if p.IPv6 {
		delta[0] &^= 0x0f // traffic class and flow label
		delta[1], delta[2], delta[3] = 0, 0, 0
		delta[7] = 0 // hop limit
	} else {
		delta[1] = 0                // TOS
		delta[8] = 0                // TTL
		delta[10], delta[11] = 0, 0 // header checksum
	}
	delta[ipLen+6], delta[ipLen+7] = 0, 0 // UDP checksum
	// The change's CRC with no initial or final inversion, carried past
	// the rest of the covered bytes (BTH on to the ICRC) as zeros.
	var r uint32
	for _, b := range delta[:old.n] {
		r = slicing8[0][byte(r)^b] ^ r>>8
	}
	r = multModP(xPow8N(p.ICRCOff-(p.UDPOff+UDPLen)), r)
	binary.LittleEndian.PutUint32(p.Frame[p.ICRCOff:], p.ICRC()^r)
}

// multModP multiplies a and b modulo the CRC-32 polynomial, in CRC-32's
// reflected bit order (x^0 is the top bit).
func multModP(a, b uint32) uint32 {
	const poly = 0xedb88320
	m := uint32(1) << 31
	var p uint32
	for m != 0 && a&(2*m-1) != 0 {
		if a&m != 0 {
			p ^= b
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow2N[k] is x^(2^k) modulo the CRC-32 polynomial, reflected.
var xPow2N = func() (t [32]uint32) {
	t[0] = 1 << 30 // x
	for k := 1; k < len(t); k++ {
		t[k] = multModP(t[k-1], t[k-1])
	}
	return t
}()

// xPow8N returns x^(8n) modulo the CRC-32 polynomial: what carrying a CRC
// register past n zero bytes multiplies it by.
func xPow8N(n int) uint32 {
	p := uint32(1) << 31 // 1
	for k := 3; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = multModP(xPow2N[k&31], p)
		}
	}
	return p
}
