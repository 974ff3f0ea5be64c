package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// MsgSize is the size of one destination message on the socket: the text
// "LLLL:QQQQQQ:PPPPPP:GGGG…" (32 hex digits of GID) and a NUL, 52 bytes.
const MsgSize = len("0000:000000:000000:00000000000000000000000000000000") + 1

// doneMsg is what the client writes after reading the server's
// destinations: "done" and its NUL.
var doneMsg = []byte("done\x00")

// srqMsgs is how many destinations ibv_srq_pingpong writes each way,
// whatever its -q: its table's size (MAX_QP), unused entries zero.
const srqMsgs = 256

// Dest is one side's queue pair as the example programs exchange it.
type Dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

// Addr is the GID as an address: IPv4 for an IPv4-mapped GID, invalid for
// the zero GID (a program run without -g sends zeros).
func (d Dest) Addr() netip.Addr {
	if d.GID == ([16]byte{}) {
		return netip.Addr{}
	}
	return netip.AddrFrom16(d.GID).Unmap()
}

// String is the line the programs print for an address.
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
}

// Marshal is the message on the socket: four, six and six hex digits and
// the GID's 16 bytes as 32 hex digits in order, NUL-terminated.
func (d Dest) Marshal() [MsgSize]byte {
	var m [MsgSize]byte
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(d.GID[:]))
	copy(m[:], s)
	return m
}

// ErrBadDest is the error for a destination message that does not parse.
var ErrBadDest = errors.New("pingpong: bad destination message")

// ParseDest reads a destination message. It takes what the C programs'
// sscanf("%x:%x:%x:%s") takes from a well-formed message, and refuses the
// rest with ErrBadDest.
func ParseDest(m []byte) (Dest, error) {
	if i := indexNUL(m); i >= 0 {
		m = m[:i]
	}
	f := strings.Split(string(m), ":")
	if len(f) != 4 {
		return Dest{}, fmt.Errorf("%w: %q: want LID:QPN:PSN:GID", ErrBadDest, m)
	}
	var d Dest
	lid, err := strconv.ParseUint(f[0], 16, 16)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: LID %q", ErrBadDest, f[0])
	}
	qpn, err := strconv.ParseUint(f[1], 16, 24)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: QPN %q", ErrBadDest, f[1])
	}
	psn, err := strconv.ParseUint(f[2], 16, 24)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: PSN %q", ErrBadDest, f[2])
	}
	if len(f[3]) != 32 {
		return Dest{}, fmt.Errorf("%w: GID %q: want 32 hex digits", ErrBadDest, f[3])
	}
	if _, err := hex.Decode(d.GID[:], []byte(f[3])); err != nil {
		return Dest{}, fmt.Errorf("%w: GID %q", ErrBadDest, f[3])
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// writeDests writes n destination messages: dests, then zero entries.
func writeDests(w io.Writer, dests []Dest, n int) error {
	buf := make([]byte, 0, n*MsgSize)
	for i := range n {
		var d Dest
		if i < len(dests) {
			d = dests[i]
		}
		m := d.Marshal()
		buf = append(buf, m[:]...)
	}
	_, err := w.Write(buf)
	return err
}

// readDests reads n destination messages and returns the first want.
func readDests(r io.Reader, n, want int) ([]Dest, error) {
	var m [MsgSize]byte
	var out []Dest
	for i := range n {
		if _, err := io.ReadFull(r, m[:]); err != nil {
			return nil, fmt.Errorf("pingpong: reading the peer's destination %d of %d: %w", i+1, n, err)
		}
		if i >= want {
			continue
		}
		d, err := ParseDest(m[:])
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
