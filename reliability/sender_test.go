package reliability_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

var t0 = time.Unix(1000, 0)

func newSender(t *testing.T, alloc int, p reliability.Params) (*reliability.Sender, *reliability.Pool) {
	t.Helper()
	pool := reliability.NewPool(alloc)
	a, err := pool.Reserve(alloc)
	if err != nil {
		t.Fatal(err)
	}
	return reliability.NewSender(a, 100, p), pool
}

// TestGate is the seed's walk-through: 8 WQEs ready, an allocation of 4;
// four go out, the gate holds the fifth (a stall, counted once, not a
// fault); one cumulative ACK of two reopens it for two more.
func TestGate(t *testing.T) {
	s, pool := newSender(t, 4, reliability.Params{Timeout: 14, RetryCnt: 7})
	sent := 0
	for sent < 8 && s.CanSend(reliability.Data, t0) {
		s.Admit(reliability.Entry{WQE: uint32(sent)}, t0)
		sent++
	}
	if sent != 4 || s.Free() != 0 || pool.Stats().InUse != 4 {
		t.Fatalf("sent %d, free %d, in use %d; want 4, 0, 4", sent, s.Free(), pool.Stats().InUse)
	}
	for range 3 { // asked again and again: still one stall
		if s.CanSend(reliability.Data, t0.Add(time.Millisecond)) {
			t.Fatal("the gate admitted a fifth packet")
		}
	}
	if v := s.OnAck(101, t0.Add(5*time.Millisecond)); v != reliability.Accepted || s.Una() != 102 || s.Free() != 2 {
		t.Fatalf("ACK of 101: %v, Una %d, free %d", v, s.Una(), s.Free())
	}
	for sent < 8 && s.CanSend(reliability.Data, t0) {
		s.Admit(reliability.Entry{WQE: uint32(sent)}, t0)
		sent++
	}
	if sent != 6 {
		t.Fatalf("after the ACK %d sent, want 6", sent)
	}
	st := s.Stats()
	if st.Stalls != 2 || st.Stalled != 5*time.Millisecond {
		t.Errorf("stalls %d for %v, want 2 (the first one 5 ms long, from the loop that filled the allocation; the second still on)", st.Stalls, st.Stalled)
	}
	if pool.Stats().HighWater != 4 {
		t.Errorf("high water %d, want 4", pool.Stats().HighWater)
	}
}

// Ask gives the gate's answer and takes nothing: asked any number of
// times, the packet then admitted gets the PSN a Send would have given,
// and once the entries are taken Ask says why, as Send does.
func TestAskTakesNothing(t *testing.T) {
	s, pool := newSender(t, 2, reliability.Params{Timeout: 14, RetryCnt: 7})
	for i := range 2 {
		for range 3 {
			if g := s.Ask(reliability.Entry{WQE: uint32(i)}, t0); g.Hold != reliability.Go {
				t.Fatalf("packet %d: Ask says %v, want go", i, g.Hold)
			}
		}
		if got := pool.Stats().InUse; got != int64(i) {
			t.Fatalf("after asking for packet %d: %d entries in use, want %d", i, got, i)
		}
		if psn, _ := s.Admit(reliability.Entry{WQE: uint32(i)}, t0); psn != wire.PSN(100+i) {
			t.Fatalf("packet %d admitted with PSN %d, want %d", i, psn, 100+i)
		}
	}
	if g := s.Ask(reliability.Entry{WQE: 2}, t0); g.Hold != reliability.HoldReplayFull {
		t.Fatalf("with both entries taken Ask says %v, want %v", g.Hold, reliability.HoldReplayFull)
	}
	if g := s.Send(reliability.Entry{WQE: 2}, t0); g.Hold != reliability.HoldReplayFull {
		t.Fatalf("Send says %v, want %v", g.Hold, reliability.HoldReplayFull)
	}
}

// TestSenderAnswers: what each kind of answer does to the window.
func TestSenderAnswers(t *testing.T) {
	p := reliability.Params{Timeout: 14, RetryCnt: 3, RNRRetry: 2, MaxRdAtomic: 4}
	type step struct {
		do      func(s *reliability.Sender) reliability.Verdict
		verdict reliability.Verdict
		una     wire.PSN
	}
	ack := func(psn wire.PSN) func(*reliability.Sender) reliability.Verdict {
		return func(s *reliability.Sender) reliability.Verdict { return s.OnAck(psn, t0) }
	}
	nak := func(psn wire.PSN, code uint8) func(*reliability.Sender) reliability.Verdict {
		return func(s *reliability.Sender) reliability.Verdict { return s.OnNAK(psn, code, t0) }
	}
	rnr := func(psn wire.PSN) func(*reliability.Sender) reliability.Verdict {
		return func(s *reliability.Sender) reliability.Verdict { return s.OnRNR(psn, 1, t0) }
	}
	// Five WRITE packets at PSNs 100..104. A failed sender's Una stays
	// where it failed: the work before it completed.
	for _, tc := range []struct {
		name   string
		steps  []step
		status ibv.WCStatus
	}{
		{"cumulative ACK", []step{{ack(102), reliability.Accepted, 103}, {ack(104), reliability.Accepted, 105}}, 0},
		{"duplicate ACK", []step{{ack(102), reliability.Accepted, 103}, {ack(102), reliability.Accepted, 103}, {ack(99), reliability.Ignored, 103}}, 0},
		{"ACK never sent", []step{{ack(105), reliability.Ignored, 100}, {ack(100 + 5000), reliability.Ignored, 100}}, 0},
		{"sequence NAK goes back", []step{{nak(102, wire.NAKPSNSequenceError), reliability.Accepted, 102}}, 0},
		{"stale NAK ignored", []step{{ack(102), reliability.Accepted, 103}, {nak(101, wire.NAKRemoteAccessError), reliability.Ignored, 103}}, 0},
		{"future NAK ignored", []step{{nak(106, wire.NAKRemoteAccessError), reliability.Ignored, 100}}, 0},
		{"remote access error", []step{{nak(103, wire.NAKRemoteAccessError), reliability.Failed, 103}}, ibv.WCRemAccessErr},
		{"invalid request", []step{{nak(100, wire.NAKInvalidRequest), reliability.Failed, 100}}, ibv.WCRemInvReqErr},
		{"remote operational error", []step{{nak(100, wire.NAKRemoteOperationalErr), reliability.Failed, 100}}, ibv.WCRemOpErr},
		{"RNR retries exhausted", []step{{rnr(101), reliability.Accepted, 101}, {rnr(101), reliability.Accepted, 101}, {rnr(101), reliability.Failed, 101}}, ibv.WCRNRRetryExcErr},
		{"RNR then progress resets the count", []step{{rnr(101), reliability.Accepted, 101}, {rnr(101), reliability.Accepted, 101}, {ack(101), reliability.Accepted, 102}, {rnr(102), reliability.Accepted, 102}, {rnr(102), reliability.Accepted, 102}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newSender(t, 8, p)
			for i := range 5 {
				s.Admit(reliability.Entry{WQE: uint32(i)}, t0)
			}
			for i, st := range tc.steps {
				if v := st.do(s); v != st.verdict || s.Una() != st.una {
					t.Fatalf("step %d: %v, Una %d; want %v, %d", i, v, s.Una(), st.verdict, st.una)
				}
			}
			if failed, status := s.Failed(); failed != (tc.status != 0) || status != tc.status {
				t.Errorf("failed %v status %d, want %d", failed, status, tc.status)
			}
			if failed, _ := s.Failed(); failed && pool.Stats().InUse != 0 {
				t.Errorf("a failed sender holds %d entries", pool.Stats().InUse)
			}
		})
	}
}

