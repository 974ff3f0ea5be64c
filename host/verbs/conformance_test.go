package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
	"github.com/softrnic/softrnic/reliability"
)

// TestQPNumbers: QPNs start at 17, as rxe's do; QPN 0 and 1 (the special
// QP0 and QP1) are never handed out, an RC or UC QP cannot be pointed at
// them, and a packet to QPN 1 reaches no QP.
func TestQPNumbers(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{})
	d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA, MaxQPs: 4}, Port: pa})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	var qps []*verbs.QP
	for i, typ := range []verbs.QPType{verbs.QPTRC, verbs.QPTUC, verbs.QPTUD, verbs.QPTRC} {
		attr.Type = typ
		qp, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint32(datapath.FirstQPN + i); qp.Num != want {
			t.Errorf("QP %d is numbered %d, want %d", i, qp.Num, want)
		}
		qps = append(qps, qp)
	}
	if _, err := pd.CreateQP(attr); !errors.Is(err, verbs.ErrNoResources) {
		t.Errorf("a fifth QP on a device of 4: %v, want ErrNoResources", err)
	}
	for _, qp := range qps[:2] {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		for _, dest := range []uint32{0, 1} {
			err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DestMAC: macB, DestGID: ipB}, PathMTU: 3, DestQPN: dest},
				verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
			if qp.Type == verbs.QPTUC {
				err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DestMAC: macB, DestGID: ipB}, PathMTU: 3, DestQPN: dest},
					verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN)
			}
			if !errors.Is(err, verbs.ErrInvalidAttr) {
				t.Errorf("%v QP to destination QPN %d: %v, want ErrInvalidAttr", qp.Type, dest, err)
			}
		}
	}

	h := newHostile(t)
	before := h.nic.Counters().RcvdUnknownQP.Load()
	got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, DestQP: 1, PSN: hostilePSN, AckReq: true},
		RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: 4}, Payload: []byte("qp1!")}, 0)
	waitCount(t, "rcvd_unknown_qp", &h.nic.Counters().RcvdUnknownQP, before+1)
	h.check(t)
	if len(got) != 0 || string(h.region[:4]) == "qp1!" {
		t.Errorf("an RC WRITE to QPN 1: %d answers, region %q", len(got), h.region[:4])
	}
	h.check(t)
}

// TestPathMTUAboveActive: a port on a 1500-byte netdev has an active MTU
// of 1024 (as rxe's); a QP asking for a larger path MTU is refused with
// EINVAL, as libibverbs refuses it, and a netdev too small for any IB MTU
// is refused at Open.
func TestPathMTUAboveActive(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{})
	a, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA}, Port: pa, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := verbstest.NewEnd(t, pb, macB, ipB, 4096)
	for _, tc := range []struct{ netdev, active int }{{1500, 3}, {1100, 2}, {1103, 2}, {1104, 3}, {9000, 5}, {4175, 4}, {4176, 5}, {336, 1}} {
		pc, _ := porttest.NewPair(porttest.Config{})
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA}, Port: pc, MTU: tc.netdev})
		if err != nil {
			t.Fatalf("netdev MTU %d: %v", tc.netdev, err)
		}
		if got := d.ActiveMTU(); got != tc.active {
			t.Errorf("netdev MTU %d: active MTU %d, want %d", tc.netdev, got, tc.active)
		}
		d.Close()
	}
	pc, _ := porttest.NewPair(porttest.Config{})
	if d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA}, Port: pc, MTU: 300}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("netdev MTU 300: %v, want ErrInvalid", err)
		if d != nil {
			d.Close()
		}
	}
	// The device's host memory and completion notices are its own.
	if d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA, Notify: func(uint32) {}}, Port: pc}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("NICConfig.Notify set: %v, want ErrInvalid", err)
		if d != nil {
			d.Close()
		}
	}
	pd, _ := a.AllocPD()
	cq, _ := a.CreateCQ(16)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	err = verbs.ConnectRC(qp, b.QP, verbs.AH{DestMAC: macA, DestGID: ipA}, verbs.AH{DestMAC: macB, DestGID: ipB}, 5, 14)
	if !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("path MTU 4096 on a 1500-byte netdev: %v, want ErrInvalidAttr", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := b.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := verbs.ConnectRC(qp, b.QP, verbs.AH{DestMAC: macA, DestGID: ipA}, verbs.AH{DestMAC: macB, DestGID: ipB}, 3, 14); err != nil {
		t.Fatalf("path MTU 1024 on a 1500-byte netdev: %v", err)
	}
}

// TestBadPKey: a request whose P_Key is another partition's is dropped
// and counted, unanswered and unwritten; a limited member of the default
// partition is accepted.
func TestBadPKey(t *testing.T) {
	h := newHostile(t)
	psn := wire.PSN(hostilePSN)
	for i, tc := range []struct {
		pkey uint16
		ok   bool
	}{{0x1234, false}, {0x7fff, true}, {0x8001, false}, {0xffff, true}} {
		msg := []byte{'p', 'k', byte(i)}
		bad := h.nic.Counters().RcvdBadPKey.Load()
		want := 0
		if tc.ok {
			want = 1
		}
		got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PKey: tc.pkey, PSN: psn, AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: 3}, Payload: msg}, want)
		if !tc.ok {
			waitCount(t, "rcvd_bad_pkey", &h.nic.Counters().RcvdBadPKey, bad+1)
		}
		h.check(t)
		landed := string(h.region[:3]) == string(msg)
		if tc.ok != landed || tc.ok != (len(got) == 1) {
			t.Errorf("P_Key %#04x: landed %v, %d answers; want accepted %v", tc.pkey, landed, len(got), tc.ok)
		}
		if tc.ok {
			psn = psn.Next()
		}
	}
	h.check(t)
}

// waitCount waits up to 5 s for a counter to reach want: the proof that
// the NIC took a frame it does not answer.
func waitCount(t *testing.T, name string, c *atomic.Uint64, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); c.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %d, want %d", name, c.Load(), want)
		}
	}
	if c.Load() != want {
		t.Errorf("%s %d, want %d", name, c.Load(), want)
	}
}

