package datapath

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
)

// TestPacedQPLetsEngineSleep: a QP whose next packet pacing holds does not
// keep its engine polling. A turn with nothing else to do reports no work,
// the engine may sleep until the packet's time (sleepFor), and the packet
// goes when that time comes. (An engine that spun through every pacing
// gap held a core; on a machine of two, the peer's engine and the
// applications waited for it, and an incast's link idled.)
func TestPacedQPLetsEngineSleep(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 256)
	lkey, lva := h.mr(make([]byte, 64), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	q := h.rcQP(1, 101, 0, 0, 0)
	warmUp(h, lkey, lva, 1)
	const writes, rtt = 200, time.Millisecond
	for i := range uint32(writes) {
		h.post(1, &q, i, inlineWrite(uint64(i), "data", 0x10000, 9))
	}
	e := h.nic.engines[0]
	// settle takes turns until the engine has no work; a paced packet due
	// within paceSpin keeps it polling, and the clock moves on meanwhile.
	settle := func() {
		t.Helper()
		for range 10000 {
			if !h.nic.Progress() && len(h.port.rx) == 0 {
				return
			}
			if len(e.laterQPs) > 0 && !e.laterNow {
				h.clock.Advance(time.Microsecond)
			}
		}
		t.Fatal("the engine never went idle")
	}
	acked, held := 0, 0
	for round := 0; acked < writes && round < 20000; round++ {
		var last wire.PSN
		n := 0
		for _, p := range h.sent() {
			last, n = p.BTH().PSN(), n+1
		}
		if n > 0 {
			h.clock.Advance(rtt)
			h.ack(1, last, 0)
			acked += n
		}
		settle()
		now := h.clock.Now()
		if len(e.laterQPs) == 0 || e.laterNow || e.paceWake.Sub(now) <= paceSpin {
			h.clock.Advance(time.Microsecond)
			settle()
			continue
		}
		// Pacing holds the QP's next packet past paceSpin.
		held++
		wake := e.paceWake
		before := h.sent() // what went before the hold
		if h.nic.Progress() {
			t.Fatalf("a turn with only a paced packet (due in %v) reports work: the engine polls through the gap", wake.Sub(now))
		}
		if w := e.sleepFor(); w <= 0 || w > wake.Sub(now) {
			t.Fatalf("the engine may sleep %v with the paced packet due in %v", w, wake.Sub(now))
		}
		if got := len(h.sent()); got != 0 {
			t.Fatalf("%d packets went before their pacing time", got)
		}
		h.clock.Advance(wake.Sub(now))
		settle()
		got := h.sent()
		if len(got) == 0 {
			t.Fatalf("nothing went at the paced packet's time (%v later)", wake.Sub(now))
		}
		got = append(before, got...)
		h.clock.Advance(rtt)
		h.ack(1, got[len(got)-1].BTH().PSN(), 0)
		acked += len(got)
		settle()
	}
	if acked < writes {
		t.Fatalf("%d of %d WRITEs acknowledged", acked, writes)
	}
	t.Logf("pacing held %d packets past paceSpin", held)
	if held == 0 {
		t.Fatal("pacing never held a packet past paceSpin: the test shows nothing")
	}
}