// TestResend: a sequence NAK resends every entry from the NAKed one, in
// order, before anything new; an RNR NAK waits out its timer first.
func TestResend(t *testing.T) {
	s, _ := newSender(t, 8, reliability.Params{Timeout: 14, RetryCnt: 3, RNRRetry: 7})
	for i := range 5 {
		s.Admit(reliability.Entry{WQE: uint32(i)}, t0)
	}
	s.OnNAK(102, wire.NAKPSNSequenceError, t0)
	if s.CanSend(reliability.Data, t0) {
		t.Error("a new packet may go out before the retransmissions")
	}
	var got []uint32
	for {
		e, from, ok := s.Resend(t0)
		if !ok {
			break
		}
		if from != e.PSN {
			t.Errorf("WQE %d resent from %d, its PSN %d", e.WQE, from, e.PSN)
		}
		got = append(got, e.WQE)
		s.Resent(t0)
	}
	if len(got) != 3 || got[0] != 2 || got[2] != 4 {
		t.Errorf("resent WQEs %v, want [2 3 4]", got)
	}
	s.OnRNR(103, 3, t0) // 30 us
	if _, _, ok := s.Resend(t0); ok || !s.Waiting() || s.CanSend(reliability.Data, t0) {
		t.Fatal("an RNR NAK did not hold the sender")
	}
	if s.Tick(t0.Add(29*time.Microsecond)) != reliability.Ignored {
		t.Error("the RNR wait ended early")
	}
	if s.Tick(t0.Add(30*time.Microsecond)) != reliability.Accepted || s.Waiting() {
		t.Fatal("the RNR wait did not end at its timer")
	}
	if e, _, ok := s.Resend(t0); !ok || e.WQE != 3 {
		t.Errorf("after the RNR wait: resend %v", ok)
	}
}

// TestTimeouts: the local ACK timer goes back to Una, doubles after each
// timeout in a row (up to 16x), returns to the base after progress, and
// fails with RETRY_EXC_ERR at timeout RetryCnt+1.
func TestTimeouts(t *testing.T) {
	const retry = 5
	// Without congestion control: no probe before the timer (the probe
	// and early retransmission are TestEarlyTimerBeforeFirstSample's).
	s, pool := newSender(t, 4, reliability.Params{Timeout: 18, RetryCnt: retry, NoCongestionControl: true})
	base := reliability.AckTimeout(18) // 4.096 us x 2^18 = 1.07 s
	s.Admit(reliability.Entry{}, t0)
	s.Admit(reliability.Entry{}, t0)
	now := t0
	want := []time.Duration{base, 2 * base, 4 * base, 8 * base, 16 * base, 16 * base}
	for i := range retry {
		if d := s.Deadline().Sub(now); d != want[i] {
			t.Fatalf("timeout %d after %v, want %v", i, d, want[i])
		}
		if s.Tick(s.Deadline().Add(-time.Nanosecond)) != reliability.Ignored {
			t.Fatal("fired early")
		}
		now = s.Deadline()
		if v := s.Tick(now); v != reliability.Accepted {
			t.Fatalf("timeout %d: %v", i+1, v)
		}
		if e, _, ok := s.Resend(t0); !ok || e.PSN != 100 {
			t.Fatalf("timeout %d: no go-back to Una", i+1)
		}
		for _, _, ok := s.Resend(t0); ok; _, _, ok = s.Resend(t0) {
			s.Resent(t0)
		}
	}
	if s.OnAck(100, now) != reliability.Accepted || s.Deadline().Sub(now) != base {
		t.Fatalf("after progress the timer is %v, want %v", s.Deadline().Sub(now), base)
	}
	for i := 0; ; i++ {
		now = s.Deadline()
		if v := s.Tick(now); v == reliability.Failed {
			if i != retry {
				t.Fatalf("failed at timeout %d, want %d", i+1, retry+1)
			}
			break
		}
		if i > retry {
			t.Fatal("never failed")
		}
	}
	if _, st := s.Failed(); st != ibv.WCRetryExcErr || pool.Stats().InUse != 0 || s.Stats().Timeouts != 2*retry+1 {
		t.Errorf("status %d, in use %d, timeouts %d", st, pool.Stats().InUse, s.Stats().Timeouts)
	}
	if reliability.AckTimeout(1) != reliability.MinTimeout || reliability.AckTimeout(0) != 100*time.Millisecond {
		t.Error("AckTimeout floor or default")
	}
}

// TestReadResponses: READ responses place in order, a gap asks once for
// the rest of the READ from the gap, and a response acknowledges the
// requests before its READ.
func TestReadResponses(t *testing.T) {
	s, _ := newSender(t, 8, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 2})
	s.Admit(reliability.Entry{WQE: 0}, t0)                                  // WRITE 100
	s.Admit(reliability.Entry{WQE: 1, Kind: reliability.Read, Span: 4}, t0) // READ 101..104
	s.Admit(reliability.Entry{WQE: 2, Kind: reliability.Atomic}, t0)        // atomic 105
	if s.CanSend(reliability.Read, t0) {
		t.Error("a third READ/atomic may go out with max_rd_atomic 2")
	}
	e, k, ok := s.ReadSlot(101, t0)
	if !ok || e.WQE != 1 || k != 0 || s.Una() != 101 {
		t.Fatalf("first response: %v %d, Una %d (the WRITE before it is acknowledged)", ok, k, s.Una())
	}
	s.ReadPlaced(e, 101, false, t0)
	if _, _, ok := s.ReadSlot(103, t0); ok {
		t.Fatal("a response past a gap was placed")
	}
	if e, from, ok := s.Resend(t0); !ok || e.WQE != 1 || from != 102 {
		t.Fatalf("the gap asks again from %d (%v), want 102", from, ok)
	}
	s.Resent(t0)
	s.Resent(t0) // and the atomic after it
	if _, _, ok := s.ReadSlot(104, t0); ok {
		t.Fatal("placed past the gap")
	}
	if _, _, ok := s.Resend(t0); ok {
		t.Fatal("a second gap request before the timer")
	}
	for psn := wire.PSN(102); psn <= 104; psn++ {
		e, k, ok := s.ReadSlot(psn, t0)
		if !ok || k != uint32(psn-101) {
			t.Fatalf("response %d: %v, packet %d", psn, ok, k)
		}
		s.ReadPlaced(e, psn, psn == 104, t0)
	}
	if s.Una() != 105 {
		t.Fatalf("after the READ's last response Una %d, want 105", s.Una())
	}
	if _, _, ok := s.ReadSlot(104, t0); ok {
		t.Error("a duplicate response was placed")
	}
	if s.OnAck(105, t0); s.Una() != 105 {
		t.Error("an ACK retired an atomic without its result")
	}
	e, ok = s.AtomicSlot(105)
	if !ok {
		t.Fatal("no atomic for its ACK")
	}
	s.AtomicPlaced(e, t0)
	if s.Una() != 106 || s.Outstanding() != 0 {
		t.Errorf("after the atomic ACK Una %d, %d outstanding", s.Una(), s.Outstanding())
	}
}