// nakOf returns the NAK code of a single AETH answer, or -1.
func nakOf(got []wire.Packet) int {
	if len(got) != 1 || !got[0].Info.Has(wire.HdrAETH) || !got[0].AETH().Syndrome().IsNAK() {
		return -1
	}
	return int(got[0].AETH().Syndrome().Value())
}

// TestRequestLengths: a SEND or WRITE packet cut otherwise than the path
// MTU (1024 here) cuts messages, or whose payload is not what its RETH
// announced, is refused with an invalid request NAK and writes nothing.
func TestRequestLengths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      wire.Opcode
		dmaLen  uint32
		payload int
	}{
		{"WRITE_ONLY above the MTU", wire.RCRDMAWriteOnly, 2048, 2048},
		{"WRITE_ONLY shorter than its RETH", wire.RCRDMAWriteOnly, 100, 50},
		{"WRITE_ONLY longer than its RETH", wire.RCRDMAWriteOnly, 50, 100},
		{"WRITE_FIRST short", wire.RCRDMAWriteFirst, 2000, 1000},
		{"WRITE_FIRST for a one-packet message", wire.RCRDMAWriteFirst, 1024, 1024},
		{"SEND_ONLY above the MTU", wire.RCSendOnly, 0, 1500},
		{"SEND_FIRST short", wire.RCSendFirst, 0, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t)
			got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: tc.op, PSN: hostilePSN, AckReq: true},
				RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: tc.dmaLen}, Payload: filled(tc.payload)}, 1)
			if c := nakOf(got); c != wire.NAKInvalidRequest {
				t.Errorf("answer NAK %d (%d packets), want invalid request (%d)", c, len(got), wire.NAKInvalidRequest)
			}
			for i, b := range h.region {
				if b != 0 {
					t.Fatalf("byte %d of the region written", i)
				}
			}
			if h.nic.Counters().RcvdLengthErr.Load() != 1 {
				t.Errorf("rcvd_length_err %d, want 1", h.nic.Counters().RcvdLengthErr.Load())
			}
			h.check(t)
		})
	}
}

func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i | 1)
	}
	return b
}

// TestZeroLengthNoKey: zero-length WRITE_WITH_IMM and READ requests with
// R_Key 0 and VA 0 succeed (IBTA C9-88: a zero-length request is not
// checked against any memory region), as rxe accepts them.
func TestZeroLengthNoKey(t *testing.T) {
	h := newHostile(t)
	got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnlyWithImmediate, PSN: hostilePSN, AckReq: true},
		RETH: wire.RETHFields{}, Imm: 0x5eed}, 1)
	if len(got) != 1 || !got[0].AETH().Syndrome().IsACK() {
		t.Fatalf("zero-length WRITE_WITH_IMM, R_Key 0: %d answers, want an ACK (NAK %d)", len(got), nakOf(got))
	}
	if wc := verbstest.WaitWC(t, h.b.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Imm != 0x5eed {
		t.Errorf("receive completion %+v", wc)
	}
	got, _ = h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PSN: hostilePSN + 1, AckReq: true},
		RETH: wire.RETHFields{}}, 1)
	if len(got) != 1 || got[0].BTH().Opcode() != wire.RCRDMAReadResponseOnly || got[0].PayloadLen != 0 {
		t.Fatalf("zero-length READ, R_Key 0: %d answers (NAK %d), want one empty READ_RESPONSE_ONLY", len(got), nakOf(got))
	}
	h.check(t)
}

// TestSendLongerThanReceive: a SEND longer than the receive buffer gets
// an invalid request NAK; the receive WQE completes with a local length
// error, nothing of the message is written, and the QP goes to the error
// state, flushing its other receives.
func TestSendLongerThanReceive(t *testing.T) {
	h := newHostile(t) // four receives of 960 bytes
	got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PSN: hostilePSN, AckReq: true}, Payload: filled(1000)}, 1)
	if c := nakOf(got); c != wire.NAKInvalidRequest {
		t.Errorf("answer NAK %d (%d packets), want invalid request", c, len(got))
	}
	wc := verbstest.WaitWC(t, h.b.CQ)
	if wc.WRID != 0 || wc.Status != verbs.WCLocLenErr || wc.Opcode != verbs.WCRecv {
		t.Errorf("first completion %+v, want receive 0 with a local length error", wc)
	}
	for i := 1; i < 4; i++ {
		if wc := verbstest.WaitWC(t, h.b.CQ); wc.WRID != uint64(i) || wc.Status != verbs.WCWRFlushErr {
			t.Errorf("completion %+v, want receive %d flushed", wc, i)
		}
	}
	for i, b := range h.region[:960] {
		if b != 0 {
			t.Fatalf("byte %d of the receive buffer written", i)
		}
	}
	if h.b.QP.State() != verbs.QPSErr {
		t.Errorf("QP state %v, want ERR", h.b.QP.State())
	}
	h.check(t)
}

