package reliability

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
)

var t0 = time.Unix(1000, 0)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-7*math.Max(math.Abs(a), math.Abs(b))+1e-9 }

// The paper's formulas, event by event, on a driven clock: the cut by
// alpha/2, alpha's rise and decay, and the three increase phases.
func TestDCQCNFormulas(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate, p.FirstRate = 10e9, 10e9
	const line = 10e9

	t.Run("k CNPs at once", func(t *testing.T) {
		for k := 1; k <= 12; k++ {
			d := newDCQCN(p)
			alpha, rc := p.InitialAlpha, line
			for range k {
				alpha = (1-p.G)*alpha + p.G
				rc = math.Max(rc*(1-alpha/2), p.MinRate)
				d.onCNP(t0)
			}
			if !near(d.rate(), rc) || !near(d.alpha, alpha) || !near(d.rt, rc/(1-alpha/2)) {
				t.Errorf("after %d CNPs: rate %.0f alpha %.6f target %.0f, want %.0f %.6f %.0f", k, d.rate(), d.alpha, d.rt, rc, alpha, rc/(1-alpha/2))
			}
		}
	})

	t.Run("alpha decays each period without a CNP", func(t *testing.T) {
		d := newDCQCN(p)
		d.onCNP(t0)
		a0 := d.alpha
		for n := 1; n <= 50; n++ {
			// The first period saw the CNP: no decay at its end.
			d.advance(t0.Add(time.Duration(n) * p.AlphaPeriod))
			if want := a0 * math.Pow(1-p.G, float64(n-1)); !near(d.alpha, want) {
				t.Fatalf("after %d periods alpha %.6f, want %.6f", n, d.alpha, want)
			}
		}
	})

	t.Run("recovery without CNPs", func(t *testing.T) {
		q := p
		q.FirstRate = 5e9 // the target: the rate the cut starts from
		d := newDCQCN(q)
		d.onCNP(t0)
		rc, rt := d.rc, d.rt
		if rt != 5e9 || rc != 2.5e9 {
			t.Fatalf("the first cut from 5 Gbit/s: rate %.0f target %.0f", rc, rt)
		}
		for n := 1; n <= 40; n++ {
			// Timer events only (nothing sent): fast recovery while fewer
			// than F have come (the counter counts the event first, as a
			// ConnectX's and ns-3's), then additive increase; hyper
			// increase needs the byte counter too.
			if n >= p.F {
				rt = math.Min(rt+p.AI, line)
			}
			rc = (rt + rc) / 2
			d.advance(t0.Add(time.Duration(n) * p.RateTimer))
			if !near(d.rc, rc) || !near(d.rt, rt) {
				t.Fatalf("after %d timer events: rate %.0f target %.0f, want %.0f %.0f", n, d.rc, d.rt, rc, rt)
			}
		}
		if want := 5e9 + float64(40-p.F+1)*p.AI; !near(d.rt, want) || want-d.rc > 2*p.AI {
			t.Errorf("after 40 events the target is %.0f (want %.0f) and the rate %.0f", d.rt, want, d.rc)
		}
	})

	t.Run("hyper increase", func(t *testing.T) {
		q := p
		q.ByteCounter = 1 << 20
		d := newDCQCN(q)
		d.onCNP(t0)
		rc, rt := d.rc, d.rt
		timerN, byteN := 0, 0
		step := func() {
			lo, hi := min(timerN, byteN), max(timerN, byteN)
			switch {
			case hi < q.F:
			case lo > q.F:
				rt += float64(lo-q.F) * q.HAI
			default:
				rt += q.AI
			}
			rt = math.Min(rt, line)
			rc = math.Min((rt+rc)/2, line)
		}
		for n := 1; n <= 9; n++ {
			at := t0.Add(time.Duration(n) * q.RateTimer)
			timerN++
			step()
			d.advance(at)
			byteN++
			step()
			d.onSent(at, q.ByteCounter)
			if !near(d.rc, rc) || !near(d.rt, rt) {
				t.Fatalf("event pair %d: rate %.0f target %.0f, want %.0f %.0f", n, d.rc, d.rt, rc, rt)
			}
		}
		if d.rt < line/2+float64(2)*q.HAI {
			t.Errorf("no hyper increase: target %.0f", d.rt)
		}
	})

	t.Run("a cut is bounded", func(t *testing.T) {
		q := p
		q.MinDecrease = 0.75
		d := newDCQCN(q)
		d.onCNP(t0)
		if !near(d.rate(), 0.75*line) {
			t.Errorf("alpha 1 with a 75 %% bound: rate %.0f, want %.0f", d.rate(), 0.75*line)
		}
		for range 100 {
			d.onCNP(t0)
		}
		if d.rate() != q.MinRate {
			t.Errorf("after 100 CNPs the rate is %.0f, want the least, %.0f", d.rate(), q.MinRate)
		}
	})

	t.Run("the cut interval", func(t *testing.T) {
		d := newDCQCN(ConnectXDCQCN())
		if !d.onCNP(t0) || d.onCNP(t0.Add(time.Microsecond)) || !d.onCNP(t0.Add(5*time.Microsecond)) {
			t.Error("ConnectX's rate_reduce_monitor_period: a CNP within 4 us cut again, or one after it did not")
		}
	})

	t.Run("back to the line rate", func(t *testing.T) {
		d := newDCQCN(p)
		d.onCNP(t0)
		d.advance(t0.Add(time.Second))
		if d.limited() || d.rate() != line {
			t.Errorf("a second without CNPs: limited %v at %.0f", d.limited(), d.rate())
		}
	})
}