// TestReadRepeatLostAgain: with go-back-N, a READ whose repeat loses a
// response too asks again as soon as the loss shows, not after the
// timer: when the repeat's first response is lost (the new stream
// begins below where the old one ended, past the gap), and when a later
// one is (a gap after the repeat came in order). The old stream's tail
// asks nothing.
func TestReadRepeatLostAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		repeat   []wire.PSN // the repeat's responses that arrive
		from     wire.PSN   // the second ask's first PSN
		restarts uint64     // of the asks, those for a repeat that began past the gap
	}{
		{"its first response lost", []wire.PSN{103, 104}, 102, 1},
		{"a later response lost", []wire.PSN{102, 103, 105, 106}, 104, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSender(t, 8, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 1})
			s.Admit(reliability.Entry{WQE: 1, Kind: reliability.Read, Span: 8}, t0) // READ 100..107
			now := t0.Add(time.Millisecond)
			arrive := func(psn wire.PSN) bool {
				t.Helper()
				e, _, ok := s.ReadSlot(psn, now)
				if ok {
					s.ReadPlaced(e, psn, psn == 107, now)
				}
				now = now.Add(10 * time.Microsecond)
				return ok
			}
			asked := func() (wire.PSN, bool) {
				t.Helper()
				e, from, ok := s.Resend(now)
				if ok {
					if e.WQE != 1 || s.ResendUntil(e) != 108 {
						t.Fatalf("asked for WQE %d up to %d, want the READ to its end 108", e.WQE, s.ResendUntil(e))
					}
					s.Resent(now)
				}
				return from, ok
			}
			for _, psn := range []wire.PSN{100, 101, 103} { // 102 lost
				arrive(psn)
			}
			if from, ok := asked(); !ok || from != 102 {
				t.Fatalf("the gap asked from %d (%v), want 102", from, ok)
			}
			for psn := wire.PSN(104); psn <= 107; psn++ { // the old stream's tail
				if arrive(psn) {
					t.Fatalf("response %d placed past the gap", psn)
				}
				if from, ok := asked(); ok {
					t.Fatalf("the old stream's response %d asked again from %d", psn, from)
				}
			}
			var from wire.PSN
			ok := false
			for _, psn := range tc.repeat {
				arrive(psn)
				if f, k := asked(); k {
					if ok {
						t.Fatalf("asked twice: from %d, then from %d", from, f)
					}
					from, ok = f, true
				}
			}
			if !ok || from != tc.from {
				t.Fatalf("the repeat's loss asked from %d (%v), want %d at once", from, ok, tc.from)
			}
			if s.Stats().Early != 0 || s.Stats().Timeouts != 0 {
				t.Errorf("timers fired: %+v", s.Stats().TransportStats)
			}
			if n := s.Stats().ReadRestarts; n != tc.restarts {
				t.Errorf("ReadRestarts %d, want %d", n, tc.restarts)
			}
			// The second repeat completes the READ.
			for psn := tc.from; psn <= 107; psn++ {
				if !arrive(psn) {
					t.Fatalf("response %d of the second repeat not placed", psn)
				}
			}
			if s.Outstanding() != 0 || s.Una() != 108 {
				t.Errorf("after the READ: %d outstanding, Una %d", s.Outstanding(), s.Una())
			}
		})
	}
}

// TestPool is a model test of the NIC-wide pool: random reservations and
// releases against a reference of which entries each QP holds; no two
// allocations ever overlap, every entry comes back, and a reservation is
// refused only when no free run is long enough.
func TestPool(t *testing.T) {
	const capacity = 256
	rng := rand.New(rand.NewPCG(3, 4))
	pool := reliability.NewPool(capacity)
	var held []reliability.Allocation
	total := 0
	for range 5000 {
		if len(held) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			total -= held[i].Len()
			pool.Release(held[i])
			held = append(held[:i], held[i+1:]...)
		} else {
			n := 1 + rng.IntN(64)
			a, err := pool.Reserve(n)
			if err != nil {
				if !errors.Is(err, reliability.ErrPoolFull) || reliability.LargestFree(capacity, held) >= n {
					t.Fatalf("%d entries refused with a free run of %d: %v", n, reliability.LargestFree(capacity, held), err)
				}
				continue
			}
			if a.Len() != n {
				t.Fatalf("reserved %d, want %d", a.Len(), n)
			}
			total += n
			held = append(held, a)
		}
		if st := pool.Stats(); st.Reserved != int64(total) || total > capacity {
			t.Fatalf("reserved %d, reference %d", st.Reserved, total)
		}
		if !reliability.Disjoint(held) {
			t.Fatal("two allocations overlap")
		}
	}
	for _, a := range held {
		pool.Release(a)
	}
	if a, err := pool.Reserve(capacity); err != nil || a.Len() != capacity {
		t.Fatalf("after every release the whole pool is not one run: %v", err)
	}
}

// TestCredits: without credits from the responder nothing waits; with
// them, packets that take a receive WQE go only while the count covers
// them, and one probe goes when none is outstanding.
func TestCredits(t *testing.T) {
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 3})
	send := func() { s.Admit(reliability.Entry{Consumes: true}, t0) }
	for range 3 {
		if !s.HasCredit() {
			t.Fatal("a SEND waited with no credit information")
		}
		send() // 100, 101, 102
	}
	s.OnAck(100, t0)
	s.OnCredits(100, wire.CreditCode(3)) // 3 free after 100: 101 and 102 take two
	if !s.HasCredit() {
		t.Fatal("a third credit was refused")
	}
	send() // 103
	if s.HasCredit() {
		t.Fatal("a SEND went beyond the credits")
	}
	s.Admit(reliability.Entry{}, t0) // a WRITE takes no WQE: it goes
	s.OnAck(104, t0)
	s.OnCredits(104, wire.CreditCode(0))
	if !s.HasCredit() {
		t.Fatal("no probe with nothing outstanding")
	}
	send() // the probe, 105
	if s.HasCredit() {
		t.Fatal("a second SEND beside the probe")
	}
	s.OnCredits(101, wire.CreditCode(16)) // stale
	if s.HasCredit() {
		t.Error("a stale ACK's credits were taken")
	}
	if s.Stats().CreditWaits != 3 {
		t.Errorf("credit waits %d, want 3", s.Stats().CreditWaits)
	}
}

// TestCNP: a congestion notification cuts the window by alpha/2 (alpha
// starting at 1, so the first cut nearly halves it), once per round
// trip however many CNPs come.
func TestCNP(t *testing.T) {
	s, _ := newSender(t, 64, reliability.Params{Timeout: 14, RetryCnt: 3})
	w0 := s.Window()
	s.OnCNP(t0)
	s.OnCNP(t0.Add(10 * time.Microsecond)) // the same round trip
	if w := s.Window(); w >= w0 || w < w0/2-1 {
		t.Errorf("window %d after a CNP, was %d", w, w0)
	}
	if s.Stats().CNPCuts != 1 {
		t.Errorf("%d cuts for two CNPs in one round trip", s.Stats().CNPCuts)
	}
	s.OnCNP(t0.Add(time.Millisecond))
	if s.Stats().CNPCuts != 2 {
		t.Errorf("%d cuts after a round trip", s.Stats().CNPCuts)
	}
}

