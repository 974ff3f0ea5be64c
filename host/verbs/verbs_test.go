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

type end = verbstest.End

const bufSize = 4 << 20

func pair(t *testing.T) (*end, *end) { return lossyPair(t, porttest.Config{}) }

func lossyPair(t *testing.T, link porttest.Config) (*end, *end) {
	link.Buffers = 8192
	pa, pb := porttest.NewPair(link)
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), bufSize)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), bufSize)
	verbstest.Connect(t, a, b, 3, 14) // 67 ms, perftest's: the race detector slows the engines tenfold
	return a, b
}

var (
	waitWC = verbstest.WaitWC
	fill   = verbstest.Fill
	sgl    = verbstest.SGL
)

var sizes = []int{0, 1, 1023, 1024, 1025, 64 << 10, 1 << 20}

func TestRCSendRecv(t *testing.T) {
	a, b := pair(t)
	for i, size := range sizes {
		src := a.Buf[:size]
		fill(src, uint64(i))
		dst := b.Buf[bufSize/2 : bufSize/2+size+16]
		clear(dst)
		if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 100 + uint64(i), SGL: []verbs.SGE{{Addr: b.MR.Addr + bufSize/2, Length: uint32(size + 16), LKey: b.MR.LKey}}}}); err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 0xabc0 + uint32(i)}
		if size > 0 {
			wr.SGL = []verbs.SGE{{Addr: a.MR.Addr, Length: uint32(size), LKey: a.MR.LKey}}
		}
		if _, err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		sw := waitWC(t, a.CQ)
		rw := waitWC(t, b.CQ)
		if sw.Status != verbs.WCSuccess || sw.WRID != uint64(i) || sw.Opcode != verbs.WCSend {
			t.Fatalf("size %d: send completion %+v", size, sw)
		}
		if rw.Status != verbs.WCSuccess || rw.WRID != 100+uint64(i) || rw.Opcode != verbs.WCRecv || int(rw.ByteLen) != size ||
			rw.Flags&verbs.WCWithImm == 0 || rw.Imm != 0xabc0+uint32(i) {
			t.Fatalf("size %d: receive completion %+v", size, rw)
		}
		if !bytes.Equal(dst[:size], src) || !bytes.Equal(dst[size:], make([]byte, 16)) {
			t.Fatalf("size %d: data differs", size)
		}
	}
}

func TestRCWriteAndRead(t *testing.T) {
	a, b := pair(t)
	for i, size := range sizes {
		src := a.Buf[:size]
		fill(src, uint64(i)+50)
		remote := b.MR.Addr + 4096
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: sgl(a, 0, size), RemoteAddr: remote, RKey: b.MR.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
			t.Fatalf("size %d: write completion %+v", size, wc)
		}
		b.Dev.Fence()
		if !bytes.Equal(b.Buf[4096:4096+size], src) {
			t.Fatalf("size %d: written data differs", size)
		}
		// Read it back into another part of a's buffer.
		back := a.Buf[bufSize/2 : bufSize/2+size]
		clear(back)
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: sgl(a, bufSize/2, size), RemoteAddr: remote, RKey: b.MR.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead || int(wc.ByteLen) != size {
			t.Fatalf("size %d: read completion %+v", size, wc)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("size %d: read data differs", size)
		}
	}
}

// TestRemoteAccessError: a write with a bad rkey completes with
// REM_ACCESS_ERR, later requests are flushed, and nothing is written.
func TestRemoteAccessError(t *testing.T) {
	a, b := pair(t)
	fill(a.Buf[:100], 1)
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 100), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey ^ 0xff},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 100), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey},
	}
	if _, err := a.QP.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	first, second := waitWC(t, a.CQ), waitWC(t, a.CQ)
	if first.WRID != 1 || first.Status != verbs.WCRemAccessErr {
		t.Errorf("first completion %+v, want REM_ACCESS_ERR", first)
	}
	if second.WRID != 2 || second.Status != verbs.WCWRFlushErr {
		t.Errorf("second completion %+v, want WR_FLUSH_ERR", second)
	}
	b.Dev.Fence()
	if !bytes.Equal(b.Buf[:100], make([]byte, 100)) {
		t.Error("a write with a bad rkey changed memory")
	}
}

