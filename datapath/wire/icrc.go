package wire

import (
	"encoding/binary"
	"hash/crc32"
	"sync/atomic"
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
	r := ^updateHeaderCRC(^uint32(0), delta[:old.n]) // from a register of 0, no final inversion
	r = multModP(xPow8N(p.ICRCOff-(p.UDPOff+UDPLen)), r)
	binary.LittleEndian.PutUint32(p.Frame[p.ICRCOff:], p.ICRC()^r)
}

// multModP multiplies a and b modulo the CRC-32 polynomial, in CRC-32's
// reflected bit order (x^0 is the top bit), four bits of a at a time:
// Horner's rule from a's highest powers down, with the multiples of b by
// 1, x, x^2, x^3 combined in a table of 16.
func multModP(a, b uint32) uint32 {
	var m [16]uint32
	b1 := mulX(b)
	b2 := mulX(b1)
	b3 := mulX(b2)
	m[8], m[4], m[2], m[1] = b, b1, b2, b3
	for i := 3; i < 16; i++ {
		if i&(i-1) != 0 {
			m[i] = m[i&(i-1)] ^ m[i&-i]
		}
	}
	var acc uint32
	for range 8 {
		acc = acc>>4 ^ mulX4Low[acc&15] ^ m[a&15]
		a >>= 4
	}
	return acc
}

// crcPoly is CRC-32's polynomial (IEEE), reflected.
const crcPoly = 0xedb88320

// mulX multiplies b by x modulo the polynomial.
func mulX(b uint32) uint32 { return b>>1 ^ crcPoly&-(b&1) }

// mulX4Low[v] is v, a value of four low bits (x^28 to x^31), times x^4.
var mulX4Low = func() (t [16]uint32) {
	for v := range t {
		c := uint32(v)
		for range 4 {
			c = mulX(c)
		}
		t[v] = c
	}
	return t
}()

// xPow2N[k] is x^(2^k) modulo the CRC-32 polynomial, reflected.
var xPow2N = func() (t [32]uint32) {
	t[0] = 1 << 30 // x
	for k := 1; k < len(t); k++ {
		t[k] = multModP(t[k-1], t[k-1])
	}
	return t
}()

// xPow8N returns x^(8n) modulo the CRC-32 polynomial: what carrying a CRC
// register past n zero bytes multiplies it by. The packets of a flow come
// in a few lengths, so the answers are kept in a small cache, one entry
// per length modulo its size.
func xPow8N(n int) uint32 {
	e := &xPowCache[n%len(xPowCache)]
	if v := e.Load(); v>>32 == uint64(n)+1 {
		return uint32(v)
	}
	p := xPow8NSlow(n)
	e.Store((uint64(n)+1)<<32 | uint64(p))
	return p
}

// xPowCache holds xPow8N's answers: length+1 in the top half, x^(8n) in
// the bottom (0: empty).
var xPowCache [64]atomic.Uint64

// xPow8NSlow computes x^(8n) from the powers x^(2^k).
func xPow8NSlow(n int) uint32 {
	p := uint32(1) << 31 // 1
	for k := 3; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = multModP(xPow2N[k&31], p)
		}
	}
	return p
}
