package reliability

import (
	"testing"
	"time"
)

// The controllers on their own: the window's cuts and growth, the
// round-trip estimate, the pacer's spacing.
func TestCongestion(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCongestion(256)
	if c.window() != initialWindow {
		t.Fatalf("initial window %d", c.window())
	}
	c.onAcked(60, time.Time{}, 0) // slow start: one per packet
	if c.window() != 64 {
		t.Fatalf("after 60 acknowledged in slow start: %d, want 64", c.window())
	}
	if !c.onLoss(10, 100) || c.window() != 32 {
		t.Fatalf("a loss: window %d, want 32", c.window())
	}
	if c.onLoss(50, 120) || c.window() != 32 {
		t.Errorf("a second loss among the same packets cut again: %d", c.window())
	}
	if !c.onLoss(100, 140) || c.window() != 16 {
		t.Errorf("a loss of a packet sent after the cut: window %d, want 16", c.window())
	}
	c.onAcked(17, time.Time{}, 0) // congestion avoidance: about one per window
	if w := c.cwnd; w < 17 || w > 17.1 {
		t.Errorf("a window acknowledged above ssthresh: %.2f, want 17-17.1", w)
	}
	if c.window() != 18 {
		t.Errorf("a window of %.2f packets lets %d in flight, want 18 (paced at %.2f)", c.cwnd, c.window(), c.paceWindow())
	}
	srtt := 100 * time.Microsecond
	if !c.onCNP(now, srtt) || c.window() >= 17 {
		t.Errorf("a CNP did not cut: %d", c.window())
	}
	w := c.window()
	if c.onCNP(now.Add(srtt/2), srtt) || c.window() != w {
		t.Errorf("a second CNP within a round trip cut again")
	}
	c.decay(now.Add(2*srtt), srtt) // the round trip of the CNPs ends
	a := c.alpha
	c.decay(now.Add(4*srtt), srtt)
	if c.alpha != a {
		t.Errorf("alpha moved after a round trip in which nothing came back: %.3f, was %.3f", c.alpha, a)
	}
	c.onAcked(1, now.Add(5*srtt), srtt)
	c.decay(now.Add(6*srtt), srtt)
	if c.alpha >= a {
		t.Errorf("alpha did not decay after a round trip of ACKs without CNPs")
	}

	var r rttStats
	if r.update(0) {
		t.Error("a zero sample was taken")
	}
	r.update(100 * time.Microsecond)
	r.update(300 * time.Microsecond)
	if r.min != 100*time.Microsecond || r.srtt != 125*time.Microsecond {
		t.Errorf("min %v srtt %v, want 100us and 125us (7/8 old + 1/8 new)", r.min, r.srtt)
	}
	for range 30 { // a standing queue: the delay rule cuts, once a round trip
		r.update(2 * time.Millisecond)
	}
	c2 := newCongestion(256)
	c2.onAcked(60, time.Time{}, 0)
	if exit, cut := c2.onDelay(&r, now); !exit || !cut || c2.window() >= 64 {
		t.Errorf("a round trip far above its minimum: exit %v cut %v window %d", exit, cut, c2.window())
	}
	w = c2.window()
	if _, cut := c2.onDelay(&r, now.Add(time.Microsecond)); cut || c2.window() != w {
		t.Errorf("the delay rule cut twice within a round trip")
	}

	var p pacer
	p.spend(now, 1, 0, 10, paceGain, false)
	if p.holds(now) {
		t.Error("pacing before a round-trip sample")
	}
	for range paceBurst + 1 {
		p.spend(now, 1, srtt, 10, paceGain, false) // a gap of 10 us
	}
	if !p.holds(now) || p.holds(now.Add(srtt)) {
		t.Errorf("after a burst: holds now %v, a round trip later %v; want true, false", p.holds(now), p.holds(now.Add(srtt)))
	}
}

