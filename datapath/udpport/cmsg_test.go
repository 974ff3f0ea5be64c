package udpport

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	binary.NativeEndian.PutUint64(b, uint64(unix.CmsgLen(len(data))))
	binary.NativeEndian.PutUint32(b[8:], uint32(level))
	binary.NativeEndian.PutUint32(b[12:], uint32(typ))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

// TestCmsgTOS: the TOS or traffic class is found among control
// messages, after others, and a truncated or malformed buffer gives 0.
func TestCmsgTOS(t *testing.T) {
	tclass := binary.NativeEndian.AppendUint32(nil, 0x8b)
	other := cmsg(unix.SOL_SOCKET, unix.SO_TIMESTAMP, make([]byte, 16))
	for _, tc := range []struct {
		name string
		c    []byte
		want uint8
	}{
		{"none", nil, 0},
		{"IP_TOS", cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03}), 0x03},
		{"IPV6_TCLASS", cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tclass), 0x8b},
		{"after another", append(other, cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x02})...), 0x02},
		{"truncated header", cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03})[:10], 0},
		{"length beyond the buffer", cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03})[:unix.CmsgLen(0)], 0},
		{"zero length", make([]byte, 32), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cmsgTOS(tc.c); got != tc.want {
				t.Fatalf("cmsgTOS = %#x, want %#x", got, tc.want)
			}
		})
	}
}

// TestCmsgGRO: the GRO segment size is found beside the TOS, in either
// order, and a malformed buffer gives what was read before it.
func TestCmsgGRO(t *testing.T) {
	seg := cmsg(unix.SOL_UDP, unix.UDP_GRO, binary.NativeEndian.AppendUint32(nil, 4112))
	tos := cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x02})
	for _, tc := range []struct {
		name    string
		c       []byte
		wantTOS uint8
		wantSeg int
	}{
		{"GRO alone", seg, 0, 4112},
		{"TOS then GRO", append(append([]byte{}, tos...), seg...), 0x02, 4112},
		{"GRO then TOS", append(append([]byte{}, seg...), tos...), 0x02, 4112},
		{"GRO cut short", seg[:unix.CmsgLen(0)+2], 0, 0},
		{"neither", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]uint64, (len(tc.c)+7)/8) // aligned, as the kernel's
			buf := unsafeBytes(b)[:len(tc.c)]
			copy(buf, tc.c)
			if gotTOS, gotSeg := cmsgFields(buf); gotTOS != tc.wantTOS || gotSeg != tc.wantSeg {
				t.Fatalf("cmsgFields = %#x, %d; want %#x, %d", gotTOS, gotSeg, tc.wantTOS, tc.wantSeg)
			}
		})
	}
}

// FuzzCmsgTOS: any control buffer is read within its bounds.
func FuzzCmsgTOS(f *testing.F) {
	f.Add(cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03}))
	f.Add(cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, []byte{1, 0, 0, 0}))
	f.Add(append(cmsg(unix.SOL_SOCKET, unix.SO_TIMESTAMP, make([]byte, 16)), cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{2})...))
	f.Add(append(cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{2}), cmsg(unix.SOL_UDP, unix.UDP_GRO, []byte{0x10, 0x10, 0, 0})...))
	f.Fuzz(func(t *testing.T, c []byte) {
		// The kernel's buffers are aligned; so is the fuzzer's copy.
		b := make([]uint64, (len(c)+7)/8)
		buf := unsafeBytes(b)[:len(c)]
		copy(buf, c)
		cmsgTOS(buf)
		cmsgFields(buf)
	})
}

// unsafeBytes views words as bytes: an 8-byte-aligned buffer, as the
// kernel's control messages are.
func unsafeBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 8*len(w))
}