// TestDuplicateRead: a duplicate READ request is answered again only if
// it asks again for a READ the responder executed (same R_Key, a PSN of
// that READ, a range inside it); any other is dropped without an answer,
// so a spoofed stale READ with a wrong key cannot make the responder NAK
// and fail a live connection.
func TestDuplicateRead(t *testing.T) {
	h := newHostile(t)
	copy(h.region, filled(3000))
	read := func(psn wire.PSN, va uint64, rkey, n uint32, want int) []wire.Packet {
		got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PSN: psn & wire.PSNMask, AckReq: true},
			RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: n}}, want)
		return got
	}
	p := wire.PSN(hostilePSN)
	if got := read(p, h.mr.Addr, h.mr.RKey, 2500, 3); len(got) != 3 {
		t.Fatalf("a 2500-byte READ: %d responses, want 3", len(got))
	}
	// the next request is at hostilePSN+3
	for _, tc := range []struct {
		name    string
		psn     wire.PSN
		va      uint64
		rkey    uint32
		n       uint32
		answers int
	}{
		{"the same READ again", p, h.mr.Addr, h.mr.RKey, 2500, 3},
		{"its rest from its second packet", p + 1, h.mr.Addr + 1024, h.mr.RKey, 2500 - 1024, 2},
		{"a wrong R_Key", p, h.mr.Addr, h.mr.RKey ^ 1, 2500, 0},
		{"5000 PSNs behind, wrong R_Key", p.Sub(5000), h.mr.Addr, 0xdead, 64, 0},
		{"5000 PSNs behind, right R_Key", p.Sub(5000), h.mr.Addr, h.mr.RKey, 64, 0},
		{"beyond the READ's range", p, h.mr.Addr, h.mr.RKey, 2600, 0},
	} {
		dropped := h.nic.Counters().DuplicateDropped.Load()
		got := read(tc.psn, tc.va, tc.rkey, tc.n, tc.answers)
		if tc.answers == 0 {
			waitCount(t, tc.name+": duplicate_dropped", &h.nic.Counters().DuplicateDropped, dropped+1)
			h.check(t)
			got = append(got, h.drain(t)...)
		}
		if len(got) != tc.answers {
			t.Errorf("%s: %d answers, want %d", tc.name, len(got), tc.answers)
		}
		for k, g := range got {
			if op := g.BTH().Opcode(); op < wire.RCRDMAReadResponseFirst || op > wire.RCRDMAReadResponseOnly ||
				g.Info.Has(wire.HdrAETH) && !g.AETH().Syndrome().IsACK() || g.BTH().PSN() != tc.psn.Add(uint32(k)) {
				t.Errorf("%s: answer %d is %v at PSN %d", tc.name, k, op, g.BTH().PSN())
			}
		}
	}
	// The connection goes on: the next READ is answered.
	if got := read(p+3, h.mr.Addr, h.mr.RKey, 10, 1); len(got) != 1 || got[0].BTH().Opcode() != wire.RCRDMAReadResponseOnly {
		t.Errorf("the next READ: %d answers", len(got))
	}
	h.check(t)
}

// TestRNRRepair: a go-back-N gap NAKed once is NAKed again while
// requests beyond it keep coming (a sequence NAK, SeqNAKRepeat on), and
// again when its sender goes quiet (GapQuiet on): with a peer that
// retries RNR NAKs without end (its CM was told 7) that NAK is an RNR
// NAK of the gap's PSN with the shortest timer, which rxe heeds during a
// retry where it ignores a NAK; with any other count (or none known) it
// stays a sequence NAK. The gap's packet then lands as usual.
func TestRNRRepair(t *testing.T) {
	for _, tc := range []struct {
		peer uint8
		rnr  bool
	}{{0, false}, {3, false}, {7, true}} {
		t.Run(fmt.Sprintf("peer_rnr_retry_%d", tc.peer), func(t *testing.T) {
			// A machine that stalls the test for GapQuiet between the
			// first NAK and the next packet sees a quiet NAK too early
			// for the steps below: that try starts again.
			for try := 1; ; try++ {
				if !rnrRepair(t, tc.peer, tc.rnr) {
					return
				}
				if try == 5 {
					t.Fatalf("%d tries: the test was stalled past reliability.GapQuiet each time", try)
				}
				t.Logf("try %d stalled past reliability.GapQuiet: again", try)
			}
		})
	}
}

// rnrRepair is one try of TestRNRRepair; it reports whether the gap
// was NAKed as quiet before the test's second packet past it went.
func rnrRepair(t *testing.T, peer uint8, rnr bool) (stalled bool) {
	h := newHostile(t)
	h.readyPeer(t, 8, peer)
	write := func(i int) *wire.FrameFields {
		return &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: wire.PSN(hostilePSN + i), AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr + uint64(i), RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{byte(i + 1)}}
	}
	// naks are the answers that are not ACKs, each of the gap's PSN.
	naks := func(name string, got []wire.Packet) (s []wire.Syndrome) {
		t.Helper()
		for _, p := range got {
			if !p.AETH().Syndrome().IsACK() {
				if p.BTH().PSN() != hostilePSN {
					t.Errorf("%s: a NAK of PSN %d, want the gap's %d", name, p.BTH().PSN(), hostilePSN)
				}
				s = append(s, p.AETH().Syndrome())
			}
		}
		return s
	}
	seqNAK := func(s wire.Syndrome) bool { return s.IsNAK() && s.Value() == wire.NAKPSNSequenceError }
	c := h.nic.Counters()
	// PSN hostilePSN is lost: the first packet beyond it draws a
	// sequence NAK of hostilePSN.
	got, _ := h.exchange(t, write(1), 1)
	if c.SeqNAKQuiet.Load() != 0 {
		return true
	}
	if s := naks("the first packet past the gap", got); len(s) != 1 || !seqNAK(s[0]) {
		t.Fatalf("the first packet past the gap drew NAKs %#x, want one sequence NAK", s)
	}
	// More beyond it, past the repeat's wait: a sequence NAK again,
	// whatever the peer (a NAK into the sender's stream).
	time.Sleep(reliability.SeqNAKRepeat + reliability.SeqNAKRepeat/2)
	last := time.Now() // before the last packet goes
	got, _ = h.exchange(t, write(2), 1)
	if c.SeqNAKQuiet.Load() != 0 {
		return true
	}
	if s := naks("a packet past the gap later", got); len(s) != 1 || !seqNAK(s[0]) {
		t.Errorf("a packet past the gap after %v drew NAKs %#x, want one sequence NAK", reliability.SeqNAKRepeat, s)
	}
	// The sender goes quiet: the gap is NAKed again, no sooner than
	// GapQuiet after the last packet (and again after twice that, if
	// the test is slow to read the answers).
	got, _ = h.exchange(t, nil, 1)
	if since := time.Since(last); since < reliability.GapQuiet {
		t.Errorf("the quiet gap was NAKed after %v, want %v at least", since, reliability.GapQuiet)
	}
	quiet := naks("the quiet gap", got)
	if len(quiet) == 0 {
		t.Fatal("the quiet gap drew no NAK")
	}
	for _, s := range quiet {
		switch {
		case rnr && (!s.IsRNRNAK() || s.Value() != 1):
			t.Errorf("the quiet gap drew %#x, want an RNR NAK with timer code 1", uint8(s))
		case !rnr && !seqNAK(s):
			t.Errorf("the quiet gap drew %#x, want a sequence NAK", uint8(s))
		}
	}
	// The sender goes back: the gap's packet lands and is ACKed;
	// the gap's timer stops.
	got, _ = h.exchange(t, write(0), 1)
	for deadline := time.Now().Add(5 * time.Second); len(got) == 0 || !got[len(got)-1].AETH().Syndrome().IsACK(); {
		// Quiet NAKs sent before the gap's packet came, then its ACK.
		if time.Now().After(deadline) {
			t.Fatalf("the gap's packet: %d answers, want an ACK last", len(got))
		}
		got = append(got, h.drain(t)...)
	}
	if h.region[0] != 1 {
		t.Error("the gap's WRITE did not land")
	}
	// The gap closed: the counters are still.
	n := c.SeqNAKQuiet.Load()
	if n < uint64(len(quiet)) {
		t.Errorf("seq_nak_quiet %d, want %d at least", n, len(quiet))
	}
	want := uint64(0) // an RNR NAK for each quiet one
	if rnr {
		want = n
	}
	if r := c.RNRRepairs.Load(); r != want {
		t.Errorf("rnr_nak_repairs %d, want %d", r, want)
	}
	// The QP has seen loss, so the sender going quiet after the gap's
	// ACK gets that ACK once more (its own may have been lost), and
	// nothing after.
	time.Sleep(2 * reliability.GapQuiet)
	tail := len(got) - 1 // the gap's ACK, and its repeat if the test was slow
	for tail > 0 && got[tail-1].AETH().Syndrome().IsACK() && got[tail-1].BTH().PSN() == hostilePSN {
		tail--
	}
	acks := 0
	for _, p := range append(got[tail:], h.drain(t)...) {
		if !p.AETH().Syndrome().IsACK() || p.BTH().PSN() != hostilePSN {
			t.Errorf("after the gap closed: %#x of PSN %d, want the gap's ACK", uint8(p.AETH().Syndrome()), p.BTH().PSN())
			continue
		}
		acks++
	}
	if acks != 2 || c.ACKsRepeated.Load() != 1 {
		t.Errorf("the gap's ACK sent %d times (acks_repeated %d), want twice (1)", acks, c.ACKsRepeated.Load())
	}
	h.check(t)
	return false
}

