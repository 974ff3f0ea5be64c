package datapath

import (
	"bytes"
	"slices"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// warmUp sends one WRITE on each QP and lets every fetch complete, so that
// their contexts, the region's MPT entry and its MTT line are cached.
func warmUp(h *harness, rkey uint32, va uint64, qps ...uint32) {
	h.t.Helper()
	for _, qpn := range qps {
		h.write(qpn, 0, rkey, va, []byte("warm"))
	}
	for range 8 {
		h.after(pcieLatency)
	}
	if got := h.replies(); len(got) != len(qps) {
		h.t.Fatalf("warming up: %d replies, want an ACK per QP: %+v", len(got), got)
	}
}

// A QP whose context misses waits with its packets, in order, while the
// other QPs' packets are executed and acknowledged; nothing waits for the
// fetch (ctx_waits stays 0), and when the context comes the waiting
// packets run in the order they came.
func TestResolveMissParksOnlyItsQP(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 64)
	const cold, hot, coldPeer, hotPeer = 17, 18, 100, 101
	h.rcQP(cold, coldPeer, 0, 0, 0)
	h.rcQP(hot, hotPeer, 0, 0, 0)
	buf := make([]byte, 4096)
	rkey, va := h.mr(buf, ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	warmUp(h, rkey, va, cold, hot)

	h.nic.Cache(hostmem.QPC).Invalidate(cold) // evicted between its WRITEs
	parked := h.nic.counters.Parked.Load()
	h.write(cold, 1, rkey, va+100, []byte("first"))
	h.write(hot, 1, rkey, va+200, []byte("hot"))
	h.write(cold, 2, rkey, va+105, []byte("second"))
	h.turns() // the clock stands: the cold QP's context has not come

	want := []reply{{qpn: hotPeer, op: wire.RCAcknowledge, psn: 1}}
	if got := h.replies(); !slices.Equal(got, want) {
		t.Fatalf("before the cold context comes: replies %+v, want only the hot QP's ACK %+v", got, want)
	}
	if got := h.nic.counters.Parked.Load() - parked; got != 2 {
		t.Errorf("parked %d packets, want the cold QP's 2", got)
	}

	h.after(pcieLatency)
	want = []reply{{qpn: coldPeer, op: wire.RCAcknowledge, psn: 1}, {qpn: coldPeer, op: wire.RCAcknowledge, psn: 2}}
	if got := h.replies(); !slices.Equal(got, want) {
		t.Fatalf("after the cold context came: replies %+v, want its two ACKs in order %+v", got, want)
	}
	h.after(pcieLatency) // the placed bytes reach host memory
	if got := h.read(va+100, 11); !bytes.Equal(got, []byte("firstsecond")) {
		t.Errorf("the cold QP's WRITEs placed %q, want %q (in order)", got, "firstsecond")
	}
	if got := h.read(va+200, 3); !bytes.Equal(got, []byte("hot")) {
		t.Errorf("the hot QP's WRITE placed %q", got)
	}
	if w := h.nic.counters.CtxWaits.Load(); w != 0 {
		t.Errorf("ctx_waits %d: a stage waited for a fetch", w)
	}
}

// A doorbell on a QP whose context misses stops that QP's requester
// only: the next QP's WRITE leaves first, the cold QP's when its context
// comes, and their ACKs complete both in order.
func TestResolveRequesterMissWaitsAlone(t *testing.T) {
	h := newHarness(t)
	ring := h.cq(0, 64)
	const cold, hot, coldPeer, hotPeer = 17, 18, 100, 101
	qc := h.rcQP(cold, coldPeer, 0, 0, 0)
	qh := h.rcQP(hot, hotPeer, 0, 0, 0)
	rkey, va := h.mr(make([]byte, 4096), ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	warmUp(h, rkey, va, cold, hot)

	h.nic.Cache(hostmem.QPC).Invalidate(cold)
	waits := h.nic.counters.SendWaits.Load()
	h.post(cold, &qc, 0, inlineWrite(1, "cold", 0x1000, 7))
	h.post(hot, &qh, 0, inlineWrite(2, "hot", 0x2000, 7))
	h.turns()
	if got := h.nic.counters.SendWaits.Load() - waits; got != 1 {
		t.Errorf("send_waits moved by %d, want 1 (the cold QP's requester)", got)
	}
	// One host round trip: the hot QP's WQE and the cold QP's context
	// come; another: the cold QP's WQE.
	var order []uint32
	for range 2 {
		h.after(pcieLatency)
		for _, p := range h.sent() {
			if p.Opcode != wire.RCRDMAWriteOnly {
				t.Fatalf("sent %v, want WRITE_ONLY", p.Opcode)
			}
			order = append(order, p.BTH().DestQP())
		}
		if len(order) == 0 {
			t.Fatal("the hot QP's WRITE did not leave when its WQE came")
		}
	}
	if want := []uint32{hotPeer, coldPeer}; !slices.Equal(order, want) {
		t.Fatalf("WRITEs left for peers %v, want %v: the hot QP first, not behind the cold one", order, want)
	}
	h.ack(hot, 0, 1)
	h.ack(cold, 0, 1)
	for range 4 {
		h.after(pcieLatency)
	}
	var wrids []uint64
	for _, c := range h.cqes(ring, 64) {
		if c.Status != ibv.WCSuccess || c.Opcode != ibv.WCRDMAWrite {
			t.Errorf("CQE %+v, want a successful WRITE", c)
		}
		wrids = append(wrids, c.WRID)
	}
	if want := []uint64{2, 1}; !slices.Equal(wrids, want) {
		t.Errorf("completions %v, want %v (in the order the ACKs came)", wrids, want)
	}
	if w := h.nic.counters.CtxWaits.Load(); w != 0 {
		t.Errorf("ctx_waits %d: a stage waited for a fetch", w)
	}
}

// A SEND whose receive WQE names memory whose MPT entry is not cached
// waits, parked, with the WQE taken, and lands when the entry comes:
// nothing waits for the fetch.
func TestResolveSendIntoColdReceiveBuffer(t *testing.T) {
	rt := newRespTest(t)
	rt.recv(1, 16)
	rt.recv(2, 16)
	warmUp(rt.harness, rt.rkey, rt.va, respQP)
	rt.nic.Cache(hostmem.MPT).Invalidate(uint64(rt.recvKey >> 8))
	rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, 1), Payload: []byte("one")})
	rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, 2), Payload: []byte("two")})
	rt.turns()
	if got := rt.replies(); len(got) != 0 {
		t.Fatalf("answers %+v before the receive buffer's MPT entry came", got)
	}
	rt.settle()
	want := []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1}, {qpn: respPeer, op: wire.RCAcknowledge, psn: 2}}
	if got := rt.replies(); !slices.Equal(got, want) {
		t.Fatalf("answers %+v, want %+v", got, want)
	}
	var wrids []uint64
	for _, c := range rt.cqes(rt.ring, 64) {
		if c.Status != ibv.WCSuccess || c.ByteLen != 3 {
			t.Errorf("CQE %+v", c)
		}
		wrids = append(wrids, c.WRID)
	}
	if !slices.Equal(wrids, []uint64{1, 2}) {
		t.Errorf("receives completed %v, want [1 2]: each SEND its own WQE, in order", wrids)
	}
	if !bytes.Equal(rt.recvBuf[:3], []byte("two")) {
		t.Errorf("receive buffer %q", rt.recvBuf[:3])
	}
	if w := rt.nic.counters.CtxWaits.Load(); w != 0 {
		t.Errorf("ctx_waits %d", w)
	}
}