// TestReceiverSelective: with selective repeat a packet ahead within the
// window is Ahead (placed, recorded), a copy of it AlreadyPlaced, and
// when the hole fills the expected PSN and the MSN move past every packet
// placed in order after it, leaving the next hole NAKable at once.
func TestReceiverSelective(t *testing.T) {
	var r reliability.Receiver
	r.Init(100, true)
	for _, psn := range []wire.PSN{102, 103, 105} {
		if c, _ := r.Classify(psn, t0); c != reliability.Ahead {
			t.Fatalf("PSN %d: class %v, want Ahead", psn, c)
		}
		r.Placed(psn)
	}
	if c, _ := r.Classify(103, t0); c != reliability.AlreadyPlaced {
		t.Errorf("a copy of 103: class %v", c)
	}
	if c, _ := r.Classify(100+reliability.SRWindow, t0); c != reliability.OutOfSequence {
		t.Errorf("beyond the window: class %v", c)
	}
	if c, _ := r.Classify(100, t0); c != reliability.New {
		t.Fatalf("the hole: class %v", c)
	}
	r.Executed(1, true) // 100; 101 still missing
	if r.Expected() != 101 || !r.PlacedAhead() || r.MSN() != 1 {
		t.Fatalf("after 100: expected %d, placed ahead %v, MSN %d", r.Expected(), r.PlacedAhead(), r.MSN())
	}
	r.Executed(1, true) // 101: 102 and 103 follow; 104 missing
	if r.Expected() != 104 || !r.PlacedAhead() || r.MSN() != 4 {
		t.Fatalf("after 101: expected %d, MSN %d", r.Expected(), r.MSN())
	}
	r.Executed(1, true) // 104: 105 follows
	if r.Expected() != 106 || r.PlacedAhead() || r.MSN() != 6 {
		t.Fatalf("after 104: expected %d, placed ahead %v, MSN %d", r.Expected(), r.PlacedAhead(), r.MSN())
	}
	var g reliability.Receiver
	g.Init(100, false)
	if c, _ := g.Classify(102, t0); c != reliability.OutOfSequence {
		t.Errorf("go-back-N: class %v, want OutOfSequence", c)
	}
}

// TestSelectiveResend: with selective repeat a sequence NAK resends the
// missing packet and the ones after it that the peer cannot place ahead,
// not the placeable ones.
func TestSelectiveResend(t *testing.T) {
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 3, SelectiveRepeat: true, MaxRdAtomic: 4})
	for i := range 6 {
		e := reliability.Entry{WQE: uint32(i), Placeable: i != 4} // 104: a SEND, say
		s.Admit(e, t0)
	}
	s.OnNAK(102, wire.NAKPSNSequenceError, t0)
	var got []wire.PSN
	for {
		e, from, ok := s.Resend(t0)
		if !ok {
			break
		}
		got = append(got, from)
		_ = e
		s.Resent(t0)
	}
	if len(got) != 2 || got[0] != 102 || got[1] != 104 {
		t.Errorf("resent %v, want [102 104]", got)
	}
}

// admitN sends n data packets at now, as far as the gate allows, and
// returns how many went.
func admitN(s *reliability.Sender, n int, now time.Time) int {
	k := 0
	for k < n && s.CanSend(reliability.Data, now) {
		s.Admit(reliability.Entry{WQE: uint32(k)}, now)
		k++
	}
	return k
}

// resendOver polls Resend every 10 us for span from now, as an engine
// does while the pacer spaces what it sends again, and returns the first
// PSNs sent.
func resendOver(s *reliability.Sender, now time.Time, span time.Duration) []wire.PSN {
	var psns []wire.PSN
	for at := now; !at.After(now.Add(span)); at = at.Add(10 * time.Microsecond) {
		psns = append(psns, resendAll(s, at)...)
	}
	return psns
}

// resendAll sends every pending retransmission at now and returns their
// first PSNs.
func resendAll(s *reliability.Sender, now time.Time) []wire.PSN {
	var psns []wire.PSN
	for {
		_, from, ok := s.Resend(now)
		if !ok {
			return psns
		}
		psns = append(psns, from)
		s.Resent(now)
	}
}

// TestProbe: with go-back-N, the early timer sends one probe, the oldest
// unacknowledged packet, never the window. A peer that lacked it
// acknowledges exactly the probe, and the sender goes back from there; a
// peer that had it acknowledges more, and nothing else is sent again.
func TestProbe(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ackTo    wire.PSN // the probe's answer
		wantBack []wire.PSN
	}{
		{"peer lacked the probe", 100, []wire.PSN{101, 102, 103}},
		{"peer had it; the tail was lost", 102, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSender(t, 16, reliability.Params{Timeout: 20, RetryCnt: 3})
			// One packet answered gives the round-trip estimate.
			now := t0
			if admitN(s, 1, now) != 1 || s.OnAck(100, now.Add(time.Millisecond)) != reliability.Accepted {
				t.Fatal("first packet")
			}
			now = now.Add(time.Millisecond)
			for k := range 4 { // at once, past the pacer: the probe is what is tested
				s.Admit(reliability.Entry{WQE: uint32(k)}, now)
			}
			// Nothing comes back: the early timer, long before the local
			// ACK timeout (4.3 s), sends one probe.
			d := s.Deadline()
			if d.Sub(now) > 20*time.Millisecond {
				t.Fatalf("early timer in %v", d.Sub(now))
			}
			if v := s.Tick(d); v != reliability.Accepted {
				t.Fatalf("tick: %v", v)
			}
			if got := resendAll(s, d); len(got) != 1 || got[0] != 101 {
				t.Fatalf("probe sent %v, want [101] alone", got)
			}
			ack := tc.ackTo + 1 // PSNs 101.. are the four packets
			s.OnAck(ack, d.Add(time.Millisecond))
			got := resendOver(s, d.Add(time.Millisecond), 5*time.Millisecond) // the pacer spaces them
			want := tc.wantBack
			for i := range want {
				want[i]++
			}
			if len(got) != len(want) {
				t.Fatalf("after the ACK of %d resent %v, want %v", ack, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("after the ACK of %d resent %v, want %v", ack, got, want)
				}
			}
			if st := s.Stats(); st.Probes != 1 || st.Timeouts != 0 {
				t.Errorf("probes %d, timeouts %d; want 1, 0", st.Probes, st.Timeouts)
			}
		})
	}
}

// TestDelayWindow: a round trip above the path's minimum by more than the
// target delay shrinks the congestion window (at most once a round trip)
// before any loss; without congestion control the allocation alone gates.
func TestDelayWindow(t *testing.T) {
	for _, delay := range []bool{true, false} {
		s, _ := newSender(t, 256, reliability.Params{Timeout: 20, RetryCnt: 3, Delay: map[bool]reliability.DelayRule{true: reliability.DelayOn, false: reliability.DelayOff}[delay]})
		cuts, open, w := delayRun(t, s)
		if delay && (w >= open || cuts < 1 || cuts > 4) {
			t.Errorf("delay rule: window %d after four 2 ms round trips (minimum 1 ms), was %d, %d cuts: want 1 to 4 cuts (at most one a round trip)", w, open, cuts)
		}
		if !delay && (w < open || cuts != 0) {
			t.Errorf("no delay rule: window %d after four 2 ms round trips, was %d, %d cuts: want no cut", w, open, cuts)
		}
		if st := s.Stats(); st.Cuts != 0 {
			t.Errorf("loss cuts %d without a loss", st.Cuts)
		}
	}

	u, _ := newSender(t, 64, reliability.Params{Timeout: 20, RetryCnt: 3, NoCongestionControl: true})
	if k := admitN(u, 100, t0); k != 64 {
		t.Errorf("without congestion control %d packets went, want the allocation's 64", k)
	}
}