// The reaction point against a model that steps the clock a microsecond
// at a time and applies the paper's rules as they fall due, under random
// CNPs and sends: the implementation, which runs its timers only when
// asked, must agree at every step.
func TestDCQCNModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		p := DefaultDCQCN()
		p.LineRate = 2e9
		p.ByteCounter = uint64(64 << 10 << r.IntN(6))
		if seed%2 == 1 {
			p = ConnectXDCQCN()
			p.LineRate = 2e9
		}
		p.FirstRate = p.LineRate
		d := newDCQCN(p)
		// The model.
		var m struct {
			rc, rt, alpha   float64
			cnp             bool
			alphaAt, timerT int // microseconds; -1 when not armed
			timerN, byteN   int
			bytes           uint64
			lastCut         int
		}
		m.alpha, m.alphaAt, m.timerT, m.lastCut = p.InitialAlpha, -1, -1, -1<<30
		us := func(d time.Duration) int { return int(d / time.Microsecond) }
		increase := func() {
			lo, hi := min(m.timerN, m.byteN), max(m.timerN, m.byteN)
			switch {
			case hi < p.F:
			case lo > p.F:
				m.rt += float64(lo-p.F) * p.HAI
			default:
				m.rt += p.AI
			}
			m.rt = math.Min(m.rt, p.LineRate)
			m.rc = math.Min((m.rt+m.rc)/2, p.LineRate)
		}
		for now := 0; now < 20000; now++ {
			at := t0.Add(time.Duration(now) * time.Microsecond)
			if m.alphaAt >= 0 && now == m.alphaAt {
				if !m.cnp {
					m.alpha *= 1 - p.G
				}
				m.cnp = false
				m.alphaAt += us(p.AlphaPeriod)
			}
			if m.rc > 0 && m.timerT >= 0 && now == m.timerT {
				m.timerN++
				m.timerT += us(p.RateTimer)
				increase()
				if m.rc >= p.LineRate {
					m.rc, m.rt, m.timerT = 0, 0, -1
				}
			}
			// Congestion comes and goes in phases.
			congested := (now/3000)%2 == 0
			if congested && r.IntN(40) == 0 {
				m.alpha = (1-p.G)*m.alpha + p.G
				m.cnp = true
				if m.alphaAt < 0 {
					m.alphaAt = now + us(p.AlphaPeriod)
				}
				if p.CutInterval == 0 || now-m.lastCut >= us(p.CutInterval) {
					if m.rc == 0 {
						m.rc = p.LineRate
					}
					m.rt = m.rc
					m.rc = math.Max(m.rc*math.Max(1-m.alpha/2, p.MinDecrease), p.MinRate)
					m.lastCut = now
					m.timerN, m.byteN, m.bytes = 0, 0, 0
					m.timerT = now + us(p.RateTimer)
				}
				d.onCNP(at)
			}
			if r.IntN(4) == 0 {
				b := uint64(r.IntN(8192) + 64)
				if m.rc > 0 {
					m.bytes += b
					for m.bytes >= p.ByteCounter && m.rc > 0 {
						m.bytes -= p.ByteCounter
						m.byteN++
						increase()
					}
				}
				d.onSent(at, b)
			}
			if now%97 == 0 {
				d.advance(at)
				if !near(d.rc, m.rc) || !near(d.rt, m.rt) || math.Abs(d.alpha-m.alpha) > 1e-6 {
					t.Fatalf("seed %d at %d us: rate %.0f target %.0f alpha %.6f, model %.0f %.0f %.6f",
						seed, now, d.rc, d.rt, d.alpha, m.rc, m.rt, m.alpha)
				}
			}
		}
	}
}

