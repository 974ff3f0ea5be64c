package datapath

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
)

// countingClock counts the reads of the clock it wraps.
type countingClock struct {
	hostmem.Clock
	reads int
}

func (c *countingClock) Now() time.Time { c.reads++; return c.Clock.Now() }

// A turn reads the engine's clock once, however much work it does: here
// an ACK that completes a WRITE, the peer's WRITEs placed and acknowledged
// and a timer check, in one turn. Every stage sees the time the turn
// began.
func TestClockReadOncePerTurn(t *testing.T) {
	cc := &countingClock{}
	h := newHarnessOn(t, &testPort{}, func(c *NICConfig) { cc.Clock = c.Clock; c.Clock = cc })
	rkey, va := writeSent(h, 18)
	h.ack(17, 0, 1)
	for i := range 8 {
		h.write(18, wire.PSN(i), rkey, va, []byte("y"))
	}
	cc.reads = 0
	if !h.nic.Progress() {
		t.Fatal("the turn found no work")
	}
	if acks := len(h.sent()); acks == 0 {
		t.Fatal("the peer's WRITEs were not acknowledged")
	}
	if cc.reads != 1 {
		t.Errorf("one turn read the clock %d times, want 1", cc.reads)
	}
	cc.reads = 0
	for range 10 {
		h.nic.Progress()
	}
	if cc.reads > 10 {
		t.Errorf("10 idle turns read the clock %d times, want 10 at most", cc.reads)
	}
}

// BenchmarkIdleProgress is one idle turn of a NIC the application's
// polling drives, on the system clock: how often a spinning poll looks at
// the port, and so how soon it sees a frame.
func BenchmarkIdleProgress(b *testing.B) {
	h := newHarnessOn(&testing.T{}, &testPort{}, func(c *NICConfig) { c.Clock = hostmem.SystemClock{} })
	for b.Loop() {
		h.nic.Progress()
	}
}
