package datapath

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// A WRITE whose ACK never comes is sent again when the local ACK timeout
// passes on the driven clock, not before; after retry_cnt tries the QP
// fails with IBV_WC_RETRY_EXC_ERR. The QP waits on the engine's timing
// wheel meanwhile and leaves it when it fails.
func TestTimerWheelLocalACKTimeout(t *testing.T) {
	h := newHarness(t)
	ring := h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	q.Timeout, q.RetryCnt = 10, 2 // 4.096 us x 2^10: about 4.2 ms
	var b [128]byte
	q.Encode(b[:])
	h.hostWrite(hostmem.QPC, 17, b[:])
	h.post(17, &q, 0, inlineWrite(1, "lost", 0x1000, 7))
	h.turns()            // the doorbell: the QP's context misses
	h.after(pcieLatency) // and comes; the WQE fetch goes out
	h.after(pcieLatency) // and its WQE comes
	if got := len(h.sent()); got != 1 {
		t.Fatalf("sent %d packets, want the WRITE", got)
	}
	e := h.nic.engines[0]
	if e.timerWheel.n != 1 || !e.qps[17].wheel.on {
		t.Fatalf("the QP is not on the timing wheel (%d on it)", e.timerWheel.n)
	}
	timeout := time.Duration(4096<<10) * time.Nanosecond
	h.after(timeout / 2)
	if got := len(h.sent()); got != 0 {
		t.Fatalf("%d packets sent again before the timeout", got)
	}
	var resent int
	for range 40 { // the probe, the timeouts (doubling), then the failure
		h.after(timeout / 2)
		resent += len(h.sent())
		if len(h.cqes(ring, 16)) > 0 {
			break
		}
	}
	cqes := h.cqes(ring, 16)
	if len(cqes) != 1 || cqes[0].Status != ibv.WCRetryExcErr {
		t.Fatalf("CQEs %+v, want the WRITE failed with retry exceeded", cqes)
	}
	if resent < 2 {
		t.Errorf("the WRITE was sent again %d times, want at least retry_cnt (2)", resent)
	}
	if h.nic.counters.LocalACKTimeouts.Load() == 0 {
		t.Error("local_ack_timeout did not move")
	}
	h.after(timeout)
	if e.timerWheel.n != 0 {
		t.Errorf("%d QPs left on the wheel after the QP failed", e.timerWheel.n)
	}
}