// A sender with DCQCN paces at its rate once a CNP has set one, and its
// READ responses spend the same rate.
func TestSenderDCQCN(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate = 1e9
	s := dcqcnSender(t, 64, Params{SelectiveRepeat: true, DCQCN: &p, RetryCnt: 7})
	data := Entry{Kind: Data, Length: 4096 - PacketOverhead, AckReq: true}
	for i := range initialWindow { // the BDP cap before a round trip is known
		// Before any CNP the QP goes at the line rate: 4 KiB 33 us apart.
		if g := s.Send(data, t0.Add(time.Duration(i)*33*time.Microsecond)); g.Hold != Go {
			t.Fatalf("before any CNP packet %d was held at the line rate: %v", i, g.Hold)
		}
	}
	if _, limited := s.Rate(); limited {
		t.Fatal("limited before a CNP")
	}
	s.OnCNP(t0)
	bits, limited := s.Rate()
	if !limited || bits > 0.5e9 || s.Stats().CNPCuts != 1 {
		t.Fatalf("after a CNP: %.0f bit/s, limited %v, %d cuts", bits, limited, s.Stats().CNPCuts)
	}
	// Packets now go at the rate, after a burst.
	sent := 0
	var at time.Time
	for i := range 2000 {
		at = t0.Add(time.Duration(i) * time.Microsecond)
		if s.Send(data, at).Hold == Go {
			sent++
		}
		s.OnAck(s.Next().Sub(1), at)
	}
	bits, _ = s.Rate()
	if want := 2e-3 * bits / (4096 * 8); float64(sent) < want*0.8 || float64(sent) > want*1.2+paceBurst {
		t.Errorf("%d packets in 2 ms at about %.0f bit/s, want about %.0f", sent, bits, want)
	}
	if s.Window() != initialWindow {
		t.Errorf("window %d, want the initial window (no round trip sampled: every ACK came at once)", s.Window())
	}
	for range 8 {
		s.RateSent(at, 4096)
	}
	if _, held := s.RateHold(at); !held {
		t.Error("eight responses at once did not hold the next")
	}
}

// With DCQCN the window is IRN's BDP cap: the line rate's packets in the
// least round trip, with an eighth more. It opens from the initial window
// by a packet for each packet acknowledged (doubling a round trip), and
// stays at the BDP once there.
func TestSenderDCQCNBDPCap(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate = 1e9
	s := dcqcnSender(t, 256, Params{DCQCN: &p, PathMTU: 4096, RetryCnt: 7})
	if s.Window() != initialWindow {
		t.Fatalf("before a round trip the window is %d, want the initial window (%d)", s.Window(), initialWindow)
	}
	bdp := int(math.Ceil(1e9 * 1e-3 / 8 / float64(4096+PacketOverhead) * 9 / 8))
	// Round trips of 1 ms at 1 Gbit/s: each sends a window and has it
	// acknowledged.
	now, psn := t0, wire.PSN(0)
	var windows []int
	for range 6 {
		w := s.Window()
		windows = append(windows, w)
		// The window's packets go as the line rate's pacing lets them
		// (33 us apart), each acknowledged a round trip after it went.
		var sentAt []time.Time
		for at := now; len(sentAt) < w && at.Before(now.Add(2*time.Millisecond)); at = at.Add(time.Microsecond) {
			if s.Send(Entry{Kind: Data, Length: 4096, AckReq: true}, at).Hold == Go {
				sentAt = append(sentAt, at)
			}
		}
		if len(sentAt) != w {
			t.Fatalf("%d of a window of %d sent", len(sentAt), w)
		}
		for _, at := range sentAt {
			now = at.Add(time.Millisecond)
			s.OnAck(psn, now)
			psn = psn.Add(1)
		}
	}
	want := []int{initialWindow, 2 * initialWindow, 4 * initialWindow, 8 * initialWindow, bdp, bdp}
	if !slices.Equal(windows, want) {
		t.Errorf("windows over six 1 ms round trips at 1 Gbit/s %v, want %v (the BDP cap %d)", windows, want, bdp)
	}
}

