package verbs_test

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestSolicited: a SEND or WRITE with immediate posted with SendSolicited
// carries the SE bit, and its receive completion says so (WCSolicited),
// as does the completion notice a solicited-only arm waits for; one
// posted without it does not.
func TestSolicited(t *testing.T) {
	a, b := pair(t)
	var notices, solicited atomic.Int32
	b.CQ.OnCompletion(func(s bool) {
		notices.Add(1)
		if s {
			solicited.Add(1)
		}
	})
	defer b.CQ.OnCompletion(nil)
	cases := []struct {
		op    verbs.WROpcode
		flags verbs.SendFlags
		want  bool
	}{
		{verbs.WRSend, 0, false},
		{verbs.WRSend, verbs.SendSolicited, true},
		{verbs.WRSendWithImm, verbs.SendSolicited, true},
		{verbs.WRRDMAWriteWithImm, verbs.SendSolicited, true},
		{verbs.WRRDMAWriteWithImm, 0, false},
	}
	for i, c := range cases {
		if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: sgl(b, 0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{WRID: uint64(i), Opcode: c.op, Flags: verbs.SendSignaled | c.flags, SGL: sgl(a, 0, 3000), Imm: 7}
		if c.op == verbs.WRRDMAWriteWithImm {
			wr.RemoteAddr, wr.RKey = b.MR.Addr+8192, b.MR.RKey
		}
		before := solicited.Load()
		if _, err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if sw := waitWC(t, a.CQ); sw.Status != verbs.WCSuccess {
			t.Fatalf("case %d: send %+v", i, sw)
		}
		rw := waitWC(t, b.CQ)
		if rw.Status != verbs.WCSuccess || (rw.Flags&verbs.WCSolicited != 0) != c.want {
			t.Errorf("case %d (%v, flags %#x): receive %+v, want solicited %v", i, c.op, c.flags, rw, c.want)
		}
		if got := solicited.Load() - before; (got == 1) != c.want {
			t.Errorf("case %d: %d solicited notices, want solicited %v", i, got, c.want)
		}
	}
	if notices.Load() < int32(len(cases)) {
		t.Errorf("%d completion notices for %d receives", notices.Load(), len(cases))
	}
}

// TestInlineBounce: inline data too long for a WQE (up to MaxInlineData)
// and inline data on a UD QP go through the QP's bounce slots; the
// caller's buffer (SendWR.Inline, unregistered) may change as soon as
// PostSend returns.
func TestInlineBounce(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	capa := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: verbs.MaxInlineData}
	if _, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: verbs.MaxInlineData + 1}}); err == nil {
		t.Error("a QP with more inline data than MaxInlineData")
	}
	for _, typ := range []verbs.QPType{verbs.QPTRC, verbs.QPTUD} {
		qa, err := a.PD.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: capa})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: capa})
		if err != nil {
			t.Fatal(err)
		}
		ahB := verbs.AH{DestMAC: b.MAC, DestGID: b.IP}
		if typ == verbs.QPTRC {
			if err := verbs.ConnectRC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, ahB, 3, 14); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, q := range []*verbs.QP{qa, qb} {
				if err := verbs.ReadyUD(q, 0x1111); err != nil {
					t.Fatal(err)
				}
			}
		}
		data := bytes.Repeat([]byte("0123456789abcdef"), verbs.MaxInlineData/16)
		msg := append([]byte(nil), data...)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: verbstest.SGL(b, 0, 1024)}}); err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg}
		if typ == verbs.QPTUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = &ahB, qb.Num, 0x1111
		}
		if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		clear(msg) // the caller's buffer is its own again
		if sw := waitWC(t, a.CQ); sw.Status != verbs.WCSuccess {
			t.Fatalf("%v: send %+v", typ, sw)
		}
		rw := waitWC(t, b.CQ)
		off := 0
		if typ == verbs.QPTUD {
			off = 40 // the GRH
		}
		if rw.Status != verbs.WCSuccess || int(rw.ByteLen) != off+len(data) || !bytes.Equal(b.Buf[off:off+len(data)], data) {
			t.Fatalf("%v: receive %+v, data %q", typ, rw, b.Buf[off:off+16])
		}
		wr.Inline = append(data, 'x') // one byte more than the QP takes
		if _, err := qa.PostSend([]verbs.SendWR{wr}); err == nil {
			t.Errorf("%v: %d bytes inline on a QP of %d", typ, len(wr.Inline), verbs.MaxInlineData)
		}
		qa.Destroy()
		qb.Destroy()
	}
}