// delayRun opens s's window with five 1 ms round trips, then has one take
// 2 ms; it returns the delay cuts, the window before and after.
func delayRun(t *testing.T, s *reliability.Sender) (cuts uint64, open, after int) {
	now := t0
	psn := wire.PSN(100)
	// Round trips of 1 ms open the window in slow start.
	for range 5 {
		k := admitN(s, 256, now)
		now = now.Add(time.Millisecond)
		psn = psn.Add(uint32(k))
		s.OnAck(psn.Sub(1), now)
	}
	open = s.Window()
	if open < 16 {
		t.Fatalf("window %d after five clean round trips", open)
	}
	// Now the answers take 2 ms, round trip after round trip: a queue
	// stands.
	for range 4 {
		k := admitN(s, 256, now)
		now = now.Add(2 * time.Millisecond)
		psn = psn.Add(uint32(k))
		s.OnAck(psn.Sub(1), now)
	}
	return s.Stats().DelayCuts, open, s.Window()
}

// TestTimeoutRestartsPacing: a large READ's responses are paced as they
// come (the request spends the pacing clock for all of them); when they
// stop coming and the timer fires, the READ is asked for again at once,
// not after the pacing debt of responses that never came.
func TestTimeoutRestartsPacing(t *testing.T) {
	s, _ := newSender(t, 64, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 4})
	now := t0
	for range 8 { // round trips of 10 ms: pacing on
		g := s.Send(reliability.Entry{}, now)
		if g.Hold != reliability.Go {
			t.Fatalf("data held: %v", g.Hold)
		}
		now = now.Add(10 * time.Millisecond)
		s.OnAck(g.PSN, now)
	}
	read := s.Send(reliability.Entry{WQE: 9, Kind: reliability.Read, Span: 1024}, now)
	if read.Hold != reliability.Go {
		t.Fatalf("READ held: %v", read.Hold)
	}
	at := s.Deadline()
	if v := s.Tick(at); v != reliability.Accepted {
		t.Fatalf("timeout: %v", v)
	}
	if e, from, ok := s.Resend(at); !ok || e.WQE != 9 || from != read.PSN {
		t.Fatalf("at the timeout the READ is not asked for again (%v, from %d, want %d)", ok, from, read.PSN)
	}
}

// TestReadRoundTrip: a READ's round trip is the time to its first
// response; the time its responses take to come, its transfer, is not
// queueing (an estimate that took it in would slow every READ after a
// long one: the pacer spaces requests by the round trip).
func TestReadRoundTrip(t *testing.T) {
	s, _ := newSender(t, 8, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 4})
	g := s.Send(reliability.Entry{WQE: 1, Kind: reliability.Read, Span: 256}, t0)
	if g.Hold != reliability.Go {
		t.Fatalf("READ held: %v", g.Hold)
	}
	now := t0.Add(50 * time.Microsecond)
	for i := range uint32(256) {
		e, _, ok := s.ReadSlot(g.PSN.Add(i), now)
		if !ok {
			t.Fatalf("response %d not placed", i)
		}
		s.ReadPlaced(e, g.PSN.Add(i), i == 255, now)
		now = now.Add(10 * time.Microsecond) // 2.5 ms for the whole READ
	}
	if s.Outstanding() != 0 {
		t.Fatal("the READ is not retired")
	}
	if rtt := s.RTT(); rtt != 50*time.Microsecond {
		t.Errorf("round trip %v, want the 50us to the first response", rtt)
	}
}

// TestProbeWaitsForTheSlowestAnswer: a peer that once took 30 ms to
// answer (starved of CPU) may again; the probe waits for twice that
// before it sends what may not be lost, where a path of 1 ms round trips
// alone would probe after 20 ms.
func TestProbeWaitsForTheSlowestAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		slow    time.Duration // the one slow answer
		atLeast time.Duration // the early timer's least wait after it
	}{
		{"round trips of 1 ms", time.Millisecond, 20 * time.Millisecond},
		{"one answer after 30 ms", 30 * time.Millisecond, 59 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSender(t, 16, reliability.Params{Timeout: 20, RetryCnt: 3})
			now := t0
			for i := range 8 {
				rtt := time.Millisecond
				if i == 7 {
					rtt = tc.slow
				}
				if admitN(s, 1, now) != 1 || s.OnAck(wire.PSN(100+i), now.Add(rtt)) != reliability.Accepted {
					t.Fatalf("packet %d", i)
				}
				now = now.Add(rtt)
			}
			if admitN(s, 1, now) != 1 {
				t.Fatal("last packet")
			}
			wait := s.Deadline().Sub(now)
			if wait < tc.atLeast || wait > 100*time.Millisecond {
				t.Fatalf("early timer in %v, want %v to 100ms", wait, tc.atLeast)
			}
			if v := s.Tick(now.Add(tc.atLeast - time.Millisecond)); v != reliability.Ignored {
				t.Fatalf("tick before it: %v", v)
			}
		})
	}
}

// TestProbeWaitsForThePath: QPs that share a path (an engine's PathRTT)
// wait beyond the longest answer any of them has had lately: a QP with
// fast answers of its own, beside one that waited 30 ms, probes no sooner
// than 60 ms; after the path forgets (half a PathRTTDecay at a time), it
// is back to its own.
func TestProbeWaitsForThePath(t *testing.T) {
	var path reliability.PathRTT
	slow, _ := newSender(t, 16, reliability.Params{Timeout: 20, RetryCnt: 3, Path: &path})
	fast, _ := newSender(t, 16, reliability.Params{Timeout: 20, RetryCnt: 3, Path: &path})
	now := t0
	if admitN(slow, 1, now) != 1 || slow.OnAck(wire.PSN(100), now.Add(30*time.Millisecond)) != reliability.Accepted {
		t.Fatal("the slow QP's packet")
	}
	for i := range 8 {
		if admitN(fast, 1, now) != 1 || fast.OnAck(wire.PSN(100+i), now.Add(time.Millisecond)) != reliability.Accepted {
			t.Fatalf("packet %d", i)
		}
		now = now.Add(time.Millisecond)
	}
	if admitN(fast, 1, now) != 1 {
		t.Fatal("last packet")
	}
	if wait := fast.Deadline().Sub(now); wait < 59*time.Millisecond {
		t.Errorf("early timer in %v beside a 30 ms answer on the path, want at least 59ms", wait)
	}
	if v := fast.Tick(now.Add(55 * time.Millisecond)); v != reliability.Ignored {
		t.Errorf("tick at 55 ms: %v", v)
	}
	if got := path.Max(now.Add(5 * reliability.PathRTTDecay)); got >= 2*time.Millisecond {
		t.Errorf("after 5 decays the path's longest round trip is %v, want below 2 ms (30 ms halved five times)", got)
	}
	var none *reliability.PathRTT
	if none.Max(now) != 0 {
		t.Error("a nil path has a round trip")
	}
}