// TestQuietTail: a WRITE whose last packet is lost, with nothing after
// it (the sender's last message), leaves the responder mid-message and
// the sender waiting for an ACK: once the sender is quiet for IdleQuiet
// the responder ACKs what came and NAKs the last packet's PSN (an RNR NAK
// to a peer that retries them without end), so the sender sends it
// again at once instead of after its local ACK timeout; the WRITE then
// lands whole.
func TestQuietTail(t *testing.T) {
	for _, tc := range peerRNRCases {
		t.Run(fmt.Sprintf("peer_rnr_retry_%d", tc.peer), func(t *testing.T) {
			h := newHostile(t)
			h.readyPeer(t, 8, tc.peer)
			msg := filled(3 * 1024)
			pkt := func(i int, op wire.Opcode) *wire.FrameFields {
				f := &wire.FrameFields{BTH: wire.BTHFields{Opcode: op, PSN: hostilePSN + wire.PSN(i)}, Payload: msg[i*1024 : (i+1)*1024]}
				if i == 0 {
					f.RETH = wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: uint32(len(msg))}
				}
				f.BTH.AckReq = op == wire.RCRDMAWriteLast
				return f
			}
			start := time.Now()
			h.send(t, pkt(0, wire.RCRDMAWriteFirst), pkt(1, wire.RCRDMAWriteMiddle))
			// The last packet is lost: nothing answers before IdleQuiet.
			got, _ := h.exchange(t, nil, 2)
			if since := time.Since(start); since < reliability.IdleQuiet {
				t.Errorf("answers after %v, want %v at least", since, reliability.IdleQuiet)
			}
			if len(got) < 2 || !got[0].AETH().Syndrome().IsACK() || got[0].BTH().PSN() != hostilePSN+1 {
				t.Fatalf("%d answers, want an ACK of PSN %d first", len(got), hostilePSN+1)
			}
			for _, p := range got[1:] { // the NAK, and again, doubling, if the test was slow
				checkRepairNAK(t, &p, hostilePSN+2, tc.rnr)
			}
			c := h.nic.Counters()
			if n := c.SeqNAKTail.Load(); n < 1 || c.SeqNAKQuiet.Load() != 0 {
				t.Errorf("seq_nak_tail %d, seq_nak_quiet %d: want 1 or more, and 0", n, c.SeqNAKQuiet.Load())
			}
			// The sender sends the last packet again: the WRITE lands.
			got, _ = h.exchange(t, pkt(2, wire.RCRDMAWriteLast), 1)
			if len(got) == 0 || !got[len(got)-1].AETH().Syndrome().IsACK() || got[len(got)-1].BTH().PSN() != hostilePSN+2 {
				t.Fatalf("the last packet: %d answers, want its ACK last", len(got))
			}
			if !bytes.Equal(h.region[:len(msg)], msg) {
				t.Error("the WRITE did not land whole")
			}
			h.check(t)
		})
	}
}

// peerRNRCases are the peer RNR retry counts a repair's NAK depends on:
// unknown (0), and without end (7: its repairs are RNR NAKs).
var peerRNRCases = []struct {
	peer uint8
	rnr  bool
}{{0, false}, {7, true}}

// checkRepairNAK checks a repair's NAK: of psn, an RNR NAK with timer
// code 1 if rnr, else a PSN sequence NAK.
func checkRepairNAK(t *testing.T, p *wire.Packet, psn wire.PSN, rnr bool) {
	t.Helper()
	s := p.AETH().Syndrome()
	switch {
	case p.BTH().PSN() != psn:
		t.Errorf("a NAK of PSN %d, want %d", p.BTH().PSN(), psn)
	case rnr && (!s.IsRNRNAK() || s.Value() != 1):
		t.Errorf("%#x, want an RNR NAK with timer code 1", uint8(s))
	case !rnr && (!s.IsNAK() || s.Value() != wire.NAKPSNSequenceError):
		t.Errorf("%#x, want a sequence NAK", uint8(s))
	}
}