// TestCNPAlphaFollowsTheMarkedShare: the window's alpha follows the share
// of each round trip's packets the path marked, as the CNPs (one per
// CNPInterval at most, and only for a marked packet) tell it: a path that
// marks all the time halves the window each round trip, whether the QP's
// packets come faster than the CNPs can or one every 100 us; one that
// marks a twentieth of the time cuts it by a few percent.
func TestCNPAlphaFollowsTheMarkedShare(t *testing.T) {
	rtt := time.Millisecond
	for _, tc := range []struct {
		every      time.Duration // a CNP every
		packet     time.Duration // a burst of packets sent and acknowledged every
		burst      int           // packets 5 us apart in a burst
		lo, hi     float64       // alpha after 200 round trips
		cutAtLeast float64       // the last cut's share of the window
		cutAtMost  float64
	}{
		{CNPInterval, 10 * time.Microsecond, 1, 0.9, 1, 0.45, 0.5},
		{100 * time.Microsecond, 100 * time.Microsecond, 1, 0.9, 1, 0.45, 0.5},
		{200 * time.Microsecond, 200 * time.Microsecond, 4, 0.9, 1, 0.45, 0.5}, // a CNP per paced burst: all marked
		{rtt, 10 * time.Microsecond, 1, 0.03, 0.1, 0.015, 0.05},
	} {
		c := newCongestion(256)
		c.onAcked(200, time.Time{}, 0)
		now := time.Unix(1000, 0)
		var before, after float64
		nextCNP := time.Duration(0)
		for at := time.Duration(0); at < 200*rtt; at += tc.packet {
			for j := range tc.burst {
				c.onSent(now.Add(at + time.Duration(j)*5*time.Microsecond))
				c.onAcked(1, now.Add(at+time.Duration(j)*5*time.Microsecond), rtt) // the window keeps growing between the cuts
			}
			if at < nextCNP {
				continue
			}
			nextCNP += tc.every
			w := c.cwnd
			if c.onCNP(now.Add(at), rtt) {
				before, after = w, c.cwnd
			}
		}
		cut := 1 - after/before
		if c.alpha < tc.lo || c.alpha > tc.hi {
			t.Errorf("a CNP every %v: alpha %.3f, want %.2f-%.2f", tc.every, c.alpha, tc.lo, tc.hi)
		}
		if cut < tc.cutAtLeast || cut > tc.cutAtMost {
			t.Errorf("a CNP every %v: the last cut took %.3f of the window, want %.3f-%.3f", tc.every, cut, tc.cutAtLeast, tc.cutAtMost)
		}
	}
}

// TestFractionalWindow: CNPs that keep coming cut the window below one
// packet, down to minWindow: one packet may still be in flight, and the
// pacer spaces packets by the fraction (a window of a quarter sends one
// packet every 4 round trips at paceGain 1). Below one packet the
// window grows by its additive increase per round trip of time, however
// few ACKs come: a QP paced to a packet every few round trips grows as
// fast as one that sends many.
func TestFractionalWindow(t *testing.T) {
	srtt := 100 * time.Microsecond
	now := time.Unix(1000, 0)
	c := newCongestion(256)
	for range 40 {
		now = now.Add(2 * srtt)
		c.onCNP(now, srtt)
	}
	if c.cwnd != minWindow || c.window() != 1 {
		t.Fatalf("after 40 CNPs: window %.4f (%d in flight), want %.4f (1)", c.cwnd, c.window(), minWindow)
	}
	c.cwnd = 0.25
	var p pacer
	for range 2 { // the one packet idle time buys (a gap of 400 us is more than paceBurstTime), then one more
		p.spend(now, 1, srtt, c.paceWindow(), paceGain, false)
	}
	if gap, want := p.at.Sub(now), time.Duration(float64(srtt)/(paceGain*0.25)); gap < want-time.Microsecond || gap > want+time.Microsecond {
		t.Errorf("pacing at a window of 0.25: next packet in %v, want %v", gap, want)
	}
	c.onAcked(1, now, srtt)
	before, ai := c.cwnd, c.ai
	c.onAcked(1, now.Add(4*srtt), srtt) // one ACK in four round trips
	if got, want := c.cwnd-before, 4*ai; got < want*0.99 || got > want*1.01 {
		t.Errorf("one ACK four round trips after the last: grew %.4f, want %.4f (4 x %.4f)", got, want, ai)
	}
}

// TestIncreaseAfterACut: a CNP's cut on a path that marks all the time
// (alpha near 1) leaves a small window a small additive increase, so
// that many QPs at a fraction of a packet add little to the queue in
// all; each round trip of ACKs without a CNP doubles it back to one
// packet a round trip.
func TestIncreaseAfterACut(t *testing.T) {
	srtt := 100 * time.Microsecond
	now := time.Unix(1000, 0)
	c := newCongestion(256)
	c.cwnd = 0.5
	c.onCNP(now, srtt)
	if c.ai != minIncrease {
		t.Fatalf("after a cut at alpha %.2f: increase %.4f, want %.4f", c.alpha, c.ai, minIncrease)
	}
	for i := 1; c.ai < maxIncrease; i++ {
		if i > 5 {
			t.Fatalf("increase %.4f after %d round trips without a CNP", c.ai, i)
		}
		now = now.Add(srtt)
		c.onAcked(1, now, srtt)
		c.decay(now, srtt)
	}
}