// TestReadHolesAskedAtOnce: with selective repeat, each gap in a READ's
// responses is asked for as soon as a response beyond it shows it, by a
// request for exactly the missing range; a second gap seen while the
// first is being asked for follows it, and the early timer asks for the
// holes the responses left, not the whole READ again.
func TestReadHolesAskedAtOnce(t *testing.T) {
	s, _ := newSender(t, 8, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 4, SelectiveRepeat: true})
	g := s.Send(reliability.Entry{WQE: 1, Kind: reliability.Read, Span: 16}, t0)
	if g.Hold != reliability.Go {
		t.Fatalf("READ held: %v", g.Hold)
	}
	now := t0.Add(50 * time.Microsecond)
	place := func(i uint32) {
		t.Helper()
		e, _, ok := s.ReadSlot(g.PSN.Add(i), now)
		if !ok {
			t.Fatalf("response %d not placed", i)
		}
		s.ReadPlaced(e, g.PSN.Add(i), i == 15, now)
	}
	ask := func(from, until uint32) {
		t.Helper()
		e, f, ok := s.Resend(now)
		if !ok || f != g.PSN.Add(from) || s.ResendUntil(e) != g.PSN.Add(until) {
			t.Fatalf("asked for (%v) [%d, %d), want [%d, %d)", ok, f.Diff(g.PSN), s.ResendUntil(e).Diff(g.PSN), from, until)
		}
		s.Resent(now)
	}
	for _, i := range []uint32{0, 1, 3, 4} { // 2 lost
		place(i)
	}
	for _, i := range []uint32{7, 8} { // 5 and 6 lost, seen before the first hole's request went
		place(i)
	}
	ask(2, 3)
	ask(5, 7)
	if _, _, ok := s.Resend(now); ok {
		t.Fatal("asked for more than the holes")
	}
	for _, i := range []uint32{9, 10, 11} { // 12 lost, and the re-asked 2 and 5 lost too
		place(i)
	}
	place(13)
	ask(12, 13)
	place(6)
	now = s.Deadline() // the early timer, before the ACK timeout
	if s.Tick(now) != reliability.Accepted {
		t.Fatal("early timer did not fire")
	}
	ask(2, 3)
	ask(5, 6)
	ask(12, 13) // its answer has not come either
	ask(14, 16) // the READ's tail: the last two never came
	if _, _, ok := s.Resend(now); ok {
		t.Fatal("the early timer asked for more than the holes and the tail")
	}
	for _, i := range []uint32{2, 5, 12, 14, 15} {
		place(i)
	}
	if s.Outstanding() != 0 {
		t.Fatal("the READ is not retired")
	}
}

// A QP with no round-trip sample of its own arms its early timer on the
// round trip its path's QPs have seen (in an incast a QP whose first
// packets were all dropped would else wait for the local ACK timeout),
// or, before any, on firstRTT with selective repeat and on a long first
// guess with go-back-N, whose probe then goes after 150 ms instead of the
// local ACK timeout (2.1 s as rdma_cm sets it: a connection's first
// message lost, or its ACK, cost that much over a lossy path).
func TestEarlyTimerBeforeFirstSample(t *testing.T) {
	var path reliability.PathRTT
	path.Sample(2*time.Millisecond, t0)
	for _, c := range []struct {
		sr   bool
		path *reliability.PathRTT
		want time.Duration
		why  string
	}{
		{true, &path, 4 * time.Millisecond, "the path's 2 ms + 4 x 0.5 ms"},
		{false, &path, 20 * time.Millisecond, "the least probe wait, over 2 x 2 ms + 4 x 0.5 ms"},
		{true, nil, 3 * time.Millisecond, "firstRTT 1 ms + 4 x 0.5 ms"},
		{false, nil, 150 * time.Millisecond, "2 x 50 ms + 4 x 12.5 ms"},
	} {
		s, _ := newSender(t, 16, reliability.Params{Timeout: 19, RetryCnt: 7, SelectiveRepeat: c.sr, Path: c.path})
		if g := s.Send(reliability.Entry{Kind: reliability.Data, AckReq: true}, t0); g.Hold != reliability.Go {
			t.Fatal(g.Hold)
		}
		if wait := s.Deadline().Sub(t0); wait != c.want {
			t.Errorf("selective repeat %v, path sampled %v: the first packet's timer in %v, want %v (%s)", c.sr, c.path != nil, wait, c.want, c.why)
		}
		if c.sr {
			continue
		}
		// Go-back-N: the timer sends a probe (the oldest packet alone), not
		// a timeout, and the local ACK timeout stays armed behind it.
		now := s.Deadline()
		if s.Tick(now) != reliability.Accepted || s.Stats().Probes != 1 || s.Stats().Timeouts != 0 {
			t.Errorf("path sampled %v: the timer at %v did not send a probe (probes %d, timeouts %d)", c.path != nil, now.Sub(t0), s.Stats().Probes, s.Stats().Timeouts)
		}
		if e, _, ok := s.Resend(now); !ok || e.PSN != s.Una() {
			t.Errorf("path sampled %v: the probe is not the oldest packet", c.path != nil)
		}
	}
}

// Karn's rule for cumulative ACKs: with selective repeat, an ACK that
// covers a packet sent again is no round-trip sample, not even of the
// packets placed ahead after it, which waited for the repair.
func TestNoSampleFromAnAckOverARepair(t *testing.T) {
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true})
	place := reliability.Entry{Kind: reliability.Data, Placeable: true, AckReq: true}
	s.Admit(place, t0) // PSN 100
	s.OnAck(100, t0.Add(200*time.Microsecond))
	if s.RTT() != 200*time.Microsecond {
		t.Fatalf("first sample: srtt %v", s.RTT())
	}
	at := t0.Add(time.Millisecond)
	for range 4 { // 101-104; 101 is lost, the rest placed ahead
		s.Admit(place, at)
	}
	s.OnNAK(101, wire.NAKPSNSequenceError, at.Add(200*time.Microsecond))
	if e, _, ok := s.Resend(at.Add(200 * time.Microsecond)); !ok || e.PSN != 101 {
		t.Fatalf("the repair: %v %v", e, ok)
	}
	s.Resent(at.Add(200 * time.Microsecond))
	late := at.Add(50 * time.Millisecond) // the repair took long
	s.OnAck(104, late)
	if s.RTT() != 200*time.Microsecond {
		t.Errorf("an ACK over a repair moved srtt to %v", s.RTT())
	}
}

// TestFirstSampleOverAResendIsNoLeastRTT: before any round-trip sample,
// an ACK over packets sent again gives the timers an estimate (timed
// from the resending, a bound from below), but not the least round
// trip: when the early timer went before the first ACKs (a peer late at
// the start), that ACK answers the first sending and comes just after
// the resend, and taken as the path's round trip it would size the
// window's caps (the BDP cap, the delivery-rate cap, the pacing below a
// packet) to a fraction of the path.
func TestFirstSampleOverAResendIsNoLeastRTT(t *testing.T) {
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true})
	place := reliability.Entry{Kind: reliability.Data, Placeable: true, AckReq: true}
	for range 4 { // 100-103
		if g := s.Send(place, t0); g.Hold != reliability.Go {
			t.Fatal(g.Hold)
		}
	}
	early := s.Deadline()
	if s.Tick(early) != reliability.Accepted {
		t.Fatal("the early timer did nothing")
	}
	for {
		if _, _, ok := s.Resend(early); !ok {
			break
		}
		s.Resent(early)
	}
	if st := s.Stats(); st.Retransmitted == 0 {
		t.Fatal("nothing sent again")
	}
	s.OnAck(103, early.Add(15*time.Microsecond)) // the first sending's ACK
	if s.RTT() == 0 {
		t.Error("no estimate for the timers after the first ACK")
	}
	if m := s.MinRTT(); m != 0 {
		t.Errorf("the least round trip is %v after an ACK over packets sent again (the path's is %v or more)", m, early.Sub(t0))
	}
	at := early.Add(time.Millisecond)
	s.Send(place, at) // 104
	s.OnAck(104, at.Add(time.Millisecond))
	if m := s.MinRTT(); m != time.Millisecond {
		t.Errorf("the least round trip is %v after a clean sample of 1 ms", m)
	}
}

