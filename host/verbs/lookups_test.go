package verbs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// lookups is a NIC's context lookups by type, its packets and CQEs.
type lookups struct {
	ctx        [hostmem.NumContextTypes]uint64
	rcvd, sent uint64
	waits      uint64
	runs       uint64 // units of work that are not a packet or a doorbell: timers, paced QPs come back to
}

func lookupsOf(c *datapath.Counters) lookups {
	var l lookups
	for t := range hostmem.NumContextTypes {
		l.ctx[t] = c.CtxLookups[t].Load()
	}
	l.rcvd, l.sent, l.waits = c.RcvdPkts.Load(), c.SentPkts.Load(), c.CtxWaits.Load()
	l.runs = c.TimerRuns.Load() + c.LaterRuns.Load()
	return l
}

func (l lookups) sub(m lookups) lookups {
	for t := range l.ctx {
		l.ctx[t] -= m.ctx[t]
	}
	l.rcvd, l.sent, l.waits = l.rcvd-m.rcvd, l.sent-m.sent, l.waits-m.waits
	l.runs -= m.runs
	return l
}

// TestLookupsPerPacket checks that each context a packet needs is looked
// up once for it (ctx_lookups_* against rcvd_pkts), on the WRITE, READ,
// SEND and ACK paths, with warm caches: the responder of a one-packet
// WRITE looks up its QPC, its R_Key's MPT entry and one MTT line; a
// READ's responder the same, for the request and its response; a SEND's
// its QPC, the receive WQE's MPT entry and MTT line, and its receive CQ's
// context for the CQE; the requester, for each ACK or READ response, its
// QPC and its send CQ's context (and for a READ response, the memory it
// lands in), and for the doorbell its QPC and the memory it sends from.
// Nothing waits.
func TestLookupsPerPacket(t *testing.T) {
	const n = 50
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	verbstest.Connect(t, a, b, 3, 20)
	const (
		qpc = hostmem.QPC
		cqc = hostmem.CQC
		mpt = hostmem.MPT
		mtt = hostmem.MTT
	)
	for _, tc := range []struct {
		name string
		op   verbs.WROpcode
		// per operation: the requester's lookups (a doorbell and one
		// response packet) and the responder's (one request packet)
		req, resp map[hostmem.ContextType]uint64
	}{
		{"WRITE", verbs.WRRDMAWrite,
			map[hostmem.ContextType]uint64{qpc: 2, cqc: 1, mpt: 1, mtt: 1},
			map[hostmem.ContextType]uint64{qpc: 1, mpt: 1, mtt: 1}},
		{"READ", verbs.WRRDMARead,
			map[hostmem.ContextType]uint64{qpc: 2, cqc: 1, mpt: 1, mtt: 1},
			map[hostmem.ContextType]uint64{qpc: 1, mpt: 1, mtt: 1}},
		{"SEND", verbs.WRSend,
			map[hostmem.ContextType]uint64{qpc: 2, cqc: 1, mpt: 1, mtt: 1},
			map[hostmem.ContextType]uint64{qpc: 1, cqc: 1, mpt: 1, mtt: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := func(i int) {
				if tc.op == verbs.WRSend {
					if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(b, 4096, 64)}}); err != nil {
						t.Fatal(err)
					}
				}
				wr := verbs.SendWR{WRID: uint64(i), Opcode: tc.op, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 64),
					RemoteAddr: b.MR.Addr + 8192, RKey: b.MR.RKey}
				if _, err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
					t.Fatalf("%s %d: %v", tc.name, i, wc.Status)
				}
				if tc.op == verbs.WRSend {
					if wc := verbstest.WaitWC(t, b.CQ); wc.Status != verbs.WCSuccess {
						t.Fatalf("%s %d at the responder: %v", tc.name, i, wc.Status)
					}
				}
			}
			one(0) // warm the caches
			// A retransmission (a timer that fired while a loaded
			// machine kept the peer from answering) is another path:
			// such a round is measured again, three times at most.
			var da, db lookups
			for try := 0; ; try++ {
				a0, b0 := lookupsOf(a.Counts), lookupsOf(b.Counts)
				for i := range n {
					one(i + 1)
				}
				da, db = lookupsOf(a.Counts).sub(a0), lookupsOf(b.Counts).sub(b0)
				if db.rcvd == n && da.rcvd == n {
					break
				}
				if try == 2 {
					t.Fatalf("packets received: requester %d, responder %d; want %d each", da.rcvd, db.rcvd, n)
				}
				t.Logf("packets received: requester %d, responder %d for %d operations (a retransmission): measuring again", da.rcvd, db.rcvd, n)
			}
			for ty := range hostmem.NumContextTypes {
				// A QP's timer, or the engine coming back to a QP
				// whose pacing held it (a loaded machine: round trips
				// that look long), looks up the QPC too: one each.
				check := func(side string, got, want, runs uint64) {
					if ty == qpc && got >= want && got <= want+runs {
						return
					}
					if got != want {
						t.Errorf("%s: %d %v lookups for %d operations, want %d per operation (and %d timer and paced runs)", side, got, ty, n, want/n, runs)
					}
				}
				check("responder (a request packet)", db.ctx[ty], tc.resp[ty]*n, db.runs)
				check("requester (a doorbell and a response packet)", da.ctx[ty], tc.req[ty]*n, da.runs)
			}
			if da.waits != 0 || db.waits != 0 {
				t.Errorf("lookups that waited: requester %d, responder %d", da.waits, db.waits)
			}
		})
	}
}

// TestHeldCQEsKeepOrder: CQEs that wait for their CQ's context (evicted,
// behind a 30 ms PCIe model) are written when it comes, in the order
// their work requests completed, and the engine never waits for it.
func TestHeldCQEsKeepOrder(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEndPCIe(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<16, hostmem.PCIe{Latency: 30 * time.Millisecond})
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<16)
	verbstest.Connect(t, a, b, 3, 20)
	write := func(id uint64) {
		wr := verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 64),
			RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}
		if _, err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	write(100) // warm the caches
	if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("warm-up: %v", wc.Status)
	}
	nic := a.Dev.NIC()
	held, waits := a.Counts.CQEsHeld.Load(), a.Counts.CtxWaits.Load()
	nic.Command(func() { nic.Cache(hostmem.CQC).Invalidate(uint64(a.CQ.Num())) })
	const n = 5
	for i := range n {
		write(uint64(i + 1))
	}
	for i := range n {
		wc := verbstest.WaitWC(t, a.CQ)
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: WRID %d, %v; want WRID %d, success", i, wc.WRID, wc.Status, i+1)
		}
	}
	if a.Counts.CQEsHeld.Load() == held {
		t.Error("no CQE waited for the evicted CQ context")
	}
	if w := a.Counts.CtxWaits.Load() - waits; w != 0 {
		t.Errorf("the engine waited for a context %d times", w)
	}
}
