package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// KeysLen is the length of perftest's keys message: the text
// "LID:OUT_READS:QPN:PSN:RKEY:VADDR:" then the 16 GID bytes and the SRQ
// number, each field in fixed-width hex followed by a colon, then a NUL.
const KeysLen = 108

// Keys is what each side tells the other about one QP and its buffer.
type Keys struct {
	LID      uint16 // 0 on RoCE
	OutReads uint16 // READs/atomics it accepts outstanding (max_dest_rd_atomic)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte // an IPv4-mapped GID means RoCEv2 over IPv4
	SRQN     uint32
}

// fields: name and hex width of each field, in order; the GID's 16 bytes
// come between VAddr and SRQN.
var keyFields = [...]struct {
	name  string
	width int
}{{"LID", 4}, {"OUT_READS", 4}, {"QPN", 6}, {"PSN", 6}, {"RKEY", 8}, {"VADDR", 16}}

// ErrKeys is wrapped by every error ParseKeys returns. (Its text has no
// package prefix: it is read inside the step's error, "perftest: keys
// exchange: malformed keys message: …".)
var ErrKeys = errors.New("malformed keys message")

// Marshal encodes k as perftest sends it.
func (k *Keys) Marshal() [KeysLen]byte {
	var b [KeysLen]byte
	s := fmt.Appendf(b[:0], "%04x:%04x:%06x:%06x:%08x:%016x:", k.LID, k.OutReads, k.QPN&0xffffff, k.PSN&0xffffff, k.RKey, k.VAddr)
	for _, g := range k.GID {
		s = fmt.Appendf(s, "%02x:", g)
	}
	s = fmt.Appendf(s, "%08x:", k.SRQN)
	_ = s // exactly KeysLen-1 bytes; the last stays NUL
	return b
}

// ParseKeys decodes a keys message. Every field must have its width in
// hex digits and its colon, and the message must end in a NUL.
func ParseKeys(b []byte) (Keys, error) {
	var k Keys
	if len(b) != KeysLen {
		return k, fmt.Errorf("%w: %d bytes, want %d", ErrKeys, len(b), KeysLen)
	}
	if b[KeysLen-1] != 0 {
		return k, fmt.Errorf("%w: not NUL-terminated", ErrKeys)
	}
	off := 0
	field := func(name string, width int) (uint64, error) {
		f := b[off : off+width]
		if b[off+width] != ':' {
			return 0, fmt.Errorf("%w: %s not followed by ':'", ErrKeys, name)
		}
		off += width + 1
		for _, c := range f {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return 0, fmt.Errorf("%w: %s %q is not hex", ErrKeys, name, f)
			}
		}
		return strconv.ParseUint(string(f), 16, 64)
	}
	var v [len(keyFields)]uint64
	for i, f := range keyFields {
		x, err := field(f.name, f.width)
		if err != nil {
			return k, err
		}
		v[i] = x
	}
	k.LID, k.OutReads, k.QPN, k.PSN, k.RKey, k.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	for i := range k.GID {
		x, err := field("GID", 2)
		if err != nil {
			return k, err
		}
		k.GID[i] = byte(x)
	}
	x, err := field("SRQN", 8)
	if err != nil {
		return k, err
	}
	k.SRQN = uint32(x)
	return k, nil
}

// Addr is the IP address the GID stands for: IPv4 for an IPv4-mapped GID.
func (k *Keys) Addr() netip.Addr { return netip.AddrFrom16(k.GID).Unmap() }

// String shows the keys as perftest prints a QP's address.
func (k *Keys) String() string {
	return fmt.Sprintf("LID %04x QPN 0x%04x PSN 0x%06x RKey 0x%06x VAddr 0x%014x GID %s", k.LID, k.QPN, k.PSN, k.RKey, k.VAddr, k.Addr())
}

// KeysBinaryLen is the length of the keys message over an rdma_cm
// connection (perftest -R): perftest's struct pingpong_dest as it is laid
// out in memory, every field big-endian: LID, OUT_READS, QPN, PSN and
// RKEY (4 bytes each), 4 bytes of padding, VADDR (8), the GID (16), SRQN
// and the GID index (4 each).
const KeysBinaryLen = 56

// MarshalBinary encodes k as perftest sends it over an rdma_cm
// connection; gidIndex fills the last field, which the peer does not
// read.
func (k *Keys) MarshalBinary(gidIndex uint32) [KeysBinaryLen]byte {
	var b [KeysBinaryLen]byte
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(k.LID))
	be.PutUint32(b[4:], uint32(k.OutReads))
	be.PutUint32(b[8:], k.QPN&0xffffff)
	be.PutUint32(b[12:], k.PSN&0xffffff)
	be.PutUint32(b[16:], k.RKey)
	be.PutUint64(b[24:], k.VAddr)
	copy(b[32:48], k.GID[:])
	be.PutUint32(b[48:], k.SRQN)
	be.PutUint32(b[52:], gidIndex)
	return b
}

// ParseKeysBinary decodes a keys message of an rdma_cm connection. The
// message must be KeysBinaryLen bytes, and every field must fit: a LID
// and an OUT_READS of 16 bits, a QPN and a PSN of 24.
func ParseKeysBinary(b []byte) (Keys, error) {
	var k Keys
	if len(b) != KeysBinaryLen {
		return k, fmt.Errorf("%w: %d bytes, want %d", ErrKeys, len(b), KeysBinaryLen)
	}
	be := binary.BigEndian
	lid, out, qpn, psn := be.Uint32(b[0:]), be.Uint32(b[4:]), be.Uint32(b[8:]), be.Uint32(b[12:])
	switch {
	case lid > 0xffff:
		return k, fmt.Errorf("%w: LID %#x is more than 16 bits", ErrKeys, lid)
	case out > 0xffff:
		return k, fmt.Errorf("%w: OUT_READS %d is more than 16 bits", ErrKeys, int32(out))
	case qpn > 0xffffff:
		return k, fmt.Errorf("%w: QPN %#x is more than 24 bits", ErrKeys, qpn)
	case psn > 0xffffff:
		return k, fmt.Errorf("%w: PSN %#x is more than 24 bits", ErrKeys, psn)
	}
	k.LID, k.OutReads, k.QPN, k.PSN = uint16(lid), uint16(out), qpn, psn
	k.RKey, k.VAddr = be.Uint32(b[16:]), be.Uint64(b[24:])
	copy(k.GID[:], b[32:48])
	k.SRQN = be.Uint32(b[48:])
	return k, nil
}