// TestIdleProbe: a QP with QPAttr.IdleProbe and receives posted, whose
// peer's first SEND was lost (nothing comes): the NIC NAKs the expected
// PSN (with an RNR NAK to a peer that retries without end), no sooner
// than IdleQuiet, the waits doubling, GapQuietNAKs times and no more;
// the SEND sent again lands and is acknowledged. A QP without the
// attribute never probes.
func TestIdleProbe(t *testing.T) {
	for _, tc := range peerRNRCases {
		t.Run(fmt.Sprintf("peer_rnr_retry_%d", tc.peer), func(t *testing.T) {
			h := newHostile(t)
			start := time.Now()
			h.readyOpts(t, 8, tc.peer, true)
			got, _ := h.exchange(t, nil, reliability.GapQuietNAKs)
			// The probes' waits: IdleQuiet, doubling up to GapQuietMax.
			least, wait := time.Duration(0), reliability.IdleQuiet
			for range reliability.GapQuietNAKs {
				least += wait
				wait = min(2*wait, reliability.GapQuietMax)
			}
			if since := time.Since(start); since < least {
				t.Errorf("%d probes within %v, want %v at least", len(got), since, least)
			}
			if len(got) != reliability.GapQuietNAKs {
				t.Fatalf("%d probes, want %d", len(got), reliability.GapQuietNAKs)
			}
			for _, p := range got {
				checkRepairNAK(t, &p, hostilePSN, tc.rnr)
			}
			time.Sleep(2 * reliability.GapQuietMax)
			if extra := h.drain(t); len(extra) != 0 {
				t.Errorf("%d probes beyond GapQuietNAKs", len(extra))
			}
			if n := h.nic.Counters().SeqNAKIdle.Load(); n != reliability.GapQuietNAKs {
				t.Errorf("seq_nak_idle %d, want %d", n, reliability.GapQuietNAKs)
			}
			// The peer sends the SEND again: it lands.
			got, _ = h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PSN: hostilePSN, AckReq: true}, Payload: []byte("hello")}, 1)
			if len(got) == 0 || !got[0].AETH().Syndrome().IsACK() || got[0].BTH().PSN() != hostilePSN {
				t.Fatalf("the SEND sent again: %d answers, want its ACK first", len(got))
			}
			if !bytes.Equal(h.region[:5], []byte("hello")) {
				t.Error("the SEND did not land")
			}
			h.check(t)
		})
	}
	t.Run("without", func(t *testing.T) {
		h := newHostile(t)
		time.Sleep(3 * reliability.IdleQuiet)
		if got := h.drain(t); len(got) != 0 || h.nic.Counters().SeqNAKIdle.Load() != 0 {
			t.Errorf("a QP without the idle probe sent %d packets unasked", len(got))
		}
	})
}

// slowMachine skips t when the machine held the test past a protocol
// timer it counts on (since the test's reference point): the NIC then did
// what it should when that timer fired (a NAK again, another probe), an
// answer the test's counts do not expect, and the timing the test checks
// does not hold. Called only when a count is off: on time, a wrong count
// still fails.
func slowMachine(t *testing.T, since time.Time, timer time.Duration, what string) {
	t.Helper()
	if d := time.Since(since); d >= timer {
		t.Skipf("the machine held the test %v, past %s (%v): the NIC's answer at that timer is right, and the timing this test checks does not hold", d.Round(time.Millisecond), what, timer)
	}
}

// TestIdleProbeWritePingPong: a QP with QPAttr.IdleProbe and no receive
// posted (its application polls memory for the peer's WRITEs, as
// perftest's write_lat does) probes once its peer has sent requests:
// after the peer's WRITEs nothing comes, and the NIC NAKs the expected
// PSN, no sooner than IdleQuiet after them (on a QP that has seen loss,
// its last ACK goes again first). A peer that has sent nothing is not
// probed.
func TestIdleProbeWritePingPong(t *testing.T) {
	write := func(h *hostile, i int) *wire.FrameFields {
		return &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: wire.PSN(hostilePSN + i), AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr + uint64(i), RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{byte(i + 1)}}
	}
	t.Run("no requests", func(t *testing.T) {
		h := newHostile(t)
		h.noRecvs = true
		h.readyOpts(t, 8, 0, true)
		time.Sleep(3 * reliability.IdleQuiet)
		if got := h.drain(t); len(got) != 0 || h.nic.Counters().SeqNAKIdle.Load() != 0 {
			t.Errorf("a QP whose peer sent nothing sent %d packets unasked", len(got))
		}
	})
	for _, lossy := range []bool{true, false} {
		t.Run(fmt.Sprintf("lossy_%v", lossy), func(t *testing.T) {
			h := newHostile(t)
			h.noRecvs = true
			h.readyOpts(t, 8, 0, true)
			gap := time.Now()
			if lossy { // the first WRITE was lost: the second shows the gap
				got, _ := h.exchange(t, write(h, 1), 1)
				if len(got) > 1 {
					slowMachine(t, gap, reliability.GapQuiet, "the gap's quiet wait")
				}
				if len(got) != 1 || !got[0].AETH().Syndrome().IsNAK() {
					t.Fatalf("the WRITE past the gap: %d answers, want its sequence NAK", len(got))
				}
			}
			start := time.Now() // the probe's wait counts from the last request, before its answer is read
			if !h.send(t, write(h, 0), write(h, 1)) {
				t.Fatal("the WRITEs make no frames")
			}
			if acks, _ := h.exchange(t, nil, 2); len(acks) != 2 {
				if lossy && len(acks) > 2 {
					slowMachine(t, gap, reliability.GapQuiet, "the gap's quiet wait")
				}
				t.Fatalf("%d answers to the two WRITEs, want their ACKs", len(acks))
			}
			if h.region[0] != 1 || h.region[1] != 2 {
				t.Fatalf("the WRITEs did not land: % x", h.region[:2])
			}
			// With loss seen, the ACK again; then the probe: the ACK once
			// more and the NAK (acks_before_nak: rxe, retrying, heeds a
			// NAK only after an ACK).
			want := 2
			if lossy {
				want = 3
			}
			got, _ := h.exchange(t, nil, want)
			if len(got) > want {
				slowMachine(t, start, 2*reliability.IdleQuiet, "a second idle probe's wait")
			}
			if len(got) != want {
				t.Fatalf("%d packets after the WRITEs, want %d", len(got), want)
			}
			for _, p := range got[:want-1] {
				if s := p.AETH().Syndrome(); !s.IsACK() || p.BTH().PSN() != hostilePSN+1 {
					t.Errorf("%#x of PSN %d, want the ACK of %d again", uint8(s), p.BTH().PSN(), hostilePSN+1)
				}
			}
			checkRepairNAK(t, &got[want-1], hostilePSN+2, false)
			if since := time.Since(start); since < reliability.IdleQuiet {
				t.Errorf("probed after %v, want IdleQuiet (%v) at least", since, reliability.IdleQuiet)
			}
			if n := h.nic.Counters().SeqNAKIdle.Load(); n != 1 {
				t.Errorf("seq_nak_idle %d, want 1", n)
			}
			h.check(t)
		})
	}
}

