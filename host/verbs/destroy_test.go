package verbs_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestDestroyQP: a destroyed QP's unread completions are gone, the NIC
// drops what comes for it (rcvd_unknown_qp), the QP refuses further use,
// its CQ can be destroyed once no QP has it, and its number serves a new
// QP (the device's table holds one) whose completions arrive in the same
// CQ.
func TestDestroyQP(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("10.47.0.2"), MaxQPs: 1}, Port: pb}, 1<<16)
	connect := func() {
		t.Helper()
		if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
		verbstest.Connect(t, a, b, 3, 14)
	}
	send := func(wrid uint64) {
		t.Helper()
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(wrid uint64) {
		t.Helper()
		if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: wrid, SGL: sgl(b, 0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	connect()
	recv(1)
	recv(2)
	send(10)
	if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("SEND: %v", wc.Status)
	}
	// b's receive completion is unread; the QP goes with it.
	old := b.QP
	if err := old.Destroy(); err != nil {
		t.Fatal(err)
	}
	var wc [4]verbs.WC
	if n := b.CQ.Poll(wc[:]); n != 0 {
		t.Errorf("the destroyed QP left %d completions: %+v", n, wc[:n])
	}
	if err := old.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a second Destroy: %v", err)
	}
	if err := old.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.AttrState); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("Modify after Destroy: %v", err)
	}
	if _, err := old.PostRecv([]verbs.RecvWR{{WRID: 3}}); err == nil {
		t.Error("PostRecv after Destroy: no error")
	}
	unknown := b.Counts.RcvdUnknownQP.Load()
	send(11) // to the number nobody has now
	for b.Counts.RcvdUnknownQP.Load() == unknown {
		b.Dev.Fence()
	}
	// The CQ goes only when no QP has it.
	spare, err := b.Dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: spare, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatalf("a QP in the destroyed one's place: %v", err)
	}
	if busy.Num != old.Num {
		t.Errorf("the new QP is %d, want the freed %d (the table holds one)", busy.Num, old.Num)
	}
	if err := spare.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("destroying a CQ a QP uses: %v", err)
	}
	if _, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ}); !errors.Is(err, verbs.ErrNoResources) {
		t.Errorf("a second QP on a table of one: %v", err)
	}
	// The new QP, under the old number, gets its own completions in the
	// CQ that dropped the old one's.
	b.QP = busy
	a.Dev.Fence()
	connect()
	recv(20)
	send(21)
	for _, e := range []*verbstest.End{a, b} {
		if wc := waitWC(t, e.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("after the reuse: %+v", wc)
		} else if e == b && wc.WRID != 20 {
			t.Errorf("b's completion is work request %d, want 20", wc.WRID)
		}
	}
	if err := busy.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := spare.Destroy(); err != nil {
		t.Fatalf("destroying the CQ once free: %v", err)
	}
	if err := spare.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a second CQ Destroy: %v", err)
	}
}

// TestQPAndCQNumbersModel drives creates and destroys of QPs and CQs at
// random against a model of the device's tables: a new object takes a
// number never used while there is one, then the longest free one; a
// create fails exactly when the table is full; live numbers are unique.
func TestQPAndCQNumbersModel(t *testing.T) {
	const maxQPs = 6
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 64})
	dev, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("10.47.0.1"), MaxQPs: maxQPs}, Port: pa})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	type model struct {
		fresh, end uint32
		free       []uint32
		live       map[uint32]bool
	}
	next := func(m *model) (uint32, bool) {
		switch {
		case m.fresh < m.end:
			return m.fresh, true
		case len(m.free) > 0:
			return m.free[0], true
		}
		return 0, false
	}
	take := func(m *model, n uint32) {
		if m.fresh < m.end {
			m.fresh++
		} else {
			m.free = m.free[1:]
		}
		m.live[n] = true
	}
	give := func(m *model, n uint32) {
		delete(m.live, n)
		m.free = append(m.free, n)
	}
	qm := &model{fresh: datapath.FirstQPN, end: datapath.FirstQPN + maxQPs, live: map[uint32]bool{}}
	cm := &model{fresh: 0, end: 256, live: map[uint32]bool{}}
	cq, err := dev.CreateCQ(16) // the QPs'
	if err != nil {
		t.Fatal(err)
	}
	take(cm, cq.Num())
	qps := map[uint32]*verbs.QP{}
	cqs := map[uint32]*verbs.CQ{}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 2000 {
		switch op := rng.IntN(4); {
		case op == 0 && len(qps) > 0 || len(qps) == maxQPs:
			n, qp := anyOf(qps)
			if err := qp.Destroy(); err != nil {
				t.Fatalf("step %d: destroying QP %d: %v", step, n, err)
			}
			delete(qps, n)
			give(qm, n)
		case op == 1 && len(cqs) > 0:
			n, c := anyOf(cqs)
			if err := c.Destroy(); err != nil {
				t.Fatalf("step %d: destroying CQ %d: %v", step, n, err)
			}
			delete(cqs, n)
			give(cm, n)
		case op == 2:
			want, ok := next(cm)
			c, err := dev.CreateCQ(4)
			if ok != (err == nil) {
				t.Fatalf("step %d: CreateCQ: %v, the model says free %v", step, err, ok)
			}
			if ok {
				if c.Num() != want || cm.live[want] {
					t.Fatalf("step %d: CQ %d, the model says %d", step, c.Num(), want)
				}
				take(cm, want)
				cqs[want] = c
			}
		default:
			want, ok := next(qm)
			qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if ok != (err == nil) {
				t.Fatalf("step %d: CreateQP: %v, the model says free %v", step, err, ok)
			}
			if ok {
				if qp.Num != want || qm.live[want] {
					t.Fatalf("step %d: QP %d, the model says %d", step, qp.Num, want)
				}
				take(qm, want)
				qps[want] = qp
			}
		}
	}
	if err := cq.Destroy(); len(qps) > 0 && !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("the QPs' CQ destroyed under %d QPs: %v", len(qps), err)
	}
}

