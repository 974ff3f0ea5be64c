package verbs_test

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestMulticast: a UD datagram sent to a group reaches every QP attached
// to it (each its own copy, its own completion, the sender's QPN as its
// source) and no other QP; a QP detached, or destroyed, takes no more;
// what may not be attached is refused.
func TestMulticast(t *testing.T) {
	a, b := newPair(t)
	const qkey = 0x11111111
	ud := func(e *end) *verbs.QP {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := verbs.ReadyUD(qp, qkey); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	group, other := netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("239.9.9.9")
	qa := ud(a)
	qbs := []*verbs.QP{ud(b), ud(b), ud(b), ud(b)} // 0 and 1 in the group, 2 in none, 3 in another
	for i, g := range []netip.Addr{group, group, {}, other} {
		if g.IsValid() {
			if err := qbs[i].AttachMulticast(g); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := qbs[0].AttachMulticast(group); err != nil {
		t.Errorf("attaching again: %v", err)
	}
	const size = 300
	slot := func(i int) int { return 4096 * (i + 1) }
	post := func() {
		for i, qb := range qbs {
			if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(b, slot(i), 40+size)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(seed uint64) {
		verbstest.Fill(a.Buf[:size], seed)
		ah := &verbs.AH{DestMAC: verbs.MulticastMAC(group), DestGID: group}
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: seed, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: verbstest.SGL(a, 0, size), AH: ah, RemoteQPN: datapath.MulticastQPN, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	// received takes the completions that come within a while.
	received := func(want int) []verbs.WC {
		var got []verbs.WC
		for range want {
			got = append(got, waitWC(t, b.CQ))
		}
		time.Sleep(50 * time.Millisecond)
		wc := make([]verbs.WC, 4)
		if n := b.CQ.Poll(wc); n > 0 {
			t.Errorf("more completions than the group's QPs: %+v", wc[:n])
		}
		return got
	}
	post()
	send(1)
	got := received(2)
	var qpns []uint32
	for _, wc := range got {
		if wc.Status != verbs.WCSuccess || wc.SrcQP != qa.Num || wc.ByteLen != 40+size || wc.Flags&verbs.WCWithGRH == 0 {
			t.Errorf("receive completion %+v", wc)
		}
		qpns = append(qpns, wc.QPNum)
		i := int(wc.WRID)
		if !bytes.Equal(b.Buf[slot(i)+40:slot(i)+40+size], a.Buf[:size]) {
			t.Errorf("QP %d's copy differs", wc.QPNum)
		}
	}
	slices.Sort(qpns)
	if want := []uint32{qbs[0].Num, qbs[1].Num}; !slices.Equal(qpns, want) {
		t.Fatalf("the datagram reached QPs %v, want the group's %v", qpns, want)
	}
	if n := b.Dev.NIC().Counters().McastRecvs.Load(); n != 2 {
		t.Errorf("mcast_recvs %d, want 2", n)
	}

	// QP 1 detached: only QP 0 takes the next.
	if err := qbs[1].DetachMulticast(group); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0} {
		if _, err := qbs[i].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(b, slot(i), 40+size)}}); err != nil {
			t.Fatal(err)
		}
	}
	send(2)
	if got := received(1); got[0].QPNum != qbs[0].Num {
		t.Errorf("after the detach: QP %d took it, want QP %d", got[0].QPNum, qbs[0].Num)
	}

	// QP 0 destroyed: the group is empty, and a datagram to it is a
	// frame for no QP.
	if err := qbs[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	unknown := b.Dev.NIC().Counters().RcvdUnknownQP.Load()
	send(3)
	received(0)
	if b.Dev.NIC().Counters().RcvdUnknownQP.Load() != unknown+1 {
		t.Error("a datagram to a group no QP is attached to was not counted rcvd_unknown_qp")
	}

	// Refused: an RC QP, a unicast address, a QP not attached.
	rc, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"an RC QP", rc.AttachMulticast(group)},
		{"a unicast address", qbs[2].AttachMulticast(netip.MustParseAddr("10.47.0.9"))},
		{"a detach of a QP not attached", qbs[2].DetachMulticast(group)},
	} {
		if !errors.Is(c.err, verbs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
}

// TestDestroySendsPostedDatagrams: a UD QP destroyed right after its
// program posted datagrams (unsignaled, as mckey's sender posts its last
// ones before it leaves) sends them first: every one arrives.
func TestDestroySendsPostedDatagrams(t *testing.T) {
	a, b := newPair(t)
	const qkey, n = 0x11111111, 16
	ud := func(e *end) *verbs.QP {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: n, MaxRecvWR: n, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := verbs.ReadyUD(qp, qkey); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := ud(a), ud(b)
	for i := range n {
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(b, 256*i, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := &verbs.AH{DestMAC: b.MAC, DestGID: b.IP}
	for i := range n {
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGL: verbstest.SGL(a, 0, 100), AH: ah, RemoteQPN: qb.Num, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if wc := waitWC(t, b.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("receive completion %+v", wc)
		}
	}
}