// A READ response whose landing place's MPT entry is not cached waits,
// parked, and completes the READ with its data when the entry comes.
func TestResolveReadResponseIntoColdBuffer(t *testing.T) {
	rt := newRespTest(t)
	warmUp(rt.harness, rt.rkey, rt.va, respQP)
	local := make([]byte, 32)
	lkey, lva := rt.mr(local, ibv.AccessLocalWrite)
	rt.nic.Cache(hostmem.MPT).Invalidate(uint64(lkey >> 8))
	w := hostmem.SendWQE{WRID: 9, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, RemoteAddr: 0x4000, RKey: 0x1234, NumSGE: 1,
		SGE: [hostmem.MaxSendSGE]hostmem.SGE{{Addr: lva, Length: 6, LKey: lkey}}}
	rt.post(respQP, &rt.q, 0, w)
	rt.turns()
	rt.after(pcieLatency) // the WQE comes
	sent := rt.sent()
	if len(sent) != 1 || sent[0].Opcode != wire.RCRDMAReadRequest {
		t.Fatalf("sent %d packets, want the READ request", len(sent))
	}
	rt.nic.Cache(hostmem.MPT).Invalidate(uint64(lkey >> 8)) // cold again when its answer comes
	rt.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, DestQP: respQP, PSN: sent[0].BTH().PSN()},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1}, Payload: []byte("answer")})
	parked := rt.nic.counters.Parked.Load()
	rt.turns()
	if rt.nic.counters.Parked.Load() != parked+1 {
		t.Errorf("the response was not parked for its landing place's context")
	}
	rt.settle()
	cqes := rt.cqes(rt.ring, 64)
	if len(cqes) != 1 || cqes[0].WRID != 9 || cqes[0].Status != ibv.WCSuccess || cqes[0].Opcode != ibv.WCRDMARead {
		t.Fatalf("CQEs %+v, want the READ's success", cqes)
	}
	if !bytes.Equal(local[:6], []byte("answer")) {
		t.Errorf("READ placed %q", local[:6])
	}
	if w := rt.nic.counters.CtxWaits.Load(); w != 0 {
		t.Errorf("ctx_waits %d", w)
	}
}