// TestIdleProbeAfterREADRepairs: on a lossy QP with the idle probe and a
// long local ACK timeout (rdma_cm's), a READ answered and then nothing
// (its response lost, or the next READ request): the READ's response
// goes again, unasked, reliability.ReadRepairs times, each with a NAK
// of the next PSN (a small READ: a requester whose next READ request
// was lost waits on that; rxe would wait 2.1 s), and then the idle probe
// NAKs the next PSN.
func TestIdleProbeAfterREADRepairs(t *testing.T) {
	h := newHostile(t)
	h.noRecvs = true
	h.readyOpts(t, 19, 0, true)
	write := func(i int) *wire.FrameFields {
		return &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: wire.PSN(hostilePSN + i), AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr + uint64(i), RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{byte(i + 1)}}
	}
	h.exchange(t, write(1), 1) // a gap: the QP has seen loss
	h.send(t, write(0), write(1))
	h.exchange(t, nil, 2)
	copy(h.region[8:], "read me")
	got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PSN: hostilePSN + 2, AckReq: true},
		RETH: wire.RETHFields{VA: h.mr.Addr + 8, RKey: h.mr.RKey, DMALen: 7}}, 1)
	if len(got) != 1 || got[0].BTH().Opcode() != wire.RCRDMAReadResponseOnly {
		t.Fatalf("the READ: %d answers, want its response", len(got))
	}
	want := 2*reliability.ReadRepairs + 1
	got, _ = h.exchange(t, nil, want)
	if len(got) != want {
		t.Fatalf("%d packets after the READ, want %d repairs with a NAK each and a probe", len(got), reliability.ReadRepairs)
	}
	for i := range reliability.ReadRepairs {
		if p := got[2*i]; p.BTH().Opcode() != wire.RCRDMAReadResponseOnly || p.BTH().PSN() != hostilePSN+2 || !bytes.Equal(p.Payload(), []byte("read me")) {
			t.Fatalf("repair %d: %v at PSN %d, want the READ's response again", i+1, p.BTH().Opcode(), p.BTH().PSN())
		}
		checkRepairNAK(t, &got[2*i+1], hostilePSN+3, false)
	}
	checkRepairNAK(t, &got[want-1], hostilePSN+3, false)
	if n := h.nic.Counters().SeqNAKIdle.Load(); n != reliability.ReadRepairs+1 {
		t.Errorf("seq_nak_idle %d, want %d", n, reliability.ReadRepairs+1)
	}
	h.check(t)
}

// TestIdleProbeAfterAtomic: on a lossy QP with the idle probe, an atomic
// executed and then nothing: the probe sends the atomic's response again
// (its original value), then NAKs the next PSN; a requester whose
// response was lost waits on the atomic's own PSN. A duplicate of the
// atomic after the probes ran out starts them again.
func TestIdleProbeAfterAtomic(t *testing.T) {
	h := newHostile(t)
	h.noRecvs = true
	h.readyOpts(t, 8, 0, true)
	h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: hostilePSN + 1, AckReq: true},
		RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{1}}, 1) // a gap: loss seen
	h.send(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: hostilePSN, AckReq: true},
		RETH: wire.RETHFields{VA: h.mr.Addr + 8, RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{1}},
		&wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: hostilePSN + 1, AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{1}})
	h.exchange(t, nil, 2) // their ACKs
	binary.LittleEndian.PutUint64(h.region[64:], 40)
	fadd := &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCFetchAdd, PSN: hostilePSN + 2, AckReq: true},
		AtomicETH: wire.AtomicETHFields{VA: h.mr.Addr + 64, RKey: h.mr.RKey, SwapAdd: 2}}
	got, _ := h.exchange(t, fadd, 1)
	if len(got) != 1 || got[0].BTH().Opcode() != wire.RCAtomicAcknowledge || got[0].AtomicAckETH().OrigData() != 40 {
		t.Fatalf("the atomic: %d answers, want its response with 40", len(got))
	}
	got, _ = h.exchange(t, nil, 2)
	if len(got) != 2 {
		t.Fatalf("%d packets after the atomic, want its response again and a probe", len(got))
	}
	if p := got[0]; p.BTH().Opcode() != wire.RCAtomicAcknowledge || p.BTH().PSN() != hostilePSN+2 || p.AtomicAckETH().OrigData() != 40 {
		t.Fatalf("first %v at PSN %d, want the atomic's response (40) again", p.BTH().Opcode(), p.BTH().PSN())
	}
	checkRepairNAK(t, &got[1], hostilePSN+3, false)
	// The probes run out (GapQuietNAKs); the atomic comes again (its
	// answer was lost): it is answered from the record, and the probes
	// start again, since that answer, or the next request, may be lost.
	rest := 2 * (reliability.GapQuietNAKs - 1)
	if got, _ = h.exchange(t, nil, rest); len(got) != rest {
		t.Fatalf("%d packets from the rest of the probes, want %d", len(got), rest)
	}
	time.Sleep(reliability.GapQuietMax + reliability.IdleQuiet)
	if extra := h.drain(t); len(extra) != 0 {
		t.Fatalf("%d packets after the probes ran out", len(extra))
	}
	if got, _ = h.exchange(t, fadd, 3); len(got) != 3 || got[0].BTH().Opcode() != wire.RCAtomicAcknowledge || got[0].AtomicAckETH().OrigData() != 40 {
		t.Fatalf("the atomic again: %d answers, want its response with 40 first, then a probe", len(got))
	}
	checkRepairNAK(t, &got[2], hostilePSN+3, false)
	if v := binary.LittleEndian.Uint64(h.region[64:]); v != 42 {
		t.Errorf("the word is %d, want 42 (the atomic once)", v)
	}
	if n := h.nic.Counters().AtomicRepairs.Load(); n != reliability.GapQuietNAKs+1 {
		t.Errorf("atomic_repairs %d, want %d", n, reliability.GapQuietNAKs+1)
	}
	h.check(t)
}