// TestLossyLink runs SEND, WRITE and READ of up to 1 MiB over a link that
// loses, duplicates, reorders and corrupts frames: every byte must arrive,
// every work request complete successfully, and the retransmissions show.
func TestLossyLink(t *testing.T) {
	a, b := lossyPair(t, porttest.Config{Loss: 0.02, Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.01, Seed: 7})
	for i, size := range []int{1, 1025, 64 << 10, 1 << 20} {
		src := a.Buf[:size]
		fill(src, uint64(i)+99)
		// SEND
		clear(b.Buf[:size])
		b.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: sgl(b, 0, size)}})
		a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, size)}})
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			ca, cb := a.Counts, b.Counts
			t.Fatalf("size %d: send %+v; a: sent %d rcvd %d retrans %d seqNAK %d badICRC %d; b: sent %d rcvd %d dup %d oos %d badICRC %d",
				size, wc, ca.SentPkts.Load(), ca.RcvdPkts.Load(), ca.Retransmits.Load(), ca.RcvdSeqErr.Load(), ca.RcvdBadICRC.Load(),
				cb.SentPkts.Load(), cb.RcvdPkts.Load(), cb.DuplicateRequest.Load(), cb.OutOfSeqRequest.Load(), cb.RcvdBadICRC.Load())
		}
		if wc := waitWC(t, b.CQ); wc.Status != verbs.WCSuccess || int(wc.ByteLen) != size {
			t.Fatalf("size %d: recv %+v", size, wc)
		}
		if !bytes.Equal(b.Buf[:size], src) {
			t.Fatalf("size %d: SEND data differs", size)
		}
		// WRITE then READ back
		a.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, size), RemoteAddr: b.MR.Addr + bufSize/2, RKey: b.MR.RKey}})
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("size %d: write %+v", size, wc)
		}
		b.Dev.Fence()
		if !bytes.Equal(b.Buf[bufSize/2:bufSize/2+size], src) {
			t.Fatalf("size %d: WRITE data differs", size)
		}
		clear(a.Buf[bufSize/2 : bufSize/2+size])
		a.QP.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: sgl(a, bufSize/2, size), RemoteAddr: b.MR.Addr + bufSize/2, RKey: b.MR.RKey}})
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("size %d: read %+v", size, wc)
		}
		if !bytes.Equal(a.Buf[bufSize/2:bufSize/2+size], src) {
			t.Fatalf("size %d: READ data differs", size)
		}
	}
	ca, cb := a.Counts, b.Counts
	t.Logf("a: retransmits %d, seq NAKs received %d, bad ICRC %d; b: duplicates %d, out of sequence %d, bad ICRC %d",
		ca.Retransmits.Load(), ca.RcvdSeqErr.Load(), ca.RcvdBadICRC.Load(), cb.DuplicateRequest.Load(), cb.OutOfSeqRequest.Load(), cb.RcvdBadICRC.Load())
	if ca.Retransmits.Load() == 0 || cb.DuplicateRequest.Load()+cb.OutOfSeqRequest.Load() == 0 {
		t.Error("a lossy link caused no recovery")
	}
}

