package verbs_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// end is one side of a connected RC pair.
type end struct {
	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	buf    []byte
	mr     *verbs.MR
	mac    wire.MAC
	ip     netip.Addr
	counts *datapath.Counters
}

const bufSize = 4 << 20

func newEnd(t *testing.T, port datapath.Port, mac wire.MAC, ip string) *end {
	t.Helper()
	e := &end{mac: mac, ip: netip.MustParseAddr(ip)}
	var err error
	if e.dev, err = verbs.Open(verbs.DeviceConfig{Port: port, MAC: mac, IP: e.ip}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.dev.Close() })
	e.pd, _ = e.dev.AllocPD()
	if e.cq, err = e.dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 3}}); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, bufSize)
	if e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	e.counts = e.dev.NIC().Counters()
	return e
}

// connect takes both QPs to RTS, each pointing at the other.
func connect(t *testing.T, a, b *end) { connectTimeout(t, a, b, 14) }

func connectTimeout(t *testing.T, a, b *end, timeout uint8) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DestMAC: peer.mac, DestGID: peer.ip}, PathMTU: 3, DestQPN: peer.qp.Num,
				RQPSN: 1000 + peer.qp.Num, MaxDestRdAtomic: 16, MinRNRTimer: 12},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1000 + me.qp.Num, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := me.qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func pair(t *testing.T) (*end, *end) { return lossyPair(t, porttest.Config{}) }

func lossyPair(t *testing.T, link porttest.Config) (*end, *end) {
	link.Buffers = 8192
	pa, pb := porttest.NewPair(link)
	a := newEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, "10.47.0.1")
	b := newEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, "10.47.0.2")
	connectTimeout(t, a, b, 12) // 17 ms
	return a, b
}

// waitWC waits for one completion.
func waitWC(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion: %v", err)
		}
	}
}

var sizes = []int{0, 1, 1023, 1024, 1025, 64 << 10, 1 << 20}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 9))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func TestRCSendRecv(t *testing.T) {
	a, b := pair(t)
	for i, size := range sizes {
		src := a.buf[:size]
		fill(src, uint64(i))
		dst := b.buf[bufSize/2 : bufSize/2+size+16]
		clear(dst)
		if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 100 + uint64(i), SGL: []verbs.SGE{{Addr: b.mr.Addr + bufSize/2, Length: uint32(size + 16), LKey: b.mr.LKey}}}}); err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 0xabc0 + uint32(i)}
		if size > 0 {
			wr.SGL = []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(size), LKey: a.mr.LKey}}
		}
		if _, err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		sw := waitWC(t, a.cq)
		rw := waitWC(t, b.cq)
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
		src := a.buf[:size]
		fill(src, uint64(i)+50)
		remote := b.mr.Addr + 4096
		if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: sgl(a, 0, size), RemoteAddr: remote, RKey: b.mr.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
			t.Fatalf("size %d: write completion %+v", size, wc)
		}
		if !bytes.Equal(b.buf[4096:4096+size], src) {
			t.Fatalf("size %d: written data differs", size)
		}
		// Read it back into another part of a's buffer.
		back := a.buf[bufSize/2 : bufSize/2+size]
		clear(back)
		if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: sgl(a, bufSize/2, size), RemoteAddr: remote, RKey: b.mr.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead || int(wc.ByteLen) != size {
			t.Fatalf("size %d: read completion %+v", size, wc)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("size %d: read data differs", size)
		}
	}
}

func sgl(e *end, off, size int) []verbs.SGE {
	if size == 0 {
		return nil
	}
	return []verbs.SGE{{Addr: e.mr.Addr + uint64(off), Length: uint32(size), LKey: e.mr.LKey}}
}

