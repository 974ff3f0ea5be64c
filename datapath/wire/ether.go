package wire

import "encoding/binary"

// MAC is an Ethernet hardware address.
type MAC [6]byte

// Broadcast is the Ethernet broadcast address.
var Broadcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (m MAC) String() string {
	const hexDigits = "0123456789abcdef"
	var b [17]byte
	for i, v := range m {
		if i > 0 {
			b[3*i-1] = ':'
		}
		b[3*i] = hexDigits[v>>4]
		b[3*i+1] = hexDigits[v&0xf]
	}
	return string(b[:])
}

// EtherTypes used by RoCEv2.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100
)

// Ethernet header sizes.
const (
	EthernetLen = 14 // destination, source, EtherType
	VLANTagLen  = 4  // one 802.1Q tag
)

// Ethernet is a view of an untagged Ethernet header, or of the first 12 bytes
// (addresses) of a tagged one.
type Ethernet []byte

func (e Ethernet) Dst() (m MAC)          { copy(m[:], e[0:6]); return }
func (e Ethernet) Src() (m MAC)          { copy(m[:], e[6:12]); return }
func (e Ethernet) EtherType() uint16     { return binary.BigEndian.Uint16(e[12:14]) }
func (e Ethernet) SetDst(m MAC)          { copy(e[0:6], m[:]) }
func (e Ethernet) SetSrc(m MAC)          { copy(e[6:12], m[:]) }
func (e Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(e[12:14], t) }

// EthernetFields describes an Ethernet header, with an optional 802.1Q tag.
type EthernetFields struct {
	Dst, Src MAC
	VLAN     bool   // an 802.1Q tag follows the source address
	VLANTCI  uint16 // the tag's PCP, DEI and VLAN ID
}

// Len is the header's length on the wire.
func (f *EthernetFields) Len() int {
	if f.VLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// encode writes the header with the given inner EtherType; b must hold Len bytes.
func (f *EthernetFields) encode(b []byte, etherType uint16) {
	e := Ethernet(b)
	e.SetDst(f.Dst)
	e.SetSrc(f.Src)
	if f.VLAN {
		binary.BigEndian.PutUint16(b[12:14], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[14:16], f.VLANTCI)
		binary.BigEndian.PutUint16(b[16:18], etherType)
		return
	}
	e.SetEtherType(etherType)
}