// TestSelectiveReportsResendEveryHole: with selective repeat the peer
// NAKs each packet it places ahead, naming it (OnPlaced): the sender
// counts those out of flight, sends every hole they show again at once
// (not one hole a round trip), sends nothing again for a NAK that
// comes while the repair is on its way, and sends the hole again when a
// NAK still names it a round trip after its repair went (the repair was
// lost).
func TestSelectiveReportsResendEveryHole(t *testing.T) {
	s, _ := newSender(t, 32, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true})
	place := reliability.Entry{Kind: reliability.Data, Placeable: true, AckReq: true}
	s.Admit(place, t0) // PSN 100
	rtt := 200 * time.Microsecond
	s.OnAck(100, t0.Add(rtt))
	at := t0.Add(time.Millisecond)
	for range 10 { // 101-110: 102 and 105 are lost
		s.Admit(reliability.Entry{Kind: reliability.Data, Placeable: true}, at)
	}
	inFlight := s.InFlight()
	nak := func(trigger wire.PSN, now time.Time) []wire.PSN {
		s.OnPlaced(102, trigger, now)
		if v := s.OnNAK(102, wire.NAKPSNSequenceError, now); v != reliability.Accepted {
			t.Fatalf("NAK naming %d: %v", trigger, v)
		}
		return resendAll(s, now)
	}
	now := at.Add(rtt)
	var sent []wire.PSN
	// The NAKs come a packet's time apart (pacing spaces the repairs as
	// it spaces new packets); the first acknowledges 101, the one naming
	// 106 shows 105 lost.
	for _, psn := range []wire.PSN{103, 104, 106, 107, 108, 109, 110} {
		now = now.Add(40 * time.Microsecond)
		sent = append(sent, nak(psn, now)...)
	}
	if fmt.Sprint(sent) != "[102 105]" {
		t.Errorf("sent again %v, want [102 105]: each hole once", sent)
	}
	if got, want := s.InFlight(), inFlight-1-7; got != want {
		t.Errorf("in flight %d, want %d (101 acknowledged, 7 placed ahead)", got, want)
	}
	repaired := at.Add(rtt + 40*time.Microsecond) // 102 went again with the first NAK
	if again := nak(110, repaired.Add(rtt)); len(again) != 0 {
		t.Errorf("a NAK within a round trip of the repair sent %v again", again)
	}
	now = repaired.Add(3 * rtt)
	if again := nak(110, now); fmt.Sprint(again) != "[102 105]" {
		t.Errorf("a NAK a round trip and more after the repair sent %v again, want [102 105]", again)
	}
	s.OnAck(110, now.Add(3*rtt))
	if s.Outstanding() != 0 || s.InFlight() != 0 {
		t.Errorf("after the ACK: %d outstanding, %d in flight", s.Outstanding(), s.InFlight())
	}
}

// TestReadHoleAskedAgainWithoutTheTimer: with selective repeat, a READ
// hole asked for whose answer was lost too is asked for again as soon
// as responses keep coming past it a round trip (and a quarter) after
// the ask, and the early timer for it waits about a round trip, not the
// longest round trip seen; asking for a hole cuts no window (a random
// loss, as IRN's sender takes it).
func TestReadHoleAskedAgainWithoutTheTimer(t *testing.T) {
	s, _ := newSender(t, 32, reliability.Params{Timeout: 14, RetryCnt: 3, MaxRdAtomic: 16, SelectiveRepeat: true})
	rtt := 200 * time.Microsecond
	now := t0
	for range 5 { // slow start opens the window: round trips of 200 us
		var last wire.PSN
		sent, end := now, now.Add(rtt)
		for {
			g := s.Send(reliability.Entry{Kind: reliability.Data, Placeable: true}, now)
			if g.Hold == reliability.HoldPacing && g.Until.Before(end) {
				now = g.Until // the pacer spreads the round's packets
				continue
			}
			if g.Hold != reliability.Go {
				break
			}
			last, sent = g.PSN, now
		}
		now = sent.Add(rtt)
		s.OnAck(last, now)
	}
	now = now.Add(time.Millisecond)
	var reads []wire.PSN
	for i := range 4 {
		g := s.Send(reliability.Entry{WQE: uint32(1 + i), Kind: reliability.Read, Span: 3}, now)
		if g.Hold == reliability.HoldPacing {
			now = g.Until
			g = s.Send(reliability.Entry{WQE: uint32(1 + i), Kind: reliability.Read, Span: 3}, now)
		}
		if g.Hold != reliability.Go {
			t.Fatalf("READ %d held: %v", i, g.Hold)
		}
		reads = append(reads, g.PSN)
	}
	window := s.Window()
	place := func(psn wire.PSN) {
		t.Helper()
		e, _, ok := s.ReadSlot(psn, now)
		if !ok {
			t.Fatalf("response %d not placed", psn)
		}
		s.ReadPlaced(e, psn, psn == e.PSN.Add(e.Span-1), now)
	}
	now = now.Add(rtt)
	for i := range uint32(3) {
		if i != 1 { // lost
			place(reads[0].Add(i))
		}
		now = now.Add(10 * time.Microsecond)
	}
	hole := []wire.PSN{reads[0].Add(1)}
	if got := resendAll(s, now); fmt.Sprint(got) != fmt.Sprint(hole) {
		t.Fatalf("asked for %v, want the hole %v", got, hole)
	}
	if s.Window() < window {
		t.Errorf("the window went from %d to %d for a READ hole", window, s.Window())
	}
	asked := now
	if early := s.Deadline(); early.Sub(asked) > 2*time.Millisecond {
		t.Errorf("the early timer waits %v after the ask", early.Sub(asked))
	}
	// The hole's answer is lost; the next READs' responses keep coming.
	for i := range uint32(9) {
		place(reads[1].Add(i))
		now = now.Add(40 * time.Microsecond)
		if got := resendAll(s, now); len(got) > 0 {
			if now.Sub(asked) < rtt+rtt/4 || fmt.Sprint(got) != fmt.Sprint(hole) {
				t.Fatalf("%v after the ask: asked for %v", now.Sub(asked), got)
			}
			if s.Stats().HolesAskedAgain != 1 || s.Stats().Early != 0 {
				t.Errorf("holes asked again %d, early timers %d", s.Stats().HolesAskedAgain, s.Stats().Early)
			}
			return
		}
	}
	t.Fatal("the hole was not asked for again while responses came past it")
}

// TestIncastQPRecoversWithoutASample: a selective-repeat QP whose first
// packet is lost before any QP on its path has a round trip (an incast's
// first burst, into a full queue) sends it again after firstRTT's 3 ms,
// not after the local ACK timeout, and takes the repair's round trip as
// its first sample (every ACK it gets covers a packet sent again).
func TestIncastQPRecoversWithoutASample(t *testing.T) {
	var path reliability.PathRTT
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true, Path: &path})
	if g := s.Send(reliability.Entry{Kind: reliability.Data, Placeable: true, AckReq: true}, t0); g.Hold != reliability.Go {
		t.Fatal(g.Hold)
	}
	if wait, want := s.Deadline().Sub(t0), 3*time.Millisecond; wait != want {
		t.Fatalf("the first packet's timer in %v, want %v (the local ACK timeout is %v)", wait, want, reliability.AckTimeout(14))
	}
	at := s.Deadline()
	if v := s.Tick(at); v != reliability.Accepted {
		t.Fatalf("the early timer: %v", v)
	}
	if e, _, ok := s.Resend(at); !ok || e.PSN != 100 {
		t.Fatalf("the repair: %v %v", e, ok)
	}
	s.Resent(at)
	s.OnAck(100, at.Add(400*time.Microsecond))
	if s.RTT() != 400*time.Microsecond {
		t.Errorf("srtt %v after the repair's ACK, want its 400µs", s.RTT())
	}
}

