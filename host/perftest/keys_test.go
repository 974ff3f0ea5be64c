package perftest

import (
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
