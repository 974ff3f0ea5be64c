package datapath

import (
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
)

// TestACKHold: an application's turn whose only frames are ACKs holds
// them for its answer, which leaves behind them in one Send call; with no
// answer they leave alone once NICConfig.ACKHold has passed, and holding
// pauses; NAKs and the engine's own turns never wait.
func TestACKHold(t *testing.T) {
	const qpn, peer = 17, 30
	type step int
	const (
		poll     step = iota // NIC.Progress, the application's poll
		post                 // the application's answer, a WRITE (a doorbell's turn)
		later                // the clock moves on 4 us, then a poll
		engine               // a turn of the engine's own goroutine
		idle                 // oneCPUIdlePolls idle polls on one CPU: the poll sleeps on the port
		sendHeld             // NIC.SendHeld: the application's exchange is over
		closeNIC             // NIC.Close
	)
	for _, tc := range []struct {
		name    string
		psn     wire.PSN // of the peer's WRITE (1 is the next)
		steps   []step
		want    []string // sent, in order
		batches []int    // Send calls' frames
		holds   uint64
		late    uint64
	}{
		{"answer in the next turn", 1, []step{poll, post},
			[]string{"ACK", wire.RCRDMAWriteOnly.String()}, []int{2}, 1, 0},
		{"answer after polls and a while", 1, []step{poll, poll, later, poll, post},
			[]string{"ACK", wire.RCRDMAWriteOnly.String()}, []int{2}, 1, 0},
		{"no answer within ACKHold", 1, []step{poll, later, poll, later, poll, later},
			[]string{"ACK"}, []int{1}, 1, 1},
		{"no answer, then the answer", 1, []step{poll, later, later, later, post},
			[]string{"ACK", wire.RCRDMAWriteOnly.String()}, []int{1, 1}, 1, 1},
		{"the engine's goroutine sends at once", 1, []step{engine},
			[]string{"ACK"}, []int{1}, 0, 0},
		{"held, then the engine's goroutine", 1, []step{poll, engine},
			[]string{"ACK"}, []int{1}, 1, 1},
		{"held, then the poll sleeps on one CPU", 1, []step{poll, idle},
			[]string{"ACK"}, []int{1}, 1, 1},
		{"held, then SendHeld", 1, []step{poll, sendHeld},
			[]string{"ACK"}, []int{1}, 1, 1},
		{"held, then the NIC closes", 1, []step{poll, closeNIC},
			[]string{"ACK"}, []int{1}, 1, 1},
		// PSN 3 where 1 is next: the last ACK again, and the NAK.
		{"a NAK goes at once, and what is with it", 3, []step{poll},
			[]string{"ACK", "NAK"}, []int{2}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.cq(0, 64)
			q := h.rcQP(qpn, peer, 0, 0, 0)
			buf := make([]byte, 64)
			rkey, va := h.mr(buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
			warmUp(h, rkey, va, qpn) // contexts cached, ACKs sent at once
			h.nic.cfg.ACKHold = DefaultACKHold
			e := h.nic.engines[0]
			h.port.batches = nil
			holds0, late0 := h.nic.counters.AckHolds.Load(), h.nic.counters.AckHoldsLate.Load()

			h.write(qpn, tc.psn, rkey, va, []byte("ping"))
			for _, s := range tc.steps {
				switch s {
				case poll:
					h.nic.Progress()
				case post:
					h.post(qpn, &q, 0, inlineWrite(1, "pong", 0x1000, 0x77))
					for range 4 { // the WQE's fetch
						h.after(pcieLatency)
					}
				case later:
					h.clock.Advance(4 * time.Microsecond)
					h.nic.Progress()
				case idle:
					for range 3 { // the placement's host writes land: nothing keeps the engine busy
						h.clock.Advance(pcieLatency)
						h.nic.Progress()
					}
					h.nic.oneCPU = true
					h.nic.idlePolls.Store(0)
					for range oneCPUIdlePolls {
						h.nic.Progress()
					}
					if h.port.waits == 0 {
						t.Fatal("the idle polls did not sleep on the port")
					}
				case sendHeld:
					h.nic.SendHeld()
				case closeNIC:
					h.nic.Close()
				case engine:
					e.mu.Lock()
					e.turn()
					e.mu.Unlock()
				}
			}
			var got []string
			for _, r := range h.replies() {
				switch {
				case r.nak:
					got = append(got, "NAK")
				case r.op == wire.RCAcknowledge:
					got = append(got, "ACK")
				default:
					got = append(got, r.op.String())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("sent %v, want %v", got, tc.want)
			}
			if !slices.Equal(h.port.batches, tc.batches) {
				t.Errorf("Send calls of %v frames, want %v", h.port.batches, tc.batches)
			}
			if got := h.nic.counters.AckHolds.Load() - holds0; got != tc.holds {
				t.Errorf("ack_holds moved by %d, want %d", got, tc.holds)
			}
			if got := h.nic.counters.AckHoldsLate.Load() - late0; got != tc.late {
				t.Errorf("ack_holds_late moved by %d, want %d", got, tc.late)
			}
		})
	}
}

// TestACKHoldPauses: a hold that saw no answer pauses holding for
// ackHoldPause chances, twice as many after each such hold in a row up to
// ackHoldPauseMax (a stream's receiver soon stops delaying its peer),
// and a hold that saw its answer brings the pause back to ackHoldPause.
func TestACKHoldPauses(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 64)
	q := h.rcQP(17, 30, 0, 0, 0)
	buf := make([]byte, 64)
	rkey, va := h.mr(buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	warmUp(h, rkey, va, 17)
	h.nic.cfg.ACKHold = DefaultACKHold
	psn := wire.PSN(1)
	posted := uint32(0)
	// ping is the peer's WRITE and the application's polls; with answer,
	// the application posts its own WRITE after the first poll. It
	// reports whether the WRITE's ACK was held.
	ping := func(answer bool) (held bool) {
		t.Helper()
		h.write(17, psn, rkey, va, []byte("ping"))
		psn++
		h.nic.Progress()
		held = len(h.port.tx) == 0
		if answer {
			h.post(17, &q, posted, inlineWrite(uint64(posted), "pong", 0x1000, 0x77))
			posted++
			for range 4 {
				h.after(pcieLatency)
			}
		} else {
			h.clock.Advance(DefaultACKHold)
			h.nic.Progress()
		}
		h.sent()
		return held
	}
	// gaps counts the unheld pings between held ones, none answered.
	gaps := func(n int) []int {
		t.Helper()
		var out []int
		if !ping(false) {
			t.Fatal("the ACK before the gaps was not held")
		}
		for range n {
			k := 0
			for !ping(false) {
				if k++; k > 2*ackHoldPauseMax {
					t.Fatal("holding never resumed")
				}
			}
			out = append(out, k)
		}
		return out
	}
	if got, want := gaps(9), []int{8, 16, 32, 64, 128, 256, 512, 1024, 1024}; !slices.Equal(got, want) {
		t.Errorf("pauses after unanswered holds: %v, want %v", got, want)
	}
	// The chance after the next pause is held: answered, it brings the
	// pause back to ackHoldPause.
	for range ackHoldPauseMax {
		if ping(false) {
			t.Fatal("an ACK of the pause was held")
		}
	}
	if !ping(true) {
		t.Fatal("the ACK after the pause was not held")
	}
	if got, want := gaps(2), []int{ackHoldPause, 2 * ackHoldPause}; !slices.Equal(got, want) {
		t.Errorf("pauses after an answered hold: %v, want %v", got, want)
	}
}
