package pingpong

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestDestMessage(t *testing.T) {
	rxe := netip.MustParseAddr("::ffff:10.77.0.2").As16()
	for _, tc := range []struct {
		name string
		d    Dest
		msg  string
	}{
		// What ibv_rc_pingpong -g 1 on rxe writes: the GID's bytes in
		// order as hex.
		{"rxe", Dest{QPN: 0x11, PSN: 0xa1b2c3, GID: rxe}, "0000:000011:a1b2c3:00000000000000000000ffff0a4d0002"},
		{"zero gid", Dest{LID: 0x12, QPN: 0xffffff, PSN: 0}, "0012:ffffff:000000:00000000000000000000000000000000"},
		{"link-local", Dest{QPN: 0x1234, PSN: 0x42, GID: netip.MustParseAddr("fe80::5054:ff:fe77:2").As16()},
			"0000:001234:000042:fe80000000000000505400fffe770002"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.d.Marshal()
			if len(m) != MsgSize || MsgSize != 52 {
				t.Fatalf("message is %d bytes, want 52", len(m))
			}
			if got := string(m[:len(tc.msg)]); got != tc.msg || m[MsgSize-1] != 0 {
				t.Fatalf("Marshal = %q, want %q and a NUL", m, tc.msg)
			}
			got, err := ParseDest(m[:])
			if err != nil || got != tc.d {
				t.Fatalf("ParseDest(%q) = %+v, %v; want %+v", m, got, err, tc.d)
			}
		})
	}
	if a := (Dest{GID: rxe}).Addr(); a != netip.MustParseAddr("10.77.0.2") {
		t.Errorf("Addr of an IPv4-mapped GID = %v, want 10.77.0.2", a)
	}
	if a := (Dest{}).Addr(); a.IsValid() {
		t.Errorf("Addr of the zero GID = %v, want none", a)
	}
	if s := (Dest{QPN: 0x11, PSN: 0x22, GID: rxe}).String(); s != "LID 0x0000, QPN 0x000011, PSN 0x000022, GID ::ffff:10.77.0.2" {
		t.Errorf("String = %q", s)
	}
}

func TestParseDestRefuses(t *testing.T) {
	for _, msg := range []string{
		"",
		"done",
		"0000:000011:a1b2c3",
		"0000:000011:a1b2c3:0000", // short GID
		"0000:000011:a1b2c3:00000000000000000000ffff0a4d000g",       // not hex
		"10000:000011:a1b2c3:00000000000000000000ffff0a4d0002",      // LID over 16 bits
		"0000:1000000:a1b2c3:00000000000000000000ffff0a4d0002",      // QPN over 24 bits
		"0000:000011:1000000:00000000000000000000ffff0a4d0002",      // PSN over 24 bits
		"0000:000011:a1b2c3:00000000000000000000ffff0a4d0002:extra", // five fields
		"0000:-00011:a1b2c3:00000000000000000000ffff0a4d0002",       // sign
	} {
		if d, err := ParseDest([]byte(msg)); !errors.Is(err, ErrBadDest) {
			t.Errorf("ParseDest(%q) = %+v, %v; want ErrBadDest", msg, d, err)
		}
	}
}

func TestDestsOnTheSocket(t *testing.T) {
	a := Dest{QPN: 1, PSN: 2}
	var b bytes.Buffer
	if err := writeDests(&b, []Dest{a}, srqMsgs); err != nil {
		t.Fatal(err)
	}
	if b.Len() != srqMsgs*MsgSize {
		t.Fatalf("wrote %d bytes, want %d", b.Len(), srqMsgs*MsgSize)
	}
	if !strings.HasPrefix(string(b.Bytes()[MsgSize:]), "0000:000000:000000:") {
		t.Fatalf("unused entries are not zero destinations: %q", b.Bytes()[MsgSize:2*MsgSize])
	}
	got, err := readDests(&b, srqMsgs, 1)
	if err != nil || len(got) != 1 || got[0] != a {
		t.Fatalf("readDests = %+v, %v", got, err)
	}
	if _, err := readDests(strings.NewReader("0000:000011"), 1, 1); err == nil {
		t.Fatal("a short read was taken")
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:a1b2c3:00000000000000000000ffff0a4d0002\x00"))
	f.Add([]byte("done\x00"))
	f.Add([]byte("ffff:ffffff:ffffff:ffffffffffffffffffffffffffffffff"))
	f.Fuzz(func(t *testing.T, m []byte) {
		d, err := ParseDest(m)
		if err != nil {
			if !errors.Is(err, ErrBadDest) {
				t.Fatalf("error %v is not ErrBadDest", err)
			}
			return
		}
		again, err := ParseDest(func() []byte { b := d.Marshal(); return b[:] }())
		if err != nil || again != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, again, err)
		}
	})
}