// A packet sent at a low rate holds the QP only as long as the rate
// stays low: as the rate timer raises it, what is left of the wait
// shrinks (one QP of an incast, cut to the least rate, would else wait
// 33 ms for a packet its rate allowed within a millisecond).
func TestSenderDCQCNWaitFollowsRate(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate, p.FirstRate = 1e9, 1e9
	s := dcqcnSender(t, 64, Params{SelectiveRepeat: true, DCQCN: &p, RetryCnt: 7})
	for range 20 { // cut after cut: down to the least rate
		s.OnCNP(t0)
	}
	if bits, _ := s.Rate(); bits != p.MinRate {
		t.Fatalf("after 20 CNPs at once the rate is %.0f, want the least (%.0f)", bits, p.MinRate)
	}
	data := Entry{Kind: Data, Length: 4096 - PacketOverhead, AckReq: true}
	now := t0
	for s.Send(data, now).Hold == Go { // the burst idle time bought, then one held
		s.OnAck(s.Next().Sub(1), now)
	}
	g := s.Send(data, now)
	if g.Hold != HoldPacing || g.Until.Sub(now) < 30*time.Millisecond {
		t.Fatalf("at 1 Mbit/s the next packet waits %v (%v), want about 33 ms", g.Until.Sub(now), g.Hold)
	}
	if d := g.Again.Sub(now); d <= 0 || d > p.RateTimer {
		t.Fatalf("the gate says to ask again in %v, want by the rate timer (%v): an engine asleep till then misses the rate's rise", d, p.RateTimer)
	}
	// The rate timer's events, every RateTimer: the wait ends once the rate
	// would have let the packet go, long before 33 ms.
	for g.Hold == HoldPacing {
		now = now.Add(p.RateTimer)
		if now.Sub(t0) > 5*time.Millisecond {
			bits, _ := s.Rate()
			t.Fatalf("still held after %v (rate %.0f bit/s, until %v)", now.Sub(t0), bits, g.Until.Sub(now))
		}
		g = s.Send(data, now)
	}
	if bits, _ := s.Rate(); bits < 10*p.MinRate {
		t.Errorf("the packet went at %v with the rate still %.0f bit/s", now.Sub(t0), bits)
	}
	// A READ response's hold shrinks the same way, and the time it names
	// is the shrunk one.
	for range 20 {
		s.OnCNP(now)
	}
	s.RateSent(now, 4096)
	for range 8 {
		s.RateSent(now, 4096) // past the burst idle time bought
	}
	start := now
	for {
		now = now.Add(p.RateTimer)
		until, held := s.RateHold(now)
		if !held {
			break
		}
		if until != s.PaceAt() || !until.After(now) {
			t.Fatalf("RateHold at %v names %v, the pacer %v", now.Sub(start), until.Sub(start), s.PaceAt().Sub(start))
		}
		if now.Sub(start) > 10*time.Millisecond {
			t.Fatalf("a response still held after %v", now.Sub(start))
		}
	}
}

// TestDCQCNScaledTo: the paper's steps and byte counter scale with the
// link (the same fraction of it), its timers and gain stay, and on the
// paper's own 40 Gbit/s nothing changes but the line rate.
func TestDCQCNScaledTo(t *testing.T) {
	paper := DefaultDCQCN()
	for _, tc := range []struct {
		name        string
		rate        float64
		ai, hai     float64
		byteCounter uint64
	}{
		{"the paper's link", 40e9, 40e6, 400e6, 10 << 20},
		{"2 Gbit/s", 2e9, 2e6, 20e6, 10 << 20 / 20},
		{"100 Gbit/s", 100e9, 100e6, 1000e6, 10 << 20 * 5 / 2},
		{"a byte counter of at least a byte", 1, 1e-3, 1e-2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := paper.ScaledTo(tc.rate)
			if s.LineRate != tc.rate || !near(s.AI, tc.ai) || !near(s.HAI, tc.hai) || s.ByteCounter != tc.byteCounter {
				t.Errorf("line %.0f AI %.0f HAI %.0f B %d, want %.0f %.0f %.0f %d", s.LineRate, s.AI, s.HAI, s.ByteCounter, tc.rate, tc.ai, tc.hai, tc.byteCounter)
			}
			s.LineRate, s.AI, s.HAI, s.ByteCounter = paper.LineRate, paper.AI, paper.HAI, paper.ByteCounter
			if s != paper {
				t.Errorf("the timers or the gain changed: %+v, want %+v", s, paper)
			}
		})
	}
}

