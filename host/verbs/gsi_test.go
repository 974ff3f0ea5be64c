package verbs_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestGSI: QP1 takes the 256-byte management datagrams sent to QP 1 with
// the GSI Q_Key, and what it sends comes from source QP 1; a datagram to
// QP 1 with another Q_Key is dropped and counted; a device has one QP1,
// and it is UD.
func TestGSI(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 4096)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 4096)
	gsi := func(e *verbstest.End) *verbs.QP {
		qp, err := e.PD.CreateGSI(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: e.CQ, RecvCQ: e.CQ,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if qp.Num != 1 {
			t.Fatalf("QP1 is QP %d", qp.Num)
		}
		if err := verbs.ReadyUD(qp, verbs.GSIQKey); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := gsi(a), gsi(b)
	if _, err := a.PD.CreateGSI(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: a.CQ, RecvCQ: a.CQ}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a second QP1: %v", err)
	}
	if _, err := b.PD.CreateGSI(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("an RC QP1: %v", err)
	}

	const mad = 256
	verbstest.Fill(a.Buf[:mad], 9)
	qb.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: verbstest.SGL(b, 0, 40+mad)}})
	ah := &verbs.AH{DestMAC: b.MAC, DestGID: b.IP}
	for i, qkey := range []uint32{0x11111111, verbs.GSIQKey} {
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: verbstest.SGL(a, 0, mad), AH: ah, RemoteQPN: 1, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.QPNum != 1 {
			t.Fatalf("QP1's send completion %+v", wc)
		}
	}
	wc := verbstest.WaitWC(t, b.CQ)
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.QPNum != 1 || wc.SrcQP != 1 || wc.ByteLen != 40+mad {
		t.Fatalf("QP1's receive completion %+v", wc)
	}
	if !bytes.Equal(b.Buf[40:40+mad], a.Buf[:mad]) {
		t.Error("the datagram differs")
	}
	if n := b.Counts.RcvdMalformed.Load(); n != 1 {
		t.Errorf("%d datagrams with a wrong Q_Key counted, want 1", n)
	}
}
