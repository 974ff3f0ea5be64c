package verbs_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestErrorPaths: a bad rkey, an out-of-bounds address, a missing access
// right, a PD mismatch and a bad lkey each complete the work request with
// libibverbs' status, move the QP to ERR, flush what follows with
// WR_FLUSH_ERR, and write nothing outside (or inside) any MR.
func TestErrorPaths(t *testing.T) {
	const size = 1 << 16
	cases := []struct {
		name   string
		op     verbs.WROpcode
		wr     func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR
		status verbs.WCStatus
	}{
		{"bad rkey", verbs.WRRDMAWrite, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: rw.Addr, RKey: rw.RKey ^ 0x55}
		}, verbs.WCRemAccessErr},
		{"out of bounds", verbs.WRRDMAWrite, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: rw.Addr + 4096 - 10, RKey: rw.RKey}
		}, verbs.WCRemAccessErr},
		{"below the region", verbs.WRRDMARead, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: rw.Addr - 64, RKey: rw.RKey}
		}, verbs.WCRemAccessErr},
		{"no remote write", verbs.WRRDMAWrite, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: ro.Addr, RKey: ro.RKey}
		}, verbs.WCRemAccessErr},
		{"PD mismatch", verbs.WRRDMAWrite, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: other.Addr, RKey: other.RKey}
		}, verbs.WCRemAccessErr},
		{"no remote atomic", verbs.WRAtomicFetchAdd, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			return verbs.SendWR{RemoteAddr: rw.Addr, RKey: rw.RKey, CompareAdd: 1}
		}, verbs.WCRemAccessErr},
		{"bad lkey", verbs.WRRDMAWrite, func(a, b *verbstest.End, ro, rw, other *verbs.MR) verbs.SendWR {
			wr := verbs.SendWR{RemoteAddr: rw.Addr, RKey: rw.RKey}
			wr.SGL = []verbs.SGE{{Addr: a.MR.Addr, Length: 64, LKey: a.MR.LKey ^ 0x33}}
			return wr
		}, verbs.WCLocProtErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
			a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), size)
			b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), size)
			verbstest.Connect(t, a, b, 3, 12)
			// b's regions: read-only, read-write (4 KiB inside guard space), and one in another PD.
			guard := make([]byte, 3*4096)
			for i := range guard {
				guard[i] = 0xa5
			}
			roBuf := append([]byte{}, guard[:4096]...)
			rwArea := append([]byte{}, guard...)
			ro, err := b.PD.RegMR(roBuf, verbs.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			rw, err := b.PD.RegMR(rwArea[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			pd2, _ := b.Dev.AllocPD()
			otherBuf := append([]byte{}, guard[:4096]...)
			other, err := pd2.RegMR(otherBuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			wr := c.wr(a, b, ro, rw, other)
			wr.WRID, wr.Opcode, wr.Flags = 1, c.op, verbs.SendSignaled
			if wr.SGL == nil {
				n := 64
				if c.op == verbs.WRAtomicFetchAdd {
					n = 8
				}
				wr.SGL = verbstest.SGL(a, 0, n)
			}
			next := verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 64), RemoteAddr: rw.Addr, RKey: rw.RKey}
			if _, err := a.QP.PostSend([]verbs.SendWR{wr, next}); err != nil {
				t.Fatal(err)
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.WRID != 1 || wc.Status != c.status {
				t.Fatalf("first completion %+v (%v), want %v", wc, wc.Status, c.status)
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.WRID != 2 || wc.Status != verbs.WCWRFlushErr {
				t.Fatalf("second completion %+v, want WR_FLUSH_ERR", wc)
			}
			if st := a.QP.State(); st != verbs.QPSErr {
				t.Errorf("requester QP is %v, want ERR", st)
			}
			// Posting to a QP in ERR completes with WR_FLUSH_ERR.
			a.QP.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 8), RemoteAddr: rw.Addr, RKey: rw.RKey}})
			if wc := verbstest.WaitWC(t, a.CQ); wc.WRID != 3 || wc.Status != verbs.WCWRFlushErr {
				t.Fatalf("post in ERR: %+v", wc)
			}
			b.Dev.Fence()
			for name, buf := range map[string][]byte{"read-only region": roBuf, "other PD's region": otherBuf, "guards": append(rwArea[:4096:4096], rwArea[8192:]...)} {
				if !bytes.Equal(buf, guard[:len(buf)]) {
					t.Errorf("%s changed", name)
				}
			}
			if c.status == verbs.WCRemAccessErr && !bytes.Equal(rwArea[4096:8192], guard[:4096]) {
				t.Errorf("the target region changed although the request was refused")
			}
		})
	}
}

// TestModifyErrors: invalid transitions give clear errors through the API.
func TestModifyErrors(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 4096)
	err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN)
	if err == nil || !errorsIs(err, verbs.ErrInvalidTransition) {
		t.Errorf("RESET->RTS: %v", err)
	}
	err = a.QP.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.AttrState|verbs.AttrPort)
	if !errorsIs(err, verbs.ErrMissingAttr) {
		t.Errorf("RESET->INIT without PKEY_INDEX and ACCESS_FLAGS: %v", err)
	}
	if _, err := a.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errorsIs(err, verbs.ErrInvalid) {
		t.Errorf("post send in RESET: %v", err)
	}
}

// TestQueueFull: a send queue holds MaxSendWR work requests until their
// completions have been polled; one more is refused with ErrQueueFull.
func TestQueueFull(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	qa, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err := verbs.ConnectRC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, 3, 14); err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 64), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}
	wrs := []verbs.SendWR{wr, wr, wr, wr, wr}
	if n, err := qa.PostSend(wrs); n != 4 || !errorsIs(err, verbs.ErrQueueFull) {
		t.Fatalf("PostSend of 5 into 4 = %d, %v", n, err)
	}
	for range 4 {
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	if n, err := qa.PostSend(wrs[:4]); n != 4 || err != nil {
		t.Fatalf("after polling: %d, %v", n, err)
	}
	for range 4 {
		waitWC(t, a.CQ)
	}
	if _, err := qb.PostRecv(make([]verbs.RecvWR, 5)); !errorsIs(err, verbs.ErrQueueFull) {
		t.Errorf("PostRecv of 5 into 4: %v", err)
	}
}
