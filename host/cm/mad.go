package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MAD sizes: every MAD is 256 bytes, a 24-byte common header and 232
// bytes of class data.
const (
	MADSize    = 256
	HeaderSize = 24
	DataSize   = MADSize - HeaderSize
)

// GSIQKey is the Q_Key of QP1, the general services interface.
const GSIQKey = 0x80010000

// GSIQPN is the GSI's queue pair number.
const GSIQPN = 1

// The communication management class.
const (
	BaseVersion  = 1
	ClassCM      = 0x07
	ClassVersion = 2
	MethodSend   = 0x03 // CM messages all use the Send method
)

// AttrID names a CM message (the MAD's attribute ID).
type AttrID uint16

const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
	AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// Header is the MAD common header.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        AttrID
	AttrMod       uint32
}

// ErrMAD is the error for a MAD that does not parse.
var ErrMAD = errors.New("cm: malformed MAD")

// ErrNotCM is the error for a well-formed MAD of another class or
// version, which the CM does not take.
var ErrNotCM = errors.New("cm: not a CM MAD")

// ParseHeader reads a MAD's common header and returns its class data. A
// MAD shorter than 256 bytes is malformed; one of another management
// class or version is ErrNotCM (with the header filled in).
func ParseHeader(mad []byte) (Header, []byte, error) {
	if len(mad) < MADSize {
		return Header{}, nil, fmt.Errorf("%w: %d bytes, a MAD is %d", ErrMAD, len(mad), MADSize)
	}
	h := Header{
		BaseVersion: mad[0], MgmtClass: mad[1], ClassVersion: mad[2], Method: mad[3],
		Status:        binary.BigEndian.Uint16(mad[4:]),
		ClassSpecific: binary.BigEndian.Uint16(mad[6:]),
		TID:           binary.BigEndian.Uint64(mad[8:]),
		AttrID:        AttrID(binary.BigEndian.Uint16(mad[16:])),
		AttrMod:       binary.BigEndian.Uint32(mad[20:]),
	}
	if h.BaseVersion != BaseVersion || h.MgmtClass != ClassCM || h.ClassVersion != ClassVersion {
		return h, nil, fmt.Errorf("%w: base version %d, class %#02x, class version %d", ErrNotCM, h.BaseVersion, h.MgmtClass, h.ClassVersion)
	}
	return h, mad[HeaderSize:MADSize], nil
}

// put writes the header into mad[:24].
func (h *Header) put(mad []byte) {
	mad[0], mad[1], mad[2], mad[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(mad[4:], h.Status)
	binary.BigEndian.PutUint16(mad[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(mad[8:], h.TID)
	binary.BigEndian.PutUint16(mad[16:], uint16(h.AttrID))
	mad[18], mad[19] = 0, 0
	binary.BigEndian.PutUint32(mad[20:], h.AttrMod)
}

// cmHeader is the header of a CM message with transaction ID tid.
func cmHeader(attr AttrID, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: ClassVersion, Method: MethodSend, TID: tid, AttrID: attr}
}

// Message is a CM message: it knows its attribute and encodes its class
// data.
type Message interface {
	Attr() AttrID
	// put writes the message's class data into d (232 bytes, zeroed).
	put(d []byte) error
	// parse reads the message's class data from d (232 bytes).
	parse(d []byte) error
}

// Encode builds the 256-byte MAD of m with transaction ID tid.
func Encode(m Message, tid uint64) ([]byte, error) {
	mad := make([]byte, MADSize)
	h := cmHeader(m.Attr(), tid)
	h.put(mad)
	if err := m.put(mad[HeaderSize:]); err != nil {
		return nil, err
	}
	return mad, nil
}

// Decode parses a CM MAD into its header and message. A MAD of an
// attribute the CM does not handle returns the header and an error.
func Decode(mad []byte) (Header, Message, error) {
	h, d, err := ParseHeader(mad)
	if err != nil {
		return h, nil, err
	}
	var m Message
	switch h.AttrID {
	case AttrREQ:
		m = &REQ{}
	case AttrMRA:
		m = &MRA{}
	case AttrREJ:
		m = &REJ{}
	case AttrREP:
		m = &REP{}
	case AttrRTU:
		m = &RTU{}
	case AttrDREQ:
		m = &DREQ{}
	case AttrDREP:
		m = &DREP{}
	case AttrSIDRREQ:
		m = &SIDRREQ{}
	case AttrSIDRREP:
		m = &SIDRREP{}
	default:
		return h, nil, fmt.Errorf("%w: attribute %v is not handled", ErrNotCM, h.AttrID)
	}
	if err := m.parse(d); err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// u24 reads a 24-bit big-endian field.
func u24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// put24 writes a 24-bit big-endian field.
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }
