package verbstest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softrnic/softrnic/host/verbs"
)

// The scenarios below run on any pair of ends (an in-memory port pair, or
// two NICs across a veth pair with either port): a and b each have a
// device, a PD, a CQ, an RC QP not yet connected, and a registered buffer
// of at least 1 MiB.

// Atomics: 8 QPs hammer one counter with FETCH_ADD; every original
// value is seen exactly once and the counter ends at the total. Then
// COMPARE_SWAP succeeds once and fails once.
func Atomics(t *testing.T, a, b *End) {
	Connect(t, a, b, 3, 12)
	qps := []*verbs.QP{a.QP}
	peers := []*verbs.QP{b.QP}
	for range 7 {
		qa, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		ea, eb := *a, *b
		ea.QP, eb.QP = qa, qb
		Connect(t, &ea, &eb, 3, 12)
		qps, peers = append(qps, qa), append(peers, qb)
	}
	const per = 50
	counter := b.MR.Addr + 64
	for round := range per {
		for i, qp := range qps {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, CompareAdd: 1,
				SGL: SGL(a, 8*(i*per+round), 8), RemoteAddr: counter, RKey: b.MR.RKey}
			if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range len(qps) * per {
		if wc := WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCFetchAdd {
			t.Fatalf("completion %+v", wc)
		}
	}
	seen := make([]bool, len(qps)*per)
	for i := range len(qps) * per {
		v := le64(a.Buf[8*i:])
		if v >= uint64(len(seen)) || seen[v] {
			t.Fatalf("fetch-and-add returned %d twice or out of range", v)
		}
		seen[v] = true
	}
	b.Dev.Fence()
	if got := le64(b.Buf[64:]); got != uint64(len(qps)*per) {
		t.Fatalf("counter %d, want %d", got, len(qps)*per)
	}
	b.Dev.Fence() // hand the counter back to b's NIC
	// COMPARE_SWAP: 400 -> 7 succeeds, then 400 -> 9 fails (the word is 7).
	for i, cmp := range []uint64{400, 400} {
		wr := verbs.SendWR{WRID: 90, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, CompareAdd: cmp, Swap: 7 + 2*uint64(i),
			SGL: SGL(a, 8000, 8), RemoteAddr: counter, RKey: b.MR.RKey}
		a.QP.PostSend([]verbs.SendWR{wr})
		if wc := WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCCompSwap {
			t.Fatalf("CAS completion %+v", wc)
		}
		want := []uint64{400, 7}[i]
		if got := le64(a.Buf[8000:]); got != want {
			t.Errorf("CAS %d returned %d, want %d", i, got, want)
		}
	}
	b.Dev.Fence()
	if got := le64(b.Buf[64:]); got != 7 {
		t.Errorf("after CAS the word is %d, want 7", got)
	}
}

// SRQ: three QPs share one SRQ; every message lands in a buffer the
// SRQ handed out, and each completion names the QP it came through.
func SRQ(t *testing.T, a, b *End) {
	srq, err := b.PD.CreateSRQ(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	const qps, per, size = 3, 10, 64
	var senders []*verbs.QP
	receivers := map[uint32]int{}
	for i := range qps {
		qa, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := verbs.ConnectRC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, 3, 12); err != nil {
			t.Fatal(err)
		}
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 1}}); err == nil {
			t.Error("posting to the receive queue of an SRQ QP succeeded")
		}
		senders = append(senders, qa)
		receivers[qb.Num] = i
	}
	for slot := range qps * per {
		if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(slot), SGL: SGL(b, slot*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for m := range per {
		for i, qp := range senders {
			off := (i*per + m) * size
			for k := range size {
				a.Buf[off+k] = byte(i*16 + m)
			}
			if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(off), Opcode: verbs.WRSend, SGL: SGL(a, off, size)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[int]int{}
	for range qps * per {
		wc := WaitWC(t, b.CQ)
		i, ok := receivers[wc.QPNum]
		if wc.Status != verbs.WCSuccess || !ok || wc.ByteLen != size {
			t.Fatalf("completion %+v", wc)
		}
		slot := b.Buf[int(wc.WRID)*size : int(wc.WRID+1)*size]
		if int(slot[0])/16 != i || !bytes.Equal(slot, bytes.Repeat(slot[:1], size)) {
			t.Fatalf("slot %d holds %x, not a message of QP %d", wc.WRID, slot[:4], wc.QPNum)
		}
		got[i]++
	}
	for i := range qps {
		if got[i] != per {
			t.Errorf("QP %d delivered %d messages, want %d", i, got[i], per)
		}
	}
}

// ConnectedUC makes a UC QP on each end, on its CQ, with 64 send and
// receive WQEs of one SGE, and connects them at path MTU 1024.
func ConnectedUC(t testing.TB, a, b *End) (qa, qb *verbs.QP) {
	t.Helper()
	mk := func(e *End) *verbs.QP {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb = mk(a), mk(b)
	if err := verbs.ConnectUC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, 3); err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

// UC: UC SEND (with immediate) and RDMA WRITE deliver their data with
// no ACKs; READ is refused at post time.
func UC(t *testing.T, a, b *End) {
	qa, qb := ConnectedUC(t, a, b)
	for i, size := range []int{0, 1, 1024, 1025, 64 << 10} {
		b.Dev.Fence() // hand b's memory over to b's NIC
		src := a.Buf[:size]
		Fill(src, uint64(i)+7)
		qb.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: SGL(b, 0, size)}})
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 42, SGL: SGL(a, 0, size)}}); err != nil {
			t.Fatal(err)
		}
		if wc := WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.QPNum != qa.Num {
			t.Fatalf("UC send completion %+v", wc)
		}
		if wc := WaitWC(t, b.CQ); wc.Status != verbs.WCSuccess || int(wc.ByteLen) != size || wc.Imm != 42 || wc.QPNum != qb.Num {
			t.Fatalf("UC receive completion %+v", wc)
		}
		if !bytes.Equal(b.Buf[:size], src) {
			t.Fatalf("UC SEND %d: data differs", size)
		}
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: SGL(a, 0, size), RemoteAddr: b.MR.Addr + 1<<19, RKey: b.MR.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("UC write completion %+v", wc)
		}
		// No completion on b for a WRITE: a SEND after it, on the same QP, orders it.
		qb.PostRecv([]verbs.RecvWR{{WRID: 6}})
		qa.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend}})
		WaitWC(t, b.CQ)
		if !bytes.Equal(b.Buf[1<<19:1<<19+size], src) {
			t.Fatalf("UC WRITE %d: data differs", size)
		}
	}
	if _, err := qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, SGL: SGL(a, 0, 8), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("UC READ: %v", err)
	}
}

// UD: datagrams carry the sender's QP number and a GRH with the IP
// header into the completion and buffer; a wrong Q_Key is dropped.
func UD(t *testing.T, a, b *End) {
	mk := func(e *End) *verbs.QP {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := verbs.ReadyUD(qp, 0x11111111); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := mk(a), mk(b)
	ah := &verbs.AH{DestMAC: b.MAC, DestGID: b.IP}
	const size = 700
	Fill(a.Buf[:size], 3)
	qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: SGL(b, 0, 40+size)}})
	// Wrong Q_Key first: dropped. Then the right one.
	for i, qkey := range []uint32{0x22222222, 0x11111111} {
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 99,
			SGL: SGL(a, 0, size), AH: ah, RemoteQPN: qb.Num, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("UD send completion %+v", wc)
		}
	}
	wc := WaitWC(t, b.CQ)
	if wc.Status != verbs.WCSuccess || wc.WRID != 1 || wc.ByteLen != 40+size || wc.SrcQP != qa.Num || wc.QPNum != qb.Num ||
		wc.Flags&verbs.WCWithGRH == 0 || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 99 {
		t.Fatalf("UD receive completion %+v", wc)
	}
	if !bytes.Equal(b.Buf[40:40+size], a.Buf[:size]) {
		t.Error("UD payload differs")
	}
	grhIP := b.Buf[20:40]
	if grhIP[0] != 0x45 || !bytes.Equal(grhIP[12:16], []byte{10, 47, 0, 1}) {
		t.Errorf("GRH holds %x, want the IPv4 header from 10.47.0.1", grhIP)
	}
	if b.Counts.RcvdMalformed.Load() != 1 {
		t.Errorf("Q_Key violations counted: %d", b.Counts.RcvdMalformed.Load())
	}
	if _, err := qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, AH: ah}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("UD WRITE: %v", err)
	}
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