// TestIdleProbeAfterREAD: the idle probe after a READ (its response lost
// on the way, say) is the NAK alone, never a plain ACK of the READ's PSN
// first: rxe completes a pending READ on such an ACK without its data (an
// rping server then wrote back the previous ping: make interop-loss).
func TestIdleProbeAfterREAD(t *testing.T) {
	h := newHostile(t)
	h.readyOpts(t, 8, 7, true)
	copy(h.region, "read me")
	got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PSN: hostilePSN, AckReq: true},
		RETH: wire.RETHFields{VA: h.mr.Addr, RKey: h.mr.RKey, DMALen: 7}}, 1)
	if len(got) == 0 || got[0].BTH().Opcode() != wire.RCRDMAReadResponseOnly {
		t.Fatalf("the READ: %d answers, want its response", len(got))
	}
	got, _ = h.exchange(t, nil, 2) // the first two probes
	if len(got) == 0 {
		t.Fatal("no probe after the READ")
	}
	for _, p := range got {
		if s := p.AETH().Syndrome(); s.IsACK() {
			t.Fatalf("a plain ACK of PSN %d after the READ", p.BTH().PSN())
		}
		checkRepairNAK(t, &p, hostilePSN+1, true)
	}
	if n := h.nic.Counters().ACKsBeforeNAK.Load(); n != 0 {
		t.Errorf("acks_before_nak %d after a READ, want 0", n)
	}
}

// TestSeqNAKRateLimit: forged requests ahead of the expected PSN, each
// slipped in after a good one, draw at most one PSN sequence NAK per
// gap and per interval, not one each; every good request is still
// executed and acknowledged.
func TestSeqNAKRateLimit(t *testing.T) {
	h := newHostile(t)
	const n = 64
	good := func(i int) *wire.FrameFields {
		return &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: wire.PSN(hostilePSN + i), AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr + uint64(i), RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{byte(i + 1)}}
	}
	var frs []*wire.FrameFields
	for i := range n {
		frs = append(frs, good(i),
			&wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: wire.PSN(hostilePSN + 5000 + i), AckReq: true},
				RETH: wire.RETHFields{VA: h.mr.Addr + 2048, RKey: h.mr.RKey, DMALen: 1}, Payload: []byte{0xff}})
	}
	// A last good request closes the last forged gap, so that no quiet
	// gap is NAKed again after the burst.
	frs = append(frs, good(n))
	start := time.Now()
	h.send(t, frs...)
	// Every forged request taken in, then every answer read.
	waitCount(t, "out_of_seq_request", &h.nic.Counters().OutOfSeqRequest, n)
	// The NIC took the burst in at most this long: no more NAKs than one
	// plus one per interval in it, however slow the machine.
	took := time.Since(start)
	acks, naks := 0, 0
	for deadline := time.Now().Add(5 * time.Second); acks < n+1+int(h.nic.Counters().ACKsBeforeNAK.Load()) && time.Now().Before(deadline); {
		for _, p := range h.drain(t) {
			switch s := p.AETH().Syndrome(); {
			case s.IsACK():
				acks++
			case s.IsNAK() && s.Value() == wire.NAKPSNSequenceError:
				naks++
			}
		}
	}
	c := h.nic.Counters()
	// A machine that stalled the NIC for reliability.GapQuiet between a
	// forged request and the good one after it saw that gap NAKed again
	// as a quiet one: those are not the forged requests' NAKs.
	quiet := int(c.SeqNAKQuiet.Load())
	forged := naks - quiet
	// Each NAK of a forged request goes behind an ACK of what came in
	// order (rxe heeds a NAK during a retry only after one); every good
	// request is acknowledged.
	if b := int(c.ACKsBeforeNAK.Load()); b < forged || b > naks {
		t.Errorf("acks_before_nak %d, want one per NAK (%d, %d of them quiet)", b, naks, quiet)
	}
	if b := int(c.ACKsBeforeNAK.Load()); acks != n+1+b {
		t.Errorf("%d ACKs, want %d and one before each of the %d NAKs", acks, n+1, b)
	}
	if most := 1 + int(took/reliability.SeqNAKInterval); forged < 1 || forged > most {
		t.Errorf("%d sequence NAKs for %d forged requests in %v, want 1 to %d", forged, n, took, most)
	}
	for i := range n + 1 {
		if h.region[i] != byte(i+1) {
			t.Fatalf("good WRITE %d did not land", i)
		}
	}
	if h.region[2048] != 0 {
		t.Error("a forged out-of-sequence WRITE landed")
	}
	if s := c.SeqNAKSuppressed.Load(); s+uint64(forged) != n {
		t.Errorf("seq_nak_suppressed %d + %d NAKs, want %d", s, forged, n)
	}
	h.check(t)
}

// TestStaleNAK: NAKs and responses for PSNs outside the requester's
// window (older than the oldest unacknowledged, or never sent) are
// ignored and counted; the work request completes when the right ACK
// comes.
func TestStaleNAK(t *testing.T) {
	h := newHostile(t)
	// A local ACK timeout of about 270 ms: on a loaded machine the six
	// answers below take longer than the hostile QPs' usual 10 ms, and
	// the WRITE must wait for the right ACK, not time out.
	h.readyWith(t, 16)
	psn := h.post(t, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: h.mr.Addr, Length: 100, LKey: h.mr.LKey}}, RemoteAddr: 0x1000, RKey: 0x1234}, wire.RCRDMAWriteOnly)
	for _, fr := range []wire.FrameFields{
		{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: psn.Sub(5000)}, AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccessError)}},
		{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: psn.Sub(1)}, AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKInvalidRequest)}},
		{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: psn.Add(5000)}, AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteOperationalErr)}},
		{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: psn.Sub(3)}, AETH: wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(31)}},
		{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PSN: psn.Sub(2)}, Payload: filled(100)},
		{BTH: wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PSN: psn.Add(1)}, AtomicOrigData: 9},
	} {
		fr.BTH.PSN &= wire.PSNMask
		h.exchange(t, &fr, 0)
	}
	waitCount(t, "rcvd_stale_response", &h.nic.Counters().RcvdStaleResponse, 6)
	h.check(t)
	var wc [1]verbs.WC
	if h.b.CQ.Poll(wc[:]) != 0 {
		t.Fatalf("a stale or future answer completed the WRITE: %+v", wc[0])
	}
	h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: psn}, AETH: wire.AETHFields{MSN: 1}}, 0)
	if c := verbstest.WaitWC(t, h.b.CQ); c.WRID != 7 || c.Status != verbs.WCSuccess {
		t.Errorf("after the right ACK: %+v", c)
	}
	h.check(t)
}

