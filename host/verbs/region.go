package verbs

import (
	"encoding/binary"
	"fmt"
)

// RemoteRegion is what a peer needs to reach a registered region with
// RDMA WRITE, READ and atomics: its address, length and R_Key. It travels
// in a connection's private data (cm.QPConfig.Private, cm.Conn.Private) as
// RemoteRegionSize bytes, or in any message the two programs share.
type RemoteRegion struct {
	Addr   uint64
	Length uint32
	RKey   uint32
}

// RemoteRegionSize is the length of a RemoteRegion's encoding: it fits a
// REQ's private data (56 bytes) as well as a REP's.
const RemoteRegionSize = 16

// Remote returns what a peer needs to reach the region (its R_Key is
// useful only if the region was registered with remote access).
func (mr *MR) Remote() RemoteRegion {
	return RemoteRegion{Addr: mr.Addr, Length: uint32(len(mr.Buf)), RKey: mr.RKey}
}

// AppendBinary appends the region's encoding: the address, length and
// R_Key, big-endian, as the RETH carries them.
func (r RemoteRegion) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, r.Addr)
	b = binary.BigEndian.AppendUint32(b, r.Length)
	return binary.BigEndian.AppendUint32(b, r.RKey), nil
}

// MarshalBinary returns the region's RemoteRegionSize-byte encoding.
func (r RemoteRegion) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, RemoteRegionSize))
}

// UnmarshalBinary reads a region from the first RemoteRegionSize bytes
// of b (private data may be padded after them, as a REP's is).
func (r *RemoteRegion) UnmarshalBinary(b []byte) error {
	if len(b) < RemoteRegionSize {
		return fmt.Errorf("%w: a remote region takes %d bytes, got %d", ErrInvalid, RemoteRegionSize, len(b))
	}
	r.Addr = binary.BigEndian.Uint64(b)
	r.Length = binary.BigEndian.Uint32(b[8:])
	r.RKey = binary.BigEndian.Uint32(b[12:])
	return nil
}
