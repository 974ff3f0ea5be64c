package verbs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// queuedPair builds two devices with a port of several queues each, queue
// i of one joined to queue i of the other. a's QP numbers are one ahead of
// b's, so the frames of most QPs arrive on a queue whose engine does not
// own them and must be handed over.
func queuedPair(t *testing.T, link porttest.Config, queues int) (*end, *end) {
	link.Buffers = 8192
	var pa, pb []datapath.Port
	for q := range queues {
		link.Seed += uint64(q)
		x, y := porttest.NewPair(link)
		pa, pb = append(pa, x), append(pb, y)
	}
	a := verbstest.NewEndQueues(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), bufSize, 1)
	b := verbstest.NewEndQueues(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), bufSize, 0)
	return a, b
}

// checkEngines asserts that frames were handed between engines, none
// dropped, and with every, that every engine of both devices took frames
// (from its queue or handed over).
func checkEngines(t *testing.T, a, b *end, every bool) {
	t.Helper()
	if a.Counts.HandedOff.Load()+b.Counts.HandedOff.Load() == 0 {
		t.Error("no frame was handed to its QP's engine")
	}
	for side, e := range map[string]*end{"a": a, "b": b} {
		nic := e.Dev.NIC()
		// Frames still on their way (ACKs nobody waited for: the
		// scenarios' sends may be unsignalled) arrive within moments.
		settled := func() bool {
			for _, s := range nic.Engines() {
				if s.HandoffQueued.Load() != 0 || every && s.RxFrames.Load()+s.HandoffIn.Load() == 0 {
					return false
				}
			}
			return true
		}
		for deadline := time.Now().Add(3 * time.Second); !settled() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		for q, s := range nic.Engines() {
			t.Logf("%s queue %d: rx %d, handed in %d, handed out %d, doorbells %d", side, q,
				s.RxFrames.Load(), s.HandoffIn.Load(), s.HandoffOut.Load(), s.Doorbells.Load())
			if every && s.RxFrames.Load()+s.HandoffIn.Load() == 0 {
				t.Errorf("%s: engine %d had no work", side, q)
			}
		}
		if d := nic.Counters().HandoffDropped.Load(); d != 0 {
			t.Errorf("%s: %d handed-off frames dropped on a clean link", side, d)
		}
	}
}

// TestMultiQueue runs the scenarios on devices with two queues, one engine
// each: QPs spread over the engines share CQs, an SRQ and an atomic
// counter, and most frames cross from one engine to the other.
func TestMultiQueue(t *testing.T) {
	scenarios := []struct {
		name  string
		run   func(*testing.T, *end, *end)
		every bool // the scenario has QPs on every engine
	}{{"atomics", verbstest.Atomics, true}, {"SRQ", verbstest.SRQ, true}, {"UC", verbstest.UC, false}, {"UD", verbstest.UD, false}}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			a, b := queuedPair(t, porttest.Config{}, 2)
			s.run(t, a, b)
			checkEngines(t, a, b, s.every)
		})
	}
}

// TestMultiQueueLossy: 8 QPs over two engines add to one counter across
// a link that loses, duplicates, reorders and corrupts frames; every
// duplicate atomic must be answered from the responder's record, never
// executed twice, whichever engine the frame arrived on.
func TestMultiQueueLossy(t *testing.T) {
	a, b := queuedPair(t, porttest.Config{Loss: 0.02, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01, Seed: 11}, 2)
	verbstest.Atomics(t, a, b)
	t.Logf("a: retransmits %d, handed off %d, dropped %d; b: duplicates %d, out of sequence %d, handed off %d, dropped %d",
		a.Counts.Retransmits.Load(), a.Counts.HandedOff.Load(), a.Counts.HandoffDropped.Load(),
		b.Counts.DuplicateRequest.Load(), b.Counts.OutOfSeqRequest.Load(), b.Counts.HandedOff.Load(), b.Counts.HandoffDropped.Load())
	if a.Counts.HandedOff.Load() == 0 || b.Counts.HandedOff.Load() == 0 {
		t.Error("no frame was handed to its QP's engine")
	}
	if a.Counts.Retransmits.Load() == 0 || b.Counts.DuplicateRequest.Load()+b.Counts.OutOfSeqRequest.Load() == 0 {
		t.Error("a lossy link caused no recovery")
	}
}