// TestCreditsSpareRetransmissions: the responder's ACKs carry its free
// receive WQEs, and the requester holds SENDs the responder has no
// receive for. Sixteen SENDs meet two receives; the rest are posted
// later. Without credits every RNR retry would resend every SEND after
// the refused one; with them only one probe is out at a time, so each
// RNR NAK costs one packet again, and everything completes.
func TestCreditsSpareRetransmissions(t *testing.T) {
	a, b := pair(t)
	post := func(n, from int) {
		for i := range n {
			if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(from + i), SGL: sgl(b, 0, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(wrid uint64) {
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	post(3, 0)
	send(0) // its ACK tells the requester: two receives left
	if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("first SEND: %+v", wc)
	}
	waitWC(t, b.CQ)
	for i := range 16 {
		send(uint64(1 + i))
	}
	time.Sleep(20 * time.Millisecond) // RNR retries of the probe meanwhile
	post(14, 3)
	got := 0
	for got < 16 {
		wc := waitWC(t, a.CQ)
		if wc.Opcode != verbs.WCSend {
			continue
		}
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND %d: %v", wc.WRID, wc.Status)
		}
		got++
	}
	c := a.Counts
	rnr, re, waits := c.RcvdRNRErr.Load(), c.RetransmittedPkts.Load(), c.CreditWaits.Load()
	t.Logf("RNR NAKs %d, packets sent again %d, credit waits %d", rnr, re, waits)
	if waits == 0 {
		t.Error("no SEND waited for credits")
	}
	if re > rnr {
		t.Errorf("%d packets sent again for %d RNR NAKs: more than the probe", re, rnr)
	}
}

// TestWriteImmRNR: a two-packet WRITE_WITH_IMM whose last packet finds no
// receive WQE is RNR NAKed at that packet; the requester's retry of the
// last packet alone, once a receive is posted, completes it: byte_len is
// the WRITE's length (as rxe reports it) and the memory holds the whole
// message.
func TestWriteImmRNR(t *testing.T) {
	h := newHostile(t)
	// Use up the four receives ready() posted.
	for i := range 4 {
		got, _ := h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PSN: hostilePSN + wire.PSN(i), AckReq: true}, Payload: []byte("x")}, 1)
		if len(got) != 1 || !got[0].AETH().Syndrome().IsACK() {
			t.Fatalf("SEND %d: %d answers", i, len(got))
		}
		verbstest.WaitWC(t, h.b.CQ)
	}
	msg := filled(1024 + 100)
	first := &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteFirst, PSN: hostilePSN + 4},
		RETH: wire.RETHFields{VA: h.mr.Addr + 64, RKey: h.mr.RKey, DMALen: uint32(len(msg))}, Payload: msg[:1024]}
	last := &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteLastWithImmediate, PSN: hostilePSN + 5, AckReq: true},
		Imm: 0xfeed, Payload: msg[1024:]}
	h.send(t, first)
	got, _ := h.exchange(t, last, 1)
	if len(got) != 1 || !got[0].AETH().Syndrome().IsRNRNAK() || got[0].BTH().PSN() != hostilePSN+5 {
		t.Fatalf("last packet without a receive: %d answers (NAK %d), want an RNR NAK of PSN %d", len(got), nakOf(got), hostilePSN+5)
	}
	if _, err := h.b.QP.PostRecv([]verbs.RecvWR{{WRID: 9}}); err != nil {
		t.Fatal(err)
	}
	got, _ = h.exchange(t, last, 1)
	if len(got) != 1 || !got[0].AETH().Syndrome().IsACK() {
		t.Fatalf("the last packet again: %d answers (NAK %d), want an ACK", len(got), nakOf(got))
	}
	wc := verbstest.WaitWC(t, h.b.CQ)
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || wc.WRID != 9 || wc.Imm != 0xfeed || wc.ByteLen != uint32(len(msg)) {
		t.Errorf("completion %+v, want WRID 9, imm 0xfeed, byte_len %d", wc, len(msg))
	}
	h.b.Dev.Fence()
	if !bytes.Equal(h.region[64:64+len(msg)], msg) {
		t.Error("the region does not hold the message")
	}
	h.check(t)
}

// TestKeysAndAddressesDiffer: two devices (two runs) registering the same
// regions in the same order give them other R_Keys and other addresses,
// and an index used again gets another key: only a peer told the key and
// the address can reach a region.
func TestKeysAndAddressesDiffer(t *testing.T) {
	keys := func() (keys []uint32, addrs []uint64) {
		pa, _ := porttest.NewPair(porttest.Config{})
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macA, IP: ipA}, Port: pa})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		pd, _ := d.AllocPD()
		for range 4 {
			mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessRemoteWrite|verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			keys, addrs = append(keys, mr.RKey), append(addrs, mr.Addr)
			last := mr.RKey
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			mr, err = pd.RegMR(make([]byte, 4096), verbs.AccessRemoteWrite|verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			if mr.RKey>>8 == last>>8 && mr.RKey == last {
				t.Errorf("MPT index %d used again with the same key %#x", last>>8, last)
			}
		}
		return keys, addrs
	}
	k1, a1 := keys()
	k2, a2 := keys()
	if slices.Equal(k1, k2) {
		t.Errorf("two runs gave the same R_Keys %#x", k1)
	}
	if slices.Equal(a1, a2) {
		t.Errorf("two runs gave the same addresses %#x", a1)
	}
}