// A QP that DCQCN's rate paces buys with idle time the burst the window's
// pacing allows (pacer.spend): four packets back to back for a QP fast
// enough to send them in paceBurstTime, one beyond the packet due for a
// slower one, whose bursts would meet the other QPs' in a shallow queue.
func TestSenderDCQCNIdleBurst(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rate      float64 // the rate the CNP sets
		wantBurst int     // packets that go at once after the idle time
	}{
		{"4 KiB packets at 50 Gbit/s", 50e9, 1 + paceBurst},
		{"4 KiB packets at 500 Mbit/s", 500e6, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultDCQCN()
			p.LineRate, p.FirstRate = 100e9, 2*tc.rate    // the first cut halves it
			p.RateTimer, p.ByteCounter = time.Hour, 1<<60 // and nothing raises it
			s := dcqcnSender(t, 64, Params{SelectiveRepeat: true, DCQCN: &p, RetryCnt: 7, PathMTU: 4096})
			data := Entry{Kind: Data, Length: 4096, AckReq: true}
			s.Send(data, t0)
			s.OnAck(0, t0.Add(time.Microsecond))
			s.OnCNP(t0.Add(time.Microsecond))
			now := t0.Add(10 * time.Millisecond) // idle
			burst := 0
			for burst < 64 && s.Send(data, now).Hold == Go {
				burst++
				s.OnAck(s.Next().Sub(1), now)
			}
			if burst != tc.wantBurst {
				bits, _ := s.Rate()
				t.Errorf("%d packets at once after the idle time at %.0f Mbit/s, want %d", burst, bits/1e6, tc.wantBurst)
			}
		})
	}
}

// Before any CNP a DCQCN QP goes at the line rate, not faster, as a
// NIC's port lets it: after the burst idle time buys, a packet waits for
// the line rate's gap (an engine outrunning a slower link would else put
// a whole window into its queue at once).
func TestSenderDCQCNLineRate(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate = 1e9
	s := dcqcnSender(t, 64, Params{SelectiveRepeat: true, DCQCN: &p, RetryCnt: 7, PathMTU: 4096})
	data := Entry{Kind: Data, Length: 4096, AckReq: true}
	var holds []Hold
	for range 3 {
		holds = append(holds, s.Send(data, t0).Hold)
	}
	if want := []Hold{Go, Go, HoldPacing}; !slices.Equal(holds, want) {
		t.Errorf("three packets at once at a 1 Gbit/s line rate: %v, want %v", holds, want)
	}
	if _, limited := s.Rate(); limited {
		t.Error("limited before a CNP")
	}
	if g := s.Send(data, t0.Add(34*time.Microsecond)); g.Hold != Go {
		t.Errorf("a packet a line rate's gap later: %v", g.Hold)
	}
}

// A QP whose BDP cap is still opening sends below what the cap allows;
// its first CNP cuts from the cap's rate (its packets over the least
// round trip), not from the little it measured: cut from that, the rate
// took 50 ms of additive increase to climb back on a 1 ms path.
func TestSenderDCQCNFirstCutFromTheCap(t *testing.T) {
	p := DefaultDCQCN()
	p.LineRate = 1e9
	s := dcqcnSender(t, 64, Params{SelectiveRepeat: true, DCQCN: &p, RetryCnt: 7, PathMTU: 4096})
	s.Send(Entry{Kind: Data, Length: 4096, AckReq: true}, t0)
	now := t0.Add(time.Millisecond)
	s.OnAck(0, now) // a round trip of 1 ms; one packet in it
	capped := float64(s.Window()*(4096+PacketOverhead)*8) / 1e-3
	s.OnCNP(now)
	bits, limited := s.Rate()
	if want := capped / 2; !limited || math.Abs(bits-want) > want/100 {
		t.Errorf("after the first CNP %.0f Mbit/s, want half the cap's %.0f Mbit/s (the QP measured %.0f)", bits/1e6, capped/1e6, s.rate.measuredRate(now)/1e6)
	}
}

// dcqcnSender is a sender with entries replay entries of its own and the
// parameters given (their DCQCN among them), its first PSN 0.
func dcqcnSender(t *testing.T, entries int, p Params) *Sender {
	t.Helper()
	alloc, err := NewPool(entries).Reserve(entries)
	if err != nil {
		t.Fatal(err)
	}
	return NewSender(alloc, 0, p)
}