// TestPacingBurst: after idle time, a QP paced fast (a packet every
// microsecond) may send paceBurst packets more back to back; one paced
// slower than paceBurst packets in paceBurstTime, one more only, so that
// several QPs' bursts met in a shallow queue do not cross its marking
// threshold while the link is far from full.
func TestPacingBurst(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		gap  time.Duration
		want int // packets that go at once after idle time
	}{
		{time.Microsecond, paceBurst + 1},
		{4 * time.Microsecond, paceBurst + 1},
		{10 * time.Microsecond, 3},
		{80 * time.Microsecond, 2},
	} {
		var p pacer
		srtt := 100 * time.Millisecond
		window := float64(srtt) / (paceGain * float64(tc.gap)) // a window of srtt/gap packets, paced at gap
		n := 0
		for !p.holds(now) && n < 100 {
			p.spend(now, 1, srtt, window, paceGain, false)
			n++
		}
		if n != tc.want {
			t.Errorf("paced a packet every %v: %d went at once after idle time, want %d", tc.gap, n, tc.want)
		}
	}
}

// TestSlowStartPacesAhead: in slow start, where the window doubles a
// round trip, the pacer spaces packets by half the window's own spacing
// (slowStartPace); after it, by the window's (paceGain).
func TestSlowStartPacesAhead(t *testing.T) {
	pool := NewPool(64)
	alloc, err := pool.Reserve(64)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSender(alloc, 0, Params{Timeout: 14, RetryCnt: 7})
	now := time.Unix(1000, 0)
	s.Admit(Entry{Kind: Data, AckReq: true}, now)
	now = now.Add(time.Millisecond)
	s.OnAck(0, now) // srtt 1 ms
	gapAt := func() time.Duration {
		e := Entry{Kind: Data}
		for range paceBurst + 2 { // past the burst idle time buys
			s.spendEntry(now, &e, 1)
		}
		before := s.pace.at
		s.spendEntry(now, &e, 1)
		return s.pace.at.Sub(before)
	}
	w := s.cc.cwnd
	if ss, want := gapAt(), time.Duration(float64(time.Millisecond)/(slowStartPace*w)); ss != want {
		t.Errorf("slow start, window %.0f: a packet every %v, want %v", w, ss, want)
	}
	s.cc.ssthresh = s.cc.cwnd // congestion avoidance
	s.pace.restart()
	if ca, want := gapAt(), time.Duration(float64(time.Millisecond)/(paceGain*w)); ca != want {
		t.Errorf("congestion avoidance, window %.0f: a packet every %v, want %v", w, ca, want)
	}
}

// TestPacerBurst: after idle time the pacer lets a burst go back to back:
// paceBurst packets, or paceBurstOpen while the window is open (held by
// the replay allocation, not by the path: every packet a burst saves is a
// system call of the port's saved); never more than paceBurstTime of
// pacing per paceBurst packets, and a QP paced slower than that gets one.
func TestPacerBurst(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		srtt   time.Duration
		window float64
		open   bool
		want   int // packets that go at once after idle time, beyond the first
	}{
		{"fast, window held by the path", 100 * time.Microsecond, 100, false, paceBurst},    // 1 us gaps
		{"fast, window open", 100 * time.Microsecond, 100, true, paceBurstOpen},             // 1 us gaps
		{"3 us gaps, window open: 160 us of pacing", 300 * time.Microsecond, 100, true, 32}, // 32 x 3 = 96 us
		{"10 us gaps, window open: 160 us of pacing", time.Millisecond, 100, true, 16},      // 160 us / 10 us
		{"10 us gaps, path-held: 20 us of pacing", time.Millisecond, 100, false, 2},
		{"slow, open: one gap", 20 * time.Millisecond, 100, true, 1}, // 200 us gaps: idle time buys one
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pacer
			p.spend(now.Add(-time.Second), 1, tc.srtt, tc.window, paceGain, tc.open) // long ago: idle since
			n := 0
			for !p.holds(now) && n < 100 {
				p.spend(now, 1, tc.srtt, tc.window, paceGain, tc.open)
				n++
			}
			if n-1 != tc.want {
				t.Errorf("%d packets went at once, want 1 + %d", n, tc.want)
			}
		})
	}
}
