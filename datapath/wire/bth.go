package wire

import "encoding/binary"

// BTHLen is the size of the Base Transport Header.
const BTHLen = 12

// DefaultPKey is the default partition key.
const DefaultPKey = 0xffff

// PKeyMatch reports whether a packet's P_Key a matches a QP's P_Key b as
// IBTA defines it: the same partition (low 15 bits, not the invalid 0)
// and at least one of the two a full member (bit 15).
func PKeyMatch(a, b uint16) bool {
	return a&0x7fff == b&0x7fff && a&0x7fff != 0 && (a|b)&0x8000 != 0
}

// BTH is a view of a Base Transport Header.
//
//	byte 0     OpCode
//	byte 1     SE(0x80) MigReq(0x40) PadCnt(0x30) TVer(0x0f)
//	bytes 2-3  P_Key
//	byte 4     FECN(0x80) BECN(0x40) reserved
//	bytes 5-7  destination QP
//	byte 8     AckReq(0x80) reserved
//	bytes 9-11 PSN
type BTH []byte

func (h BTH) Opcode() Opcode     { return Opcode(h[0]) }
func (h BTH) SE() bool           { return h[1]&0x80 != 0 }
func (h BTH) MigReq() bool       { return h[1]&0x40 != 0 }
func (h BTH) PadCount() int      { return int(h[1]>>4) & 3 }
func (h BTH) TVer() uint8        { return h[1] & 0xf }
func (h BTH) PKey() uint16       { return binary.BigEndian.Uint16(h[2:4]) }
func (h BTH) FECN() bool         { return h[4]&0x80 != 0 }
func (h BTH) BECN() bool         { return h[4]&0x40 != 0 }
func (h BTH) DestQP() uint32     { return uint24(h[5:8]) }
func (h BTH) AckReq() bool       { return h[8]&0x80 != 0 }
func (h BTH) PSN() PSN           { return PSN(uint24(h[9:12])) }
func (h BTH) SetOpcode(o Opcode) { h[0] = byte(o) }
func (h BTH) SetPKey(v uint16)   { binary.BigEndian.PutUint16(h[2:4], v) }
func (h BTH) SetDestQP(v uint32) { putUint24(h[5:8], v) }
func (h BTH) SetPSN(p PSN)       { putUint24(h[9:12], uint32(p)) }
func (h BTH) SetSE(v bool)       { setBit(&h[1], 0x80, v) }
func (h BTH) SetMigReq(v bool)   { setBit(&h[1], 0x40, v) }
func (h BTH) SetFECN(v bool)     { setBit(&h[4], 0x80, v) }
func (h BTH) SetBECN(v bool)     { setBit(&h[4], 0x40, v) }
func (h BTH) SetAckReq(v bool)   { setBit(&h[8], 0x80, v) }
func (h BTH) SetPadCount(n int)  { h[1] = h[1]&^0x30 | byte(n&3)<<4 }

// BTHFields describes a BTH. The pad count is computed by Encode from the
// payload length; TVer is always 0.
type BTHFields struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    PSN
}

func (f *BTHFields) encode(b []byte, pad int) {
	h := BTH(b[:BTHLen])
	h[0] = byte(f.Opcode)
	h[1] = byte(pad&3) << 4
	h.SetSE(f.SE)
	h.SetMigReq(f.MigReq)
	h.SetPKey(f.PKey)
	h[4] = 0
	h.SetFECN(f.FECN)
	h.SetBECN(f.BECN)
	h.SetDestQP(f.DestQP)
	h[8] = 0
	h.SetAckReq(f.AckReq)
	h.SetPSN(f.PSN)
}

// fields reads the header back into f.
func (h BTH) fields(f *BTHFields) {
	*f = BTHFields{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), PKey: h.PKey(),
		FECN: h.FECN(), BECN: h.BECN(), DestQP: h.DestQP(), AckReq: h.AckReq(), PSN: h.PSN(),
	}
}

func uint24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func putUint24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}