// Resetting a QP gives back what it holds: its parked packets' buffers
// and its place on the timing wheel.
func TestResetQPGivesBackItsResources(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	rkey, va := h.mr(make([]byte, 64), ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	warmUp(h, rkey, va, 17)
	e := h.nic.engines[0]
	h.post(17, &q, 0, inlineWrite(1, "x", 0x1000, 7)) // on the wheel, waiting for its ACK
	h.turns()
	h.after(pcieLatency) // the WQE comes
	if got := len(h.sent()); got != 1 {
		t.Fatalf("sent %d packets, want the WRITE", got)
	}
	h.nic.Cache(hostmem.QPC).Invalidate(17)
	h.write(17, 1, rkey, va, []byte("a"))
	h.write(17, 2, rkey, va, []byte("b"))
	h.turns()
	if held := len(h.port.lent); held != 2 || e.timerWheel.n != 1 {
		t.Fatalf("before the reset: %d port buffers held, %d QPs on the wheel; want 2 and 1", held, e.timerWheel.n)
	}
	e.resetQP(17)
	if held := len(h.port.lent); held != 0 || e.timerWheel.n != 0 || h.port.badRelease != 0 {
		t.Errorf("after the reset: %d port buffers still held (%d released wrongly), %d QPs on the wheel", held, h.port.badRelease, e.timerWheel.n)
	}
	h.after(time.Second) // nothing left to fire, nothing to place
	for _, p := range h.sent() {
		t.Errorf("a reset QP sent %v PSN %d", p.Opcode, p.BTH().PSN())
	}
}

// A timer does not fire on a QP while its ACK waits in the port's
// receive ring behind other frames (an engine starved of CPU): the turn
// takes what the port received before it runs the timers.
func TestTimerWaitsForReceivedFrames(t *testing.T) {
	h := newHarness(t)
	rkey, va := writeSent(h, 18)
	// The ACK arrives behind a batch and more of another QP's WRITEs,
	// after the WRITE's timer has expired.
	for i := range len(h.nic.engines[0].frames) + 8 {
		h.write(18, wire.PSN(i+1), rkey, va, []byte("y"))
	}
	h.ack(17, 0, 1)
	h.clock.Advance(time.Second)
	h.turns()
	for _, p := range h.sent() {
		if p.BTH().DestQP() == 100 {
			t.Errorf("QP 17 sent %v PSN %d again: its timer fired before its ACK, already received, was taken", p.Opcode, p.BTH().PSN())
		}
	}
	if n := h.nic.counters.LocalACKTimeouts.Load(); n != 0 {
		t.Errorf("local_ack_timeout %d", n)
	}
}

// kickPort is a testPort whose kernel holds frames back (receive work
// pending on a CPU) until the engine kicks it.
type kickPort struct {
	testPort
	held  [][]byte
	kicks int
}

func (p *kickPort) Kick() {
	p.kicks++
	p.rx = append(p.rx, p.held...)
	p.held = nil
}

// A timer that is due waits for one kick of the port: an ACK the kernel
// has not yet put in the receive ring (its receive work waits for a CPU)
// retires the WRITE before the timer sends it again. The port is kicked
// only when a timer is due, not on every turn.
func TestTimerKicksThePortFirst(t *testing.T) {
	kp := &kickPort{}
	h := newHarnessOn(t, &kp.testPort)
	h.nic.engines[0].port, h.nic.engines[0].kicker = kp, kp
	writeSent(h, 18)
	if kp.kicks != 0 {
		t.Fatalf("%d kicks with no timer due", kp.kicks)
	}
	h.ack(17, 0, 1)
	kp.held, kp.rx = kp.rx, nil // the ACK has arrived, but not in the ring
	h.clock.Advance(time.Second)
	h.turns()
	for _, p := range h.sent() {
		if p.BTH().DestQP() == 100 {
			t.Errorf("QP 17 sent %v PSN %d again: its timer fired before the kick brought its ACK", p.Opcode, p.BTH().PSN())
		}
	}
	if kp.kicks != 1 {
		t.Errorf("%d kicks, want 1 (the timer due)", kp.kicks)
	}
	if n := h.nic.counters.LocalACKTimeouts.Load(); n != 0 {
		t.Errorf("local_ack_timeout %d", n)
	}
}

// An engine that was off the CPU longer than starvedGap holds its due
// timers for starveGrace (what the peer sent meanwhile may still be on
// its way through the kernel), counts the hold, and takes the pause as a
// round trip of the path; once the hold is over the timer fires.
func TestStarvedEngineHoldsItsTimers(t *testing.T) {
	h := newHarness(t)
	e := h.nic.engines[0]
	e.systemClock = true
	writeSent(h)
	h.clock.Advance(time.Second) // the WRITE's timer is due
	e.lastTurn = nanotime() - int64(10*time.Millisecond)
	e.sinceHold = holdSpacing + 1
	h.nic.Progress()
	if got := len(h.sent()); got != 0 {
		t.Errorf("a starved engine's first turn sent %d packets, want none (its timers held)", got)
	}
	if n := h.nic.counters.TimersHeld.Load(); n != 1 {
		t.Errorf("timers_held %d, want 1", n)
	}
	if d := e.path.Max(h.clock.Now()); d < 10*time.Millisecond {
		t.Errorf("the path's longest round trip %v after a 10 ms pause", d)
	}
	e.timersHeld = nanotime() // the grace is over
	h.nic.Progress()
	if got := len(h.sent()); got != 1 {
		t.Errorf("after the hold %d packets sent, want the WRITE again", got)
	}
}

// writeSent opens RC QP 17 (peer QP 100), and the other QPs given, with
// their contexts cached, and has QP 17 send one WRITE (its timer running
// from then on); it returns the region the QPs' peer writes to.
func writeSent(h *harness, others ...uint32) (rkey uint32, va uint64) {
	h.t.Helper()
	h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	for i, qpn := range others {
		h.rcQP(qpn, 101+uint32(i), 0, 0, 0)
	}
	rkey, va = h.mr(make([]byte, 64), ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	warmUp(h, rkey, va, append([]uint32{17}, others...)...)
	h.post(17, &q, 0, inlineWrite(1, "x", 0x1000, 7))
	h.turns()
	h.after(pcieLatency) // the WQE comes
	if got := len(h.sent()); got != 1 {
		h.t.Fatalf("sent %d packets, want the WRITE", got)
	}
	return rkey, va
}

// A QP's timer that comes due while the QP's context is out of the cache
// runs when the context comes back, in the same turn, not a tick (65 us)
// later: with more QPs' timers due than the cache has lines, a timer that
// looked again at the next tick would find its context evicted again and
// fetch it at every tick.
func TestTimerOnColdContextRunsWhenItComes(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 16)
	q := h.rcQP(17, 100, 0, 0, 0)
	q.Timeout, q.RetryCnt = 10, 7 // about 4.2 ms
	var b [128]byte
	q.Encode(b[:])
	h.hostWrite(hostmem.QPC, 17, b[:])
	h.post(17, &q, 0, inlineWrite(1, "lost", 0x1000, 7))
	h.turns()
	h.after(pcieLatency)
	h.after(pcieLatency)
	if got := len(h.sent()); got != 1 {
		t.Fatalf("sent %d packets, want the WRITE", got)
	}
	timeout := time.Duration(4096<<10) * time.Nanosecond
	h.after(timeout / 2)
	if got := len(h.sent()); got != 0 {
		t.Fatalf("%d packets sent again before the timeout", got)
	}
	qpc := h.nic.Cache(hostmem.QPC)
	qpc.Invalidate(17)
	misses := qpc.Stats().Misses
	missedAt := -1
	for step := range 2 * int(timeout/pcieLatency) {
		h.after(pcieLatency)
		if missedAt < 0 && qpc.Stats().Misses > misses {
			missedAt = step // the timer came due and found the context gone
		}
		if sent := h.sent(); len(sent) > 0 {
			if missedAt < 0 {
				t.Fatalf("sent %v with no context miss", sent[0].Opcode)
			}
			if d := time.Duration(step-missedAt) * pcieLatency; d > 2*pcieLatency {
				t.Errorf("the timer ran %v after its context missed, want as it came (%v)", d, pcieLatency)
			}
			if n := qpc.Stats().Misses - misses; n != 1 {
				t.Errorf("%d QPC misses for one timer, want 1", n)
			}
			return
		}
	}
	t.Fatal("nothing sent again after twice the timeout")
}

// A turn's clock moves on once a batch of frames has gone to the port:
// the frames queued after it are dated when they go, not when a long
// turn began (their round trips would else include the rest of its
// work). With the driven clock time stands.
func TestClockMovesAfterABatch(t *testing.T) {
	h := newHarness(t)
	e := h.nic.engines[0]
	if before := e.clock(); !e.clock().Equal(before) {
		t.Fatal("the clock moved within a turn before any batch")
	}
	e.flushTX()
	if now := e.clock(); !now.Equal(h.clock.Now()) {
		t.Errorf("driven clock: %v after a batch, want %v", now, h.clock.Now())
	}

	e.systemClock, e.nowFromNS = true, true
	e.nowRead, e.turnNS = false, nanotime()-int64(5*time.Millisecond) // a turn begun 5 ms ago
	began := e.clock()
	if again := e.clock(); !again.Equal(began) {
		t.Fatalf("the turn's clock moved from %v to %v with no batch sent", began, again)
	}
	e.flushTX()
	if d := e.clock().Sub(began); d < 5*time.Millisecond {
		t.Errorf("after a batch the clock moved %v, want the 5 ms the turn had lasted", d)
	}
	e.nowRead, e.turnNS = false, 0
}

// An ACK is dated when its turn receives it, not when the turn began: an
// engine whose thread was off the CPU between the two (3 ms here) took
// the ACK for that much sooner than it came, and a round trip that short
// became the path's least, the delay rule's target.
func TestAckDatedWhenReceived(t *testing.T) {
	port := &testPort{}
	h := newHarnessOn(t, port)
	e := h.nic.engines[0]
	e.systemClock, e.nowFromNS = true, true // the engine's clock is the system's (the DMA's stays driven)
	before := time.Now()
	writeSent(h)
	port.recvTakes = 3 * time.Millisecond
	h.ack(17, 0, 1)
	h.nic.Progress()
	port.recvTakes = 0
	if n := e.qps[17].snd.Outstanding(); n != 0 {
		t.Fatalf("%d packets outstanding after the ACK", n)
	}
	got := e.qps[17].snd.RTT()
	if got == 0 {
		t.Fatal("the ACK gave no round-trip sample")
	}
	if most := time.Since(before); got < 3*time.Millisecond || got > most {
		t.Errorf("round trip %v for an ACK received 3 ms after the turn began (%v at most)", got, most)
	}
}

// A turn that worked for longer than starvedGap (a burst it sent on a
// slow host) was not off the CPU: the next turn holds no timers and
// takes no round trip of the path from it.
func TestLongTurnIsNotStarvation(t *testing.T) {
	port := &testPort{}
	h := newHarnessOn(t, port)
	e := h.nic.engines[0]
	e.systemClock = true
	e.sinceHold = holdSpacing + 1
	port.sendTakes = 2 * starvedGap
	writeSent(h) // the turn that sends the WRITE lasts twice starvedGap
	port.sendTakes = 0
	h.nic.Progress()
	if n := h.nic.counters.TimersHeld.Load(); n != 0 {
		t.Errorf("timers_held %d after a long turn, want 0", n)
	}
	if d := e.path.Max(h.clock.Now()); d >= starvedGap {
		t.Errorf("the path's longest round trip %v after a turn of %v's work", d, 2*starvedGap)
	}
}