// TestFewInFlightTimerOnItsOwnRoundTrip: with selective repeat and three
// packets or fewer in flight, the early timer waits on the QP's own round
// trip (at least minEarly), not on the longest round trip its path has
// seen (IRN's RTO_low): a QP paced to a packet a round trip loses a
// millisecond to a loss, not the path's worst.
func TestFewInFlightTimerOnItsOwnRoundTrip(t *testing.T) {
	var path reliability.PathRTT
	path.Sample(10*time.Millisecond, t0) // a queue once stood
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, time.Millisecond},
		{3, time.Millisecond},
		{8, 12500 * time.Microsecond}, // 1.25 x the path's longest
	} {
		s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true, Path: &path})
		for range tc.n + 1 {
			s.Admit(reliability.Entry{Kind: reliability.Data, Placeable: true, AckReq: true}, t0)
		}
		now := t0.Add(200 * time.Microsecond)
		s.OnAck(100, now) // the timer is armed again, n in flight
		if s.InFlight() != tc.n {
			t.Fatalf("%d in flight, want %d", s.InFlight(), tc.n)
		}
		if got := s.Deadline().Sub(now); got != tc.want {
			t.Errorf("%d in flight: the early timer in %v, want %v", tc.n, got, tc.want)
		}
	}
}

// TestDelayRuleOffOnECNPaths: DelayAuto applies the delay rule on a long
// path (a minimum round trip of 1 ms) until the QP's first CNP: a path
// that marks ECN has its queue told by the marks, and the two rules
// would cut at once for one queue.
func TestDelayRuleOffOnECNPaths(t *testing.T) {
	for _, cnp := range []bool{false, true} {
		s, _ := newSender(t, 256, reliability.Params{Timeout: 20, RetryCnt: 3})
		now := t0
		psn := wire.PSN(100)
		round := func(rtt time.Duration) {
			k := admitN(s, 256, now)
			now = now.Add(rtt)
			psn = psn.Add(uint32(k))
			s.OnAck(psn.Sub(1), now)
		}
		for range 5 {
			round(time.Millisecond)
		}
		if cnp {
			s.OnCNP(now)
		}
		for range 4 { // a queue stands: the answers take 2 ms
			round(2 * time.Millisecond)
		}
		cuts := s.Stats().DelayCuts
		if !cnp && cuts == 0 {
			t.Error("no CNP: the delay rule did not cut for a round trip twice the minimum")
		}
		if cnp && cuts != 0 {
			t.Errorf("after a CNP: %d delay cuts, want none", cuts)
		}
	}
}

// A sequence NAK of the next PSN (a go-back-N receiver's idle probe)
// acknowledges everything sent and asks for nothing: with packets
// outstanding they are retired, none sent again; with none it is ignored,
// not counted stale.
func TestNAKOfNextPSN(t *testing.T) {
	s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7})
	s.Admit(reliability.Entry{Kind: reliability.Data, AckReq: true}, t0) // PSN 100
	s.Admit(reliability.Entry{Kind: reliability.Data, AckReq: true}, t0) // 101
	if v := s.OnAETH(102, wire.NAKSyndrome(wire.NAKPSNSequenceError), t0); v != reliability.Accepted {
		t.Fatalf("the NAK of the next PSN: %v, want Accepted", v)
	}
	if s.Outstanding() != 0 || s.Resending() {
		t.Fatalf("%d outstanding, resending %v: want every packet acknowledged, none sent again", s.Outstanding(), s.Resending())
	}
	if v := s.OnAETH(102, wire.NAKSyndrome(wire.NAKPSNSequenceError), t0); v != reliability.Ignored || s.Stats().Stale != 0 {
		t.Fatalf("with nothing outstanding: %v, %d stale; want Ignored and none", v, s.Stats().Stale)
	}
}

// TestRepairShowsTheFlightLost: with selective repeat, when the peer
// acknowledges a packet the early timer sent again and nothing beyond
// it, the packets sent before that repair and still unacknowledged are
// lost too (RACK's rule): they all go again at once, not one per early
// timer. Packets sent after the repair wait for their own answers, and
// packets the peer reported placed are not sent again.
func TestRepairShowsTheFlightLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		placed []wire.PSN    // reported placed ahead (a NAK's trigger) before the timer
		after  int           // packets sent after the repair
		ack    time.Duration // when the ACK of 101 comes after the repair (0: the round trip, 200 us)
		want   []wire.PSN    // sent again after the timer's repair of 101
	}{
		{"the whole flight lost", nil, 0, 0, []wire.PSN{102, 103, 104, 105, 106}},
		{"one placed ahead", []wire.PSN{106}, 0, 0, []wire.PSN{102, 103, 104, 105}},
		{"packets sent after the repair wait", nil, 3, 0, []wire.PSN{102, 103, 104, 105, 106}},
		// Sooner than a round trip: the original's ACK (a queue held the
		// flight), and the rest of the flight is on its way too.
		{"the original's ACK", nil, 0, 50 * time.Microsecond, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSender(t, 16, reliability.Params{Timeout: 14, RetryCnt: 7, SelectiveRepeat: true})
			// A first exchange gives the QP its round trip, 200 us.
			s.Admit(reliability.Entry{Placeable: true, AckReq: true}, t0)
			s.OnAck(100, t0.Add(200*time.Microsecond))
			sent := t0.Add(time.Millisecond)
			for range 6 { // 101-106: a full queue drops them all
				s.Admit(reliability.Entry{Placeable: true}, sent)
			}
			for _, p := range tc.placed {
				s.OnPlaced(101, p, sent.Add(200*time.Microsecond))
			}
			at := s.Deadline()
			if at.IsZero() {
				t.Fatal("no early timer")
			}
			if v := s.Tick(at); v != reliability.Accepted {
				t.Fatalf("the early timer: %v", v)
			}
			// The repair: 101 alone, or with the ones below the highest
			// the peer reported placed (the window lets two go).
			repair := resendAll(s, at)
			if len(repair) == 0 || repair[0] != 101 {
				t.Fatalf("the timer's repair sent %v, want 101 first", repair)
			}
			for range tc.after {
				s.Admit(reliability.Entry{Placeable: true}, at.Add(10*time.Microsecond))
			}
			// The repair came, and nothing sent before it had: those go
			// as the window lets them, each answered a round trip later,
			// and no timer fires.
			now := at.Add(cmp.Or(tc.ack, 200*time.Microsecond))
			s.OnAck(101, now)
			got := repair[1:]
			for range 10 {
				psns := resendAll(s, now)
				got = append(got, psns...)
				if len(psns) == 0 {
					break
				}
				now = now.Add(200 * time.Microsecond)
				for _, p := range psns {
					s.OnPlaced(s.Una().Sub(1), p, now)
				}
				if s.Una() == psns[0] {
					s.OnAck(psns[0], now)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("after the repair's ACK sent again %v, want %v", got, tc.want)
			}
			if early := s.Stats().Early; early != 1 {
				t.Errorf("%d early timers, want the first alone", early)
			}
			// With a report of 106 the repair itself covered 102-105:
			// nothing was found lost behind it.
			if n := s.Stats().LostBehind; (n > 0) != (len(tc.placed) == 0 && tc.ack == 0) {
				t.Errorf("LostBehind %d", n)
			}
		})
	}
}
