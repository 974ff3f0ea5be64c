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
	c.onAcked(60) // slow start: one per packet
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
	c.onAcked(17) // congestion avoidance: about one per window
	if w := c.window(); w != 17 {
		t.Errorf("a window acknowledged above ssthresh: %d, want 17", w)
	}
	srtt := 100 * time.Microsecond
	if !c.onCNP(now, srtt) || c.window() >= 17 {
		t.Errorf("a CNP did not cut: %d", c.window())
	}
	w := c.window()
	if c.onCNP(now.Add(srtt/2), srtt) || c.window() != w {
		t.Errorf("a second CNP within a round trip cut again")
	}
	a := c.alpha
	c.decay(now.Add(3*srtt), srtt)
	if c.alpha >= a {
		t.Errorf("alpha did not decay after a round trip without CNPs")
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
	c2.onAcked(60)
	if exit, cut := c2.onDelay(&r, now); !exit || !cut || c2.window() >= 64 {
		t.Errorf("a round trip far above its minimum: exit %v cut %v window %d", exit, cut, c2.window())
	}
	w = c2.window()
	if _, cut := c2.onDelay(&r, now.Add(time.Microsecond)); cut || c2.window() != w {
		t.Errorf("the delay rule cut twice within a round trip")
	}

	var p pacer
	p.spend(now, 1, 0, 10)
	if p.holds(now) {
		t.Error("pacing before a round-trip sample")
	}
	for range paceBurst + 1 {
		p.spend(now, 1, srtt, 10) // a gap of 8 us
	}
	if !p.holds(now) || p.holds(now.Add(srtt)) {
		t.Errorf("after a burst: holds now %v, a round trip later %v; want true, false", p.holds(now), p.holds(now.Add(srtt)))
	}
}

// TestCNPAlphaFollowsTheMarkedShare: the window's alpha follows the share
// of each round trip the path marked, as the CNPs (one per CNPInterval at
// most) tell it: a path that marks all the time halves the window each
// round trip, one that marks a twentieth of it cuts it by a few percent.
func TestCNPAlphaFollowsTheMarkedShare(t *testing.T) {
	rtt := time.Millisecond
	for _, tc := range []struct {
		every      time.Duration // a CNP every
		lo, hi     float64       // alpha after 200 round trips
		cutAtLeast float64       // the last cut's share of the window
		cutAtMost  float64
	}{
		{CNPInterval, 0.9, 1, 0.45, 0.5},
		{rtt, 0.03, 0.1, 0.015, 0.05},
	} {
		c := newCongestion(256)
		c.onAcked(200)
		now := time.Unix(1000, 0)
		var before, after float64
		for at := time.Duration(0); at < 200*rtt; at += tc.every {
			c.onAcked(1) // the window keeps growing between the cuts
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
