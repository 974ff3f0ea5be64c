package reliability

// DCQCN's reaction point (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015), as RoCE NICs run it per
// QP: a rate, not a window. A CNP cuts the current rate by alpha/2 and
// makes the rate before the cut the target; alpha rises with each CNP
// and decays every alpha period without one; a timer and a byte counter
// raise the rate again, in three phases: fast recovery (halfway back to
// the target, while fewer than F events of either have come since the
// cut: each event is counted before it is judged, as ConnectX and ns-3
// count them), additive increase (the target up by AI) and hyper
// increase (the target up by HAI times the events beyond F, when both
// the timer and the byte counter have passed F).

import (
	"math"
	"time"
)

// DCQCNParams are the reaction point's parameters; DefaultDCQCN gives the
// paper's, ConnectXDCQCN a ConnectX NIC's firmware defaults. Rates are in
// bits per second.
type DCQCNParams struct {
	// LineRate caps the rate (the port's speed); 0: 100 Gbit/s, a rate
	// at which pacing holds nothing back on the ports softrnic runs.
	LineRate float64
	// MinRate is the least rate a cut leaves (ConnectX's rpg_min_rate).
	MinRate float64
	// G is alpha's gain: alpha = (1-G) alpha + G on a CNP, and
	// alpha = (1-G) alpha every AlphaPeriod without one.
	G float64
	// InitialAlpha is alpha before the first CNP (1: the first cut
	// halves the rate).
	InitialAlpha float64
	// AlphaPeriod is alpha's decay timer (the paper's K).
	AlphaPeriod time.Duration
	// RateTimer is the rate-increase timer (the paper's T, ConnectX's
	// rpg_time_reset).
	RateTimer time.Duration
	// ByteCounter is the bytes sent between two rate increases (the
	// paper's B, ConnectX's rpg_byte_reset).
	ByteCounter uint64
	// F is the number of timer or byte-counter events of fast recovery
	// (ConnectX's rpg_threshold).
	F int
	// AI and HAI are the additive and hyper increase steps of the target
	// rate (rpg_ai_rate, rpg_hai_rate).
	AI, HAI float64
	// MinDecrease bounds one cut: the rate falls to no less than this
	// fraction of itself (rpg_min_dec_fac); 0.5 lets alpha of 1 halve it.
	MinDecrease float64
	// FirstRate, if set, is the rate the first cut starts from
	// (ConnectX's rate_to_set_on_first_cnp); 0: the rate the QP was
	// sending at, measured (a NIC's current rate before any CNP).
	FirstRate float64
	// LossCut: a loss the sender detects (a NAK, a timeout, a READ
	// response gap) cuts the rate as a CNP does, at most once a round
	// trip. The paper's network is lossless (PFC); on lossy Ethernet
	// without it, the only signal a shallow queue gives before it marks
	// is a drop, as ConnectX's lossy-RoCE modes slow a QP that lost
	// packets. On in both presets; off is the paper's pure reaction point.
	LossCut bool
	// CutInterval is the least time between two cuts; a CNP within it
	// still raises alpha (ConnectX's rate_reduce_monitor_period). 0: a
	// cut on every CNP, as the paper's reaction point does (its
	// notification point sends at most one per 50 us).
	CutInterval time.Duration
}

// DefaultDCQCN is the paper's parameters: g = 1/256, K = T = 55 us,
// B = 10 MB, F = 5, R_AI = 40 Mbit/s; the hyper increase step is ten
// times the additive one (as ConnectX's 5 and 50 Mbit/s), the least rate
// ConnectX's 1 Mbit/s.
func DefaultDCQCN() DCQCNParams {
	return DCQCNParams{MinRate: 1e6, G: 1.0 / 256, InitialAlpha: 1, AlphaPeriod: 55 * time.Microsecond,
		RateTimer: 55 * time.Microsecond, ByteCounter: 10 << 20, F: 5, AI: 40e6, HAI: 400e6, MinDecrease: 0.5, LossCut: true}
}

// PaperLinkRate is the link rate the paper's parameters were chosen for
// (40 Gbit/s): DefaultDCQCN's increase steps and byte counter are
// fractions of it.
const PaperLinkRate = 40e9