// TestRemoteAccessError: a write with a bad rkey completes with
// REM_ACCESS_ERR, later requests are flushed, and nothing is written.
func TestRemoteAccessError(t *testing.T) {
	a, b := pair(t)
	fill(a.buf[:100], 1)
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 100), RemoteAddr: b.mr.Addr, RKey: b.mr.RKey ^ 0xff},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 100), RemoteAddr: b.mr.Addr, RKey: b.mr.RKey},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	first, second := waitWC(t, a.cq), waitWC(t, a.cq)
	if first.WRID != 1 || first.Status != verbs.WCRemAccessErr {
		t.Errorf("first completion %+v, want REM_ACCESS_ERR", first)
	}
	if second.WRID != 2 || second.Status != verbs.WCWRFlushErr {
		t.Errorf("second completion %+v, want WR_FLUSH_ERR", second)
	}
	if !bytes.Equal(b.buf[:100], make([]byte, 100)) {
		t.Error("a write with a bad rkey changed memory")
	}
}

// TestLossyLink runs SEND, WRITE and READ of up to 1 MiB over a link that
// loses, duplicates, reorders and corrupts frames: every byte must arrive,
// every work request complete successfully, and the retransmissions show.
func TestLossyLink(t *testing.T) {
	a, b := lossyPair(t, porttest.Config{Loss: 0.02, Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.01, Seed: 7})
	for i, size := range []int{1, 1025, 64 << 10, 1 << 20} {
		src := a.buf[:size]
		fill(src, uint64(i)+99)
		// SEND
		clear(b.buf[:size])
		b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: sgl(b, 0, size)}})
		a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, size)}})
		if wc := waitWC(t, a.cq); wc.Status != verbs.WCSuccess {
			ca, cb := a.counts, b.counts
			t.Fatalf("size %d: send %+v; a: sent %d rcvd %d retrans %d seqNAK %d badICRC %d; b: sent %d rcvd %d dup %d oos %d badICRC %d",
				size, wc, ca.SentPkts.Load(), ca.RcvdPkts.Load(), ca.Retransmits.Load(), ca.RcvdSeqErr.Load(), ca.RcvdBadICRC.Load(),
				cb.SentPkts.Load(), cb.RcvdPkts.Load(), cb.DuplicateRequest.Load(), cb.OutOfSeqRequest.Load(), cb.RcvdBadICRC.Load())
		}
		if wc := waitWC(t, b.cq); wc.Status != verbs.WCSuccess || int(wc.ByteLen) != size {
			t.Fatalf("size %d: recv %+v", size, wc)
		}
		if !bytes.Equal(b.buf[:size], src) {
			t.Fatalf("size %d: SEND data differs", size)
		}
		// WRITE then READ back
		a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, 0, size), RemoteAddr: b.mr.Addr + bufSize/2, RKey: b.mr.RKey}})
		if wc := waitWC(t, a.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("size %d: write %+v", size, wc)
		}
		if !bytes.Equal(b.buf[bufSize/2:bufSize/2+size], src) {
			t.Fatalf("size %d: WRITE data differs", size)
		}
		clear(a.buf[bufSize/2 : bufSize/2+size])
		a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: sgl(a, bufSize/2, size), RemoteAddr: b.mr.Addr + bufSize/2, RKey: b.mr.RKey}})
		if wc := waitWC(t, a.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("size %d: read %+v", size, wc)
		}
		if !bytes.Equal(a.buf[bufSize/2:bufSize/2+size], src) {
			t.Fatalf("size %d: READ data differs", size)
		}
	}
	ca, cb := a.counts, b.counts
	t.Logf("a: retransmits %d, seq NAKs received %d, bad ICRC %d; b: duplicates %d, out of sequence %d, bad ICRC %d",
		ca.Retransmits.Load(), ca.RcvdSeqErr.Load(), ca.RcvdBadICRC.Load(), cb.DuplicateRequest.Load(), cb.OutOfSeqRequest.Load(), cb.RcvdBadICRC.Load())
	if ca.Retransmits.Load() == 0 || cb.DuplicateRequest.Load()+cb.OutOfSeqRequest.Load() == 0 {
		t.Error("a lossy link caused no recovery")
	}
}
