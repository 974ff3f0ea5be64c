package datapath

import (
	"bytes"
	"slices"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// warm sends one WRITE on each QP and lets every fetch complete, so that
// their contexts, the region's MPT entry and its MTT line are cached.
func warm(h *harness, rkey uint32, va uint64, qps ...uint32) {
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
	rkey, va := h.mr(buf, host.AccessRemoteWrite|host.AccessLocalWrite)
	warm(h, rkey, va, cold, hot)

	h.nic.Cache(host.QPC).Invalidate(cold) // evicted between its WRITEs
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
