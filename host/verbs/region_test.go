package verbs_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/host/verbs"
)

// TestRemoteRegion: the encoding round-trips, a REP's padded private
// data decodes, a short one is refused.
func TestRemoteRegion(t *testing.T) {
	r := verbs.RemoteRegion{Addr: 0x1122334455667788, Length: 1 << 20, RKey: 0xabcdef01}
	b, err := r.MarshalBinary()
	if err != nil || len(b) != verbs.RemoteRegionSize {
		t.Fatalf("MarshalBinary: %d bytes, %v", len(b), err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"exact", b, true},
		{"padded, as a REP's private data", append(bytes.Clone(b), make([]byte, 180)...), true},
		{"short", b[:15], false},
		{"empty", nil, false},
	} {
		var got verbs.RemoteRegion
		err := got.UnmarshalBinary(tc.in)
		if tc.ok && (err != nil || got != r) || !tc.ok && !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%s: %+v, %v", tc.name, got, err)
		}
	}
}

// FuzzRemoteRegion: any input either is refused or decodes to a region
// whose encoding is its first 16 bytes.
func FuzzRemoteRegion(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		var r verbs.RemoteRegion
		if err := r.UnmarshalBinary(in); err != nil {
			if len(in) >= verbs.RemoteRegionSize {
				t.Fatalf("%d bytes refused: %v", len(in), err)
			}
			return
		}
		b, _ := r.MarshalBinary()
		if !bytes.Equal(b, in[:verbs.RemoteRegionSize]) {
			t.Fatalf("%x re-encodes as %x", in[:16], b)
		}
	})
}

// TestWCErr: a failed completion's error names the work request and
// matches its status with errors.Is; a successful one has none.
func TestWCErr(t *testing.T) {
	if err := (verbs.WC{Status: verbs.WCSuccess}).Err(); err != nil {
		t.Errorf("success: %v", err)
	}
	err := verbs.WC{WRID: 9, Status: verbs.WCRetryExcErr, Opcode: verbs.WCRDMAWrite}.Err()
	var wce *verbs.WCError
	if !errors.Is(err, verbs.WCRetryExcErr) || errors.Is(err, verbs.WCRemAccessErr) || !errors.As(err, &wce) || wce.WC.WRID != 9 {
		t.Errorf("%v: Is/As do not match", err)
	}
	if want := "work request 9 (RDMA_WRITE) failed: transport retry counter exceeded"; !bytes.Contains([]byte(fmt.Sprint(err)), []byte(want)) {
		t.Errorf("%q, want it to say %q", err, want)
	}
}