// ScaledTo returns p on a link of rate bits per second (LineRate),
// with the increase steps (AI, HAI) and the byte counter scaled from
// the paper's 40 Gbit/s by rate/PaperLinkRate: the same fraction of
// the link per rate-increase event, and the same time between two
// byte-counter events at line rate. The paper's absolute 40 Mbit/s
// step is 0.1 % of its link but 2 % of a 2 Gbit/s one, whose senders
// then overshoot the queue between two CNPs. The timers and alpha's
// gain are the paper's.
func (p DCQCNParams) ScaledTo(rate float64) DCQCNParams {
	f := rate / PaperLinkRate
	p.LineRate = rate
	p.AI, p.HAI = p.AI*f, p.HAI*f
	p.ByteCounter = max(uint64(float64(p.ByteCounter)*f), 1)
	return p
}

// ConnectXDCQCN is a ConnectX-4 or later NIC's firmware defaults
// (mlxreg's ROCE_CC parameters): dce_tcp_g 1019/1024 (G = 5/1024),
// dce_tcp_rtt 1 us, initial_alpha_value 1023, rpg_time_reset 300 us,
// rpg_byte_reset 32767 bytes, rpg_threshold 1, rpg_ai_rate 5 Mbit/s,
// rpg_hai_rate 50 Mbit/s, rpg_min_dec_fac 50 %, rpg_min_rate 1 Mbit/s,
// rate_reduce_monitor_period 4 us.
func ConnectXDCQCN() DCQCNParams {
	return DCQCNParams{MinRate: 1e6, G: 5.0 / 1024, InitialAlpha: 1023.0 / 1024, AlphaPeriod: time.Microsecond,
		RateTimer: 300 * time.Microsecond, ByteCounter: 32767, F: 1, AI: 5e6, HAI: 50e6, MinDecrease: 0.5,
		CutInterval: 4 * time.Microsecond, LossCut: true}
}

// defaultLineRate is the cap when DCQCNParams.LineRate is 0.
const defaultLineRate = 100e9

// dcqcn is one QP's reaction point (Sender.rate, when Sender.byRate).
type dcqcn struct {
	p      DCQCNParams
	rc, rt float64 // the current and target rates; rc of 0: no CNP yet, no limit
	alpha  float64
	opened int // packets the BDP cap lets out (Sender.bdpCap): from initialWindow, one more per packet acknowledged
	// capRate is the rate the BDP cap allows (its packets over the least
	// round trip), set before each CNP: a QP whose cap is still opening
	// sends below it, and a first cut from what it measured (a sixth of
	// its share, 77 Mbit/s, on the shallow path's third millisecond) took
	// 50 ms of additive increase to climb back.
	capRate float64

	cnpSince bool      // a CNP came in the current alpha period
	alphaAt  time.Time // the current alpha period's end
	timerAt  time.Time // the rate-increase timer's next expiry
	lastCut  time.Time
	lossCut  time.Time // the last cut for a loss
	timerN   int       // timer expiries since the last cut
	byteN    int       // byte-counter events since the last cut
	bytes    uint64    // bytes sent towards the next byte-counter event
	inc      uint64    // increase events, counted

	// The sending rate measured, for the first cut (a NIC's current
	// rate before any CNP is its line rate; softrnic's is what it sends).
	measStart time.Time
	measBytes uint64
	measured  float64
}

func newDCQCN(p DCQCNParams) dcqcn {
	if p.LineRate <= 0 {
		p.LineRate = defaultLineRate
	}
	if p.MinDecrease <= 0 || p.MinDecrease > 1 {
		p.MinDecrease = 0.5
	}
	p.F = max(p.F, 1)
	return dcqcn{p: p, alpha: p.InitialAlpha, opened: initialWindow}
}

// limited reports whether a CNP has set a rate.
func (d *dcqcn) limited() bool { return d.rc > 0 }

// rate is the current rate in bits per second (the line rate before the
// first CNP).
func (d *dcqcn) rate() float64 {
	if d.rc == 0 {
		return d.p.LineRate
	}
	return d.rc
}