// TestAtomics: 8 QPs hammer one counter with FETCH_ADD; every original
// value is seen exactly once and the counter ends at the total. Then
// COMPARE_SWAP succeeds once and fails once.
func TestAtomics(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	verbstest.Connect(t, a, b, 3, 12)
	qps := []*verbs.QP{a.QP}
	peers := []*verbs.QP{b.QP}
	for range 7 {
		qa, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		ea, eb := *a, *b
		ea.QP, eb.QP = qa, qb
		verbstest.Connect(t, &ea, &eb, 3, 12)
		qps, peers = append(qps, qa), append(peers, qb)
	}
	const per = 50
	counter := b.MR.Addr + 64
	for round := range per {
		for i, qp := range qps {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, CompareAdd: 1,
				SGL: verbstest.SGL(a, 8*(i*per+round), 8), RemoteAddr: counter, RKey: b.MR.RKey}
			if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range len(qps) * per {
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCFetchAdd {
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
	// COMPARE_SWAP: 400 -> 7 succeeds, then 400 -> 9 fails (the word is 7).
	for i, cmp := range []uint64{400, 400} {
		wr := verbs.SendWR{WRID: 90, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, CompareAdd: cmp, Swap: 7 + 2*uint64(i),
			SGL: verbstest.SGL(a, 8000, 8), RemoteAddr: counter, RKey: b.MR.RKey}
		a.QP.PostSend([]verbs.SendWR{wr})
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCCompSwap {
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

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// TestSRQ: three QPs share one SRQ; every message lands in a buffer the
// SRQ handed out, and each completion names the QP it came through.
func TestSRQ(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
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
		if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(slot), SGL: verbstest.SGL(b, slot*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for m := range per {
		for i, qp := range senders {
			off := (i*per + m) * size
			for k := range size {
				a.Buf[off+k] = byte(i*16 + m)
			}
			if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(off), Opcode: verbs.WRSend, SGL: verbstest.SGL(a, off, size)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[int]int{}
	for range qps * per {
		wc := waitWC(t, b.CQ)
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

// TestUC: UC SEND (with immediate) and RDMA WRITE deliver their data with
// no ACKs; READ is refused at post time.
func TestUC(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<20)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<20)
	mk := func(e *verbstest.End) *verbs.QP {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := mk(a), mk(b)
	if err := verbs.ConnectUC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, 3); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{0, 1, 1024, 1025, 64 << 10} {
		src := a.Buf[:size]
		fill(src, uint64(i)+7)
		qb.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: verbstest.SGL(b, 0, size)}})
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 42, SGL: verbstest.SGL(a, 0, size)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.QPNum != qa.Num {
			t.Fatalf("UC send completion %+v", wc)
		}
		if wc := waitWC(t, b.CQ); wc.Status != verbs.WCSuccess || int(wc.ByteLen) != size || wc.Imm != 42 || wc.QPNum != qb.Num {
			t.Fatalf("UC receive completion %+v", wc)
		}
		if !bytes.Equal(b.Buf[:size], src) {
			t.Fatalf("UC SEND %d: data differs", size)
		}
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, size), RemoteAddr: b.MR.Addr + 1<<19, RKey: b.MR.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("UC write completion %+v", wc)
		}
		// No completion on b for a WRITE: a SEND after it, on the same QP, orders it.
		qb.PostRecv([]verbs.RecvWR{{WRID: 6}})
		qa.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend}})
		waitWC(t, b.CQ)
		if !bytes.Equal(b.Buf[1<<19:1<<19+size], src) {
			t.Fatalf("UC WRITE %d: data differs", size)
		}
	}
	if _, err := qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, SGL: verbstest.SGL(a, 0, 8), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); !errorsIs(err, verbs.ErrInvalid) {
		t.Errorf("UC READ: %v", err)
	}
}

// TestUD: datagrams carry the sender's QP number and a GRH with the IP
// header into the completion and buffer; a wrong Q_Key is dropped.
func TestUD(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	mk := func(e *verbstest.End) *verbs.QP {
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
	fill(a.Buf[:size], 3)
	qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: verbstest.SGL(b, 0, 40+size)}})
	// Wrong Q_Key first: dropped. Then the right one.
	for i, qkey := range []uint32{0x22222222, 0x11111111} {
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 99,
			SGL: verbstest.SGL(a, 0, size), AH: ah, RemoteQPN: qb.Num, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("UD send completion %+v", wc)
		}
	}
	wc := waitWC(t, b.CQ)
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
	if _, err := qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, AH: ah}}); !errorsIs(err, verbs.ErrInvalid) {
		t.Errorf("UD WRITE: %v", err)
	}
}
