package datapath

import (
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// A doorbell's WQEs come from host memory one round trip after it, in one
// fetch, and a WRITE's payload one round trip after its WQE. The engine
// waits for neither (the clock stands while it turns): nothing leaves
// before its bytes are there, and then the WRITE leaves with them and the
// READ posted behind it follows it, in order.
func TestDMAStageFetchesAndGathersWithoutWaiting(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	buf := make([]byte, 64)
	copy(buf[16:], "gathered") // past what warm writes
	key, va := h.mr(buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	warmUp(h, key, va, 17) // the QP's context, the region's MPT entry and MTT line are cached

	write := hostmem.SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RemoteAddr: 0x1000, RKey: 7,
		NumSGE: 1, SGE: [hostmem.MaxSendSGE]hostmem.SGE{{Addr: va + 16, Length: 8, LKey: key}}}
	read := hostmem.SendWQE{WRID: 2, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, RemoteAddr: 0x2000, RKey: 7,
		NumSGE: 1, SGE: [hostmem.MaxSendSGE]hostmem.SGE{{Addr: va + 32, Length: 8, LKey: key}}}
	h.writeWQE(&q, 0, write)
	h.post(17, &q, 1, read) // one doorbell for both
	h.turns()
	if got := h.sent(); len(got) != 0 {
		t.Fatalf("sent %d packets before the WQEs came", len(got))
	}
	h.after(pcieLatency) // the WQEs come; the WRITE's payload is read
	if got := h.sent(); len(got) != 0 {
		t.Fatalf("sent %v before the WRITE's payload came: out of order, or without its bytes", got[0].Opcode)
	}
	h.after(pcieLatency) // the payload comes
	got := h.sent()
	if len(got) != 2 || got[0].Opcode != wire.RCRDMAWriteOnly || got[1].Opcode != wire.RCRDMAReadRequest {
		t.Fatalf("sent %d packets, want the WRITE and then the READ request", len(got))
	}
	if p := string(got[0].Payload()); p != "gathered" {
		t.Errorf("the WRITE carried %q, want %q", p, "gathered")
	}
	if got[1].BTH().PSN() != got[0].BTH().PSN()+1 {
		t.Errorf("PSNs %d then %d", got[0].BTH().PSN(), got[1].BTH().PSN())
	}
	c := &h.nic.counters
	if c.DMAWaits.Load() != 0 || c.CtxWaits.Load() != 0 || c.DMAFaults.Load() != 0 {
		t.Errorf("dma_waits %d, ctx_waits %d, dma_faults %d: the engine waited", c.DMAWaits.Load(), c.CtxWaits.Load(), c.DMAFaults.Load())
	}
}