// TestDeregMR: a deregistered region's keys are refused (the peer's WRITE
// is NAKed, remote access error), its MPT index serves a later region
// under another key once the table has been used through, and the device
// counts its regions and MTT entries.
func TestDeregMR(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	// An MPT of 3: entry 0 is no region's, entry 1 is the End's buffer.
	b := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("10.47.0.2"), MaxMRs: 3}, Port: pb}, 1<<16)
	connect := func() {
		t.Helper()
		for _, e := range []*verbstest.End{a, b} {
			if err := e.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
		}
		verbstest.Connect(t, a, b, 3, 14)
	}
	write := func(mr *verbs.MR) verbs.WCStatus {
		t.Helper()
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 100),
			RemoteAddr: mr.Addr, RKey: mr.RKey}}); err != nil {
			t.Fatal(err)
		}
		return waitWC(t, a.CQ).Status
	}
	usage := func(name string) int {
		for _, u := range b.Dev.Usage() {
			if u.Name == name {
				return u.InUse
			}
		}
		t.Fatalf("no usage %q", name)
		return 0
	}
	connect()
	first, err := b.PD.RegMR(make([]byte, 3*4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if st := write(first); st != verbs.WCSuccess {
		t.Fatalf("WRITE to a registered region: %v", st)
	}
	if n, pages := usage("mrs"), usage("mtt_entries"); n != 2 || pages != 16+3 {
		t.Errorf("in use: %d regions and %d MTT entries, want 2 and 19", n, pages)
	}
	if _, err := b.PD.RegMR(make([]byte, 64), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrNoResources) {
		t.Fatalf("a third region in an MPT of 3: %v", err)
	}
	if err := first.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := first.Dereg(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a second Dereg: %v", err)
	}
	if n, pages := usage("mrs"), usage("mtt_entries"); n != 1 || pages != 16 {
		t.Errorf("after Dereg: %d regions and %d MTT entries, want 1 and 16", n, pages)
	}
	if st := write(first); st != verbs.WCRemAccessErr {
		t.Errorf("WRITE with a deregistered key: %v, want a remote access error", st)
	}
	second, err := b.PD.RegMR(make([]byte, 2*4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatalf("a region in the freed entry: %v", err)
	}
	if second.RKey>>8 != first.RKey>>8 || second.RKey == first.RKey {
		t.Errorf("keys %#x then %#x: want the same MPT index, another key", first.RKey, second.RKey)
	}
	connect() // the refused WRITE left a's QP in error
	if st := write(first); st != verbs.WCRemAccessErr {
		t.Errorf("WRITE with the old key to the reused entry: %v, want a remote access error", st)
	}
	connect()
	if st := write(second); st != verbs.WCSuccess {
		t.Errorf("WRITE to the new region: %v", st)
	}
}

// anyOf returns one of m's entries (m is not empty).
func anyOf[V any](m map[uint32]V) (uint32, V) {
	for k, v := range m {
		return k, v
	}
	panic("anyOf: empty map")
}

// TestDestroySRQ: an SRQ a QP receives from cannot be destroyed; once the
// QP is gone it can, refuses posts after, and the device counts it.
func TestDestroySRQ(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	srqs := func() int {
		for _, u := range b.Dev.Usage() {
			if u.Name == "srqs" {
				return u.InUse
			}
		}
		return -1
	}
	srq, err := b.PD.CreateSRQ(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if n := srqs(); n != 1 {
		t.Errorf("%d SRQs in use, want 1", n)
	}
	if err := srq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("destroying the SRQ of a QP: %v", err)
	}
	if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: sgl(b, 0, 64)}}); err != nil {
		t.Fatal(err)
	}
	b.QP = qp
	verbstest.Connect(t, a, b, 3, 14)
	if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 32)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, b.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 7 {
		t.Fatalf("the SEND's receive: %+v, want the SRQ's work request 7", wc)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatalf("destroying the SRQ once free: %v", err)
	}
	if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: 8}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("PostRecv after Destroy: %v", err)
	}
	if err := srq.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a second Destroy: %v", err)
	}
	if n := srqs(); n != 0 {
		t.Errorf("%d SRQs in use after Destroy, want 0", n)
	}
}