// onCNP reacts to a congestion notification at now; it reports whether
// the rate was cut.
func (d *dcqcn) onCNP(now time.Time) bool {
	d.advance(now)
	d.alpha = (1-d.p.G)*d.alpha + d.p.G
	d.cnpSince = true
	if d.alphaAt.IsZero() {
		d.alphaAt = now.Add(d.p.AlphaPeriod)
	}
	if d.p.CutInterval > 0 && !d.lastCut.IsZero() && now.Sub(d.lastCut) < d.p.CutInterval {
		return false
	}
	if d.rc == 0 {
		d.rc = d.p.FirstRate
		if d.rc <= 0 {
			d.rc = max(d.measuredRate(now), d.capRate)
		}
		d.rc = min(d.rc, d.p.LineRate)
	}
	d.rt = d.rc
	d.rc = max(d.rc*max(1-d.alpha/2, d.p.MinDecrease), d.p.MinRate)
	d.lastCut = now
	d.timerN, d.byteN, d.bytes = 0, 0, 0
	d.timerAt = now.Add(d.p.RateTimer)
	return true
}

// onLoss cuts the rate for a loss detected at now, as a CNP, at most once
// per round trip srtt (LossCut); it reports whether it cut.
func (d *dcqcn) onLoss(now time.Time, srtt time.Duration) bool {
	if !d.p.LossCut || !d.lossCut.IsZero() && now.Sub(d.lossCut) < max(srtt, d.p.AlphaPeriod) {
		return false
	}
	d.lossCut = now
	return d.onCNP(now)
}

// measuredRate is the rate sent lately (the line rate when too little
// was sent to tell).
func (d *dcqcn) measuredRate(now time.Time) float64 {
	if el := now.Sub(d.measStart); d.measBytes > 0 && el > 0 && el < 10*time.Millisecond {
		return max(d.measured, float64(d.measBytes*8)/el.Seconds())
	}
	if d.measured > 0 {
		return d.measured
	}
	return d.p.LineRate
}

// onSent counts bytes sent at now: the byte counter's events, and the
// measure of the rate.
func (d *dcqcn) onSent(now time.Time, bytes uint64) {
	d.advance(now)
	if el := now.Sub(d.measStart); el >= 100*time.Microsecond || d.measStart.IsZero() {
		if el < 10*time.Millisecond && d.measBytes > 0 {
			d.measured = float64(d.measBytes*8) / el.Seconds()
		}
		d.measStart, d.measBytes = now, 0
	}
	d.measBytes += bytes
	if d.rc == 0 || d.p.ByteCounter == 0 {
		return
	}
	d.bytes += bytes
	for d.bytes >= d.p.ByteCounter && d.rc > 0 {
		d.bytes -= d.p.ByteCounter
		d.byteN++
		d.increase()
	}
}

// advance runs the timers up to now: alpha's decay, one step each
// AlphaPeriod without a CNP, and the rate-increase timer's events.
func (d *dcqcn) advance(now time.Time) {
	if !d.alphaAt.IsZero() && !now.Before(d.alphaAt) {
		if !d.cnpSince {
			d.alpha *= 1 - d.p.G
		}
		d.cnpSince = false
		// The periods after the first saw no CNP.
		k := now.Sub(d.alphaAt) / d.p.AlphaPeriod
		d.alpha *= math.Pow(1-d.p.G, float64(k))
		d.alphaAt = d.alphaAt.Add((k + 1) * d.p.AlphaPeriod)
		if d.alpha < 1e-6 {
			d.alpha = 0
		}
	}
	for d.rc > 0 && !d.timerAt.IsZero() && !now.Before(d.timerAt) {
		d.timerN++
		d.timerAt = d.timerAt.Add(d.p.RateTimer)
		d.increase()
		if d.rc >= d.p.LineRate {
			// Back at the line rate: no limit until the next CNP.
			d.rc, d.rt, d.timerAt = 0, 0, time.Time{}
		}
	}
}

// increase is one rate-increase event (the timer's or the byte
// counter's).
func (d *dcqcn) increase() {
	d.inc++
	switch lo, hi := min(d.timerN, d.byteN), max(d.timerN, d.byteN); {
	case hi < d.p.F: // fast recovery
	case lo > d.p.F: // hyper increase
		d.rt += float64(lo-d.p.F) * d.p.HAI
	default: // additive increase
		d.rt += d.p.AI
	}
	d.rt = min(d.rt, d.p.LineRate)
	d.rc = min((d.rt+d.rc)/2, d.p.LineRate)
}

// gap is how long bytes take at the current rate.
func (d *dcqcn) gap(bytes uint64) time.Duration {
	return time.Duration(float64(bytes*8) / d.rate() * 1e9)
}
