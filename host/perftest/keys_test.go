package perftest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
)

// A keys message perftest sent (QPN 0x20 on rxe, IPv4-mapped GID).
const sampleKeys = "0000:0001:000020:218b04:00000e1d:00005556a3c20000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4e:00:03:00000000:\x00"

func TestKeysRoundTrip(t *testing.T) {
	k, err := ParseKeys([]byte(sampleKeys))
	if err != nil {
		t.Fatal(err)
	}
	want := Keys{OutReads: 1, QPN: 0x20, PSN: 0x218b04, RKey: 0xe1d, VAddr: 0x5556a3c20000, GID: netip.MustParseAddr("::ffff:10.78.0.3").As16()}
	if k != want {
		t.Fatalf("parsed %+v, want %+v", k, want)
	}
	if k.Addr() != netip.MustParseAddr("10.78.0.3") {
		t.Errorf("address %v", k.Addr())
	}
	if b := k.Marshal(); string(b[:]) != sampleKeys {
		t.Errorf("marshalled %q, want %q", b, sampleKeys)
	}
}

func TestKeysRefused(t *testing.T) {
	mut := func(i int, c byte) []byte {
		b := []byte(sampleKeys)
		b[i] = c
		return b
	}
	for name, b := range map[string][]byte{
		"short":         []byte(sampleKeys[:107]),
		"long":          append([]byte(sampleKeys), 0),
		"no NUL":        mut(107, ':'),
		"not hex":       mut(12, 'g'),
		"colon missing": mut(4, '-'),
		"GID not hex":   mut(60, 'x'),
		"sign":          mut(10, '+'),
		"empty":         nil,
	} {
		if _, err := ParseKeys(b); !errors.Is(err, ErrKeys) {
			t.Errorf("%s: %v, want ErrKeys", name, err)
		}
	}
}

// FuzzKeys: any 108 bytes either parse into keys that marshal back to the
// same message (lower-case hex) or are refused with ErrKeys; never a panic.
func FuzzKeys(f *testing.F) {
	f.Add([]byte(sampleKeys))
	f.Add(make([]byte, KeysLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKeys(b)
		if err != nil {
			if !errors.Is(err, ErrKeys) {
				t.Fatalf("error %v is not ErrKeys", err)
			}
			return
		}
		k2, err := ParseKeys(func() []byte { m := k.Marshal(); return m[:] }())
		if err != nil || k2 != k {
			t.Fatalf("re-parse: %+v %v, want %+v", k2, err, k)
		}
	})
}

// A keys message ib_read_bw -R (perftest 6.06 on rxe) sent over its
// rdma_cm connection: OUT_READS 128, QPN 0x18, GID index 1.
const sampleKeysBinary = "0000000000000080000000180030f850000009b40000000000007fd921fa800000000000000000000000ffff0a4d00020000000000000001"

func TestKeysBinary(t *testing.T) {
	b, _ := hex.DecodeString(sampleKeysBinary)
	k, err := ParseKeysBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Keys{OutReads: 128, QPN: 0x18, PSN: 0x30f850, RKey: 0x9b4, VAddr: 0x7fd921fa8000, GID: netip.MustParseAddr("::ffff:10.77.0.2").As16()}
	if k != want {
		t.Fatalf("parsed %+v, want %+v", k, want)
	}
	if m := k.MarshalBinary(1); hex.EncodeToString(m[:]) != sampleKeysBinary {
		t.Errorf("marshalled %x, want %s", m, sampleKeysBinary)
	}
	for name, mut := range map[string]func([]byte) []byte{
		"short":      func(b []byte) []byte { return b[:55] },
		"long":       func(b []byte) []byte { return append(b, 0) },
		"empty":      func([]byte) []byte { return nil },
		"QPN 25 bit": func(b []byte) []byte { b[8] = 1; return b },
		"PSN 25 bit": func(b []byte) []byte { b[12] = 1; return b },
		"LID 17 bit": func(b []byte) []byte { b[1] = 1; return b },
		"negative":   func(b []byte) []byte { b[4] = 0xff; return b },
	} {
		if _, err := ParseKeysBinary(mut(append([]byte(nil), b...))); !errors.Is(err, ErrKeys) {
			t.Errorf("%s: %v, want ErrKeys", name, err)
		}
	}
}

// FuzzKeysBinary: any bytes either parse into keys that marshal back to
// the same message (but the padding and the GID index, which are not
// read) or are refused with ErrKeys.
func FuzzKeysBinary(f *testing.F) {
	b, _ := hex.DecodeString(sampleKeysBinary)
	f.Add(b)
	f.Add(make([]byte, KeysBinaryLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKeysBinary(b)
		if err != nil {
			if !errors.Is(err, ErrKeys) {
				t.Fatalf("error %v is not ErrKeys", err)
			}
			return
		}
		m := k.MarshalBinary(binary.BigEndian.Uint32(b[52:]))
		copy(m[20:24], b[20:24])
		if !bytes.Equal(m[:], b) {
			t.Fatalf("re-marshalled %x, want %x", m, b)
		}
	})
}
