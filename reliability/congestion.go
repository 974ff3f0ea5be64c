package reliability

// The sender's three controllers, each a type of its own, as quic-go
// keeps its RTT statistics, pacer and congestion controller apart from
// its sent-packet handler: rttStats estimates the round trip, pacer
// spaces packets over it, and congestion holds the window that the
// losses, the queueing delay and the congestion notifications move. The
// Sender asks them at its transmit gate and tells them what its ACKs and
// losses say.

import (
	"math"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
)

// rttStats is the round-trip estimate: RFC 6298's smoothed round trip
// and its variation, the smallest sample (the path's round trip without
// queueing), and the largest, forgotten by 1/1024 a sample (the longest
// a peer has taken to answer: a starved peer's, whose answer a timer
// must not take for a loss).
type rttStats struct {
	srtt, rttvar time.Duration
	min, max     time.Duration
}

// update takes a sample; it reports false for none (not positive).
func (r *rttStats) update(d time.Duration) bool {
	if d <= 0 {
		return false
	}
	if r.min == 0 || d < r.min {
		r.min = d
	}
	r.max = max(d, r.max-r.max>>10)
	r.smooth(d)
	return true
}

// smooth takes d into the smoothed round trip and its variation only: a
// bound from below (an ACK over a packet sent again, timed from its
// resending) is no least round trip.
func (r *rttStats) smooth(d time.Duration) {
	if d <= 0 {
		return
	}
	if r.srtt == 0 {
		r.srtt, r.rttvar = d, d/2
		return
	}
	diff := r.srtt - d
	if diff < 0 {
		diff = -diff
	}
	r.rttvar = (3*r.rttvar + diff) / 4
	r.srtt = (7*r.srtt + d) / 8
}

// Pacing parameters: the rate is paceGain windows per round trip, the
// window's own (at 1.25 a window went out in four fifths of the round
// trip and the queue saw it as a burst: four QPs through a queue that
// marks at eight packets moved 0.76 of the link, at 1.0 0.83), and
// slowStartPace windows in slow start, where the window doubles a round
// trip (Linux paces slow start at twice the window too); up to paceBurst
// packets may go back to back, as long as they span no more than
// paceBurstTime of pacing. While the window is open (at half its limit,
// the replay allocation, or more: no loss, mark or delay has held it
// back) up to paceBurstOpen may, within paceBurstTime per paceBurst: the
// engine hands the port what a turn sent in one system call, and on a
// fast path bursts of four made that a call per five packets (write-bw
// over the veth pair's udp port: 9.6 Gbit/s at five packets a call;
// bursts of 16, 14.6 at 16.7 a call; of 32, 17.7-21.1; of 64, no more;
// the xsk port 9.5, 11.3 and 11.3-14.3), while the incast, shallow and
// loss benchmarks, whose windows the path holds, moved as before.
const (
	paceGain      = 1.0
	slowStartPace = 2.0
	paceBurst     = 4
	paceBurstOpen = 32
	paceBurstTime = 20 * time.Microsecond
)

// pacer lets packets go no faster than the window per round trip (times
// paceGain), with a burst of paceBurst allowed, so that a window does not
// land on the path's queue at once.
type pacer struct {
	at time.Time // when the next packet may go; zero before the first round-trip sample
}

// holds reports whether pacing holds a packet at now.
func (p *pacer) holds(now time.Time) bool { return !p.at.IsZero() && now.Before(p.at) }

// restart lets the next packet go at once: after a timeout nothing the
// pacer counted is in flight any more (a large READ's pacing debt, its
// responses, would otherwise hold back the very request that asks for
// them again, past the timer that counts the retry).
func (p *pacer) restart() { p.at = time.Time{} }

// spend moves the pacing clock on by k packets (a READ request's by the
// responses it asks for: they come back at the pace the requests go),
// sent at gain windows a round trip; open says the window is open
// (paceBurstOpen).
func (p *pacer) spend(now time.Time, k uint32, srtt time.Duration, window, gain float64, open bool) {
	if srtt == 0 {
		return
	}
	gap := time.Duration(float64(srtt) / (gain * window))
	// Idle time buys at most a burst: paceBurst packets, or, for a QP
	// paced slower than that in paceBurstTime, one: a shallow queue that
	// marks above a few packets sees every QP's bursts at line rate (four
	// QPs' bursts of five, met, overflow a 32 KiB marking threshold while
	// the link is far from full), while a fast QP's engine, late by a few
	// microseconds, still catches up.
	b := paceBurst
	if open { // nothing on the path has held the window back
		b = paceBurstOpen
	}
	p.spendFor(now, gap*time.Duration(max(k, 1)), idleBurst(gap, b))
}

// idleBurst is what idle time buys a QP whose packets go gap apart: b
// packets back to back, within paceBurstTime of pacing per paceBurst of
// them, and one for a QP paced slower than that.
func idleBurst(gap time.Duration, b int) time.Duration {
	n := time.Duration(b)
	return min(n*gap, max(gap, paceBurstTime*n/paceBurst))
}

// spendFor moves the pacing clock on by d, the time a packet takes at a
// rate (DCQCN's); idle time buys at most burst.
func (p *pacer) spendFor(now time.Time, d, burst time.Duration) {
	if floor := now.Add(-burst); p.at.Before(floor) {
		p.at = floor
	}
	p.at = p.at.Add(d)
}

// initialWindow is the congestion window a sender starts with, in
// packets (as TCP's initial window).
const initialWindow = 4

// minWindow is the least window a cut leaves, in packets. Below one
// packet the window is a rate: one packet may be in flight, and the
// pacer spaces packets by the round trip over the window (Swift's
// fractional window), so that more senders than the path's BDP and queue
// hold packets (an incast of 64 QPs into a queue of 32) share it without
// a standing queue and its drops.
const minWindow = 1.0 / 64

// The additive increase after a CNP's cut starts at minIncrease packets
// per round trip (more when alpha is low, 1-alpha, or the window large, a
// sixteenth of it) and doubles with each round trip of ACKs that brings
// no CNP, up to one packet (TCP's): a path that keeps marking keeps every
// QP's increase small and equal (64 senders add 4 packets a round trip in
// all, not the 64 that would overflow a queue of 32, and AIMD's equal
// steps keep their shares fair), while a QP whose path clears is back at
// full speed's increase within four round trips, as DCQCN's fast recovery
// and hyper increase ramp a rate.
const (
	minIncrease = 1.0 / 16
	maxIncrease = 1.0
)

// dcqcnG is DCQCN's gain for alpha (1/16, as its paper and RoCE NICs).
const dcqcnG = 1.0 / 16

// queueDelay is the least queueing delay, the rise of the round trip
// above its minimum, that the congestion window reacts to (an eighth of
// the minimum, if more): less is the noise of a host's scheduling.
// delayBeta scales the cut: the window shrinks by delayBeta times the
// excess delay's share of the round trip.
const (
	queueDelay = 100 * time.Microsecond
	delayBeta  = 0.8
)

// congestion is the congestion window: loss-driven AIMD (for paths that
// mark no ECN), Swift's delay rule, and DCQCN's reaction to congestion
// notifications. At most the window's packets may be in flight; it grows
// by one per packet acknowledged below ssthresh (slow start) and by one
// per window above; a loss halves it, once per window of packets.
type congestion struct {
	cwnd, ssthresh float64
	limit          float64  // the largest window: the replay allocation, or 64 initial windows
	recover        wire.PSN // no new cut for losses of packets sent before it
	cutOnce        bool     // a cut happened: recover holds
	delayCut       time.Time

	// The reaction to congestion notifications, on the window, as DCTCP
	// reacts to ECN echoes: a CNP cuts it by alpha/2, at most once a
	// round trip; alpha follows, by DCQCN's gain, the share of each
	// round trip's packets the path marked, which the CNPs tell: a
	// notification point sends at most one per CNPInterval, and only
	// when a marked packet arrives, so a round trip in which n packets
	// arrived, in b bursts a CNPInterval apart or more, had at most
	// min(n, b) chances of one, and k CNPs say it marked about k of
	// them (the bursts are counted as they leave: the pacer's bursts
	// arrive as they left, spread a little by the path). A queue that
	// only touches the marking threshold cuts the window a little, one
	// that stands above it halves it, whether the QP sends a packet every
	// microsecond or one every round trip (one of 64 senders in an
	// incast).
	alpha      float64
	cnpCut     time.Time
	alphaDecay time.Time // when the current round trip's count began
	cnps       int       // CNPs since then
	acks       int       // packets acknowledged since then
	bursts     int       // bursts sent since then
	burstAt    time.Time // when the current burst began

	ai     float64   // the additive increase, packets per round trip
	grewAt time.Time // when the window last grew
}

// onSent counts a packet sent at now towards the bursts of the round.
func (c *congestion) onSent(now time.Time) {
	if now.Sub(c.burstAt) >= CNPInterval {
		c.bursts++
		c.burstAt = now
	}
}

// CNPInterval is the least time between two CNPs a notification point
// sends a QP (DCQCN's: 50 us).
const CNPInterval = 50 * time.Microsecond

func newCongestion(entries int) congestion {
	return congestion{cwnd: initialWindow, ssthresh: float64(entries), limit: float64(max(entries, 64*initialWindow)), alpha: 1, ai: maxIncrease}
}

// window is the window in whole packets, the fraction rounded up: at
// least one may be in flight. The pacer spaces them by the window itself
// (paceWindow), so that a window of 1.5 packets sends at 1.5 a round
// trip, not at one.
func (c *congestion) window() int { return max(1, int(math.Ceil(c.cwnd-1e-9))) }

// paceWindow is the window, fraction and all, that the pacer spaces
// packets by.
func (c *congestion) paceWindow() float64 { return max(c.cwnd, minWindow) }

// onLoss halves the window for the loss of the packet at psn, once for
// all losses among the packets in flight (sent before next) when it
// does; it reports whether it cut.
func (c *congestion) onLoss(psn, next wire.PSN) bool {
	if c.cutOnce && psn.Before(c.recover) {
		return false
	}
	c.cutOnce, c.recover = true, next
	c.ssthresh = max(c.cwnd/2, min(c.cwnd, 2))
	c.cwnd = c.ssthresh
	return true
}

// onAcked opens the window for k packets acknowledged at now: by one per
// ACK below ssthresh (slow start), else by the additive increase ai per
// round trip srtt (ai/cwnd per ACK). Below one packet the window grows by
// ai per round trip of time since it last grew (a cut between does not
// restart the count), not per ACK: ACKs come once per round trip over the
// window, and a QP cut to a small fraction would otherwise grow far
// slower than one a little larger, and with each of its rare packets
// marked, be cut again before it grew at all (the rich getting richer,
// and a QP of an incast starved).
func (c *congestion) onAcked(k int, now time.Time, srtt time.Duration) {
	c.acks += k
	grew := c.grewAt
	c.grewAt = now
	if c.cwnd < 1 {
		if srtt > 0 && !grew.IsZero() {
			c.cwnd = min(c.cwnd+c.ai*float64(now.Sub(grew))/float64(srtt), 1)
		}
		return
	}
	for range k {
		if c.cwnd < c.ssthresh {
			c.cwnd++
		} else {
			c.cwnd += c.ai / c.cwnd
		}
	}
	c.cwnd = min(c.cwnd, c.limit)
}

// decay ends the round trip's count once a round trip has passed: alpha
// moves towards the share of its packets the path marked (0 without a
// CNP).
func (c *congestion) decay(now time.Time, srtt time.Duration) {
	if srtt <= 0 {
		return
	}
	if c.alphaDecay.IsZero() {
		c.alphaDecay = now
		return
	}
	el := now.Sub(c.alphaDecay)
	if el < srtt {
		return
	}
	if c.cnps == 0 && c.acks == 0 {
		// Nothing came back: the round says nothing about the path (a
		// QP of an incast, paced to a packet every few round trips).
		c.alphaDecay, c.bursts = now, 0
		return
	}
	chances := max(min(c.acks, c.bursts), 1)
	marked := min(float64(c.cnps)/float64(chances), 1)
	c.alpha = (1-dcqcnG)*c.alpha + dcqcnG*marked
	if c.cnps == 0 {
		c.ai = min(2*c.ai, maxIncrease)
	}
	c.alphaDecay, c.cnps, c.acks, c.bursts = now, 0, 0, 0
}

// onCNP cuts the window by alpha/2 for a congestion notification, at
// most once per round trip, as DCQCN cuts a rate; it reports whether it
// cut.
func (c *congestion) onCNP(now time.Time, srtt time.Duration) bool {
	c.decay(now, srtt)
	c.cnps++
	if !c.cnpCut.IsZero() && now.Sub(c.cnpCut) < max(srtt, CNPInterval) {
		return false
	}
	c.cnpCut = now
	c.cwnd = max(c.cwnd*(1-c.alpha/2), minWindow)
	c.ssthresh = c.cwnd
	c.ai = min(max(minIncrease, 1-c.alpha, c.cwnd/16), maxIncrease)
	return true
}

// onDelay applies the delay rule to the round trip: when the smoothed
// round trip stands above the target (the minimum plus the least
// queueing delay), the path's queue holds more than it should: the
// window shrinks in proportion to the excess, at most once a round trip
// (Swift's rule), before the queue overflows, and a slow start ends. The
// signal is the smoothed round trip, not a sample: a queue that stands
// raises it within a few samples, while a host's scheduling noise, which
// delays one answer in many, hardly moves it. It reports whether a slow
// start ended and whether the window was cut.
func (c *congestion) onDelay(r *rttStats, now time.Time) (exitSlowStart, cut bool) {
	target := r.min + max(r.min/8, queueDelay)
	if r.srtt <= target {
		return false, false
	}
	exitSlowStart = c.cwnd < c.ssthresh
	if now.Sub(c.delayCut) >= r.srtt {
		c.delayCut = now
		c.cwnd = max(c.cwnd*max(1-delayBeta*float64(r.srtt-target)/float64(r.srtt), 0.5), min(c.cwnd, 2))
		cut = true
	}
	c.ssthresh = min(c.ssthresh, c.cwnd)
	return exitSlowStart, cut
}

// PathRTT is the longest round trip that the QPs sharing a path (an
// engine's, towards its port) have seen lately, forgotten by half every
// PathRTTDecay. A QP that sends rarely among many (a thousand QPs on one
// queue) has few samples of its own, while the queue they share, or a
// peer starved of CPU, delays them all alike: its early timer waits
// beyond what any of them has seen. Not safe for concurrent use (an
// engine's QPs share it under the engine's lock).
type PathRTT struct {
	max time.Duration
	at  time.Time // when max was last halved, or first set
}

// PathRTTDecay is how long PathRTT takes to forget half its maximum.
const PathRTTDecay = time.Second

// Sample takes a round trip measured at now.
func (p *PathRTT) Sample(d time.Duration, now time.Time) {
	p.decay(now)
	if d > p.max {
		p.max = d
	}
}

// Max is the longest round trip seen lately, as of now.
func (p *PathRTT) Max(now time.Time) time.Duration {
	if p == nil {
		return 0
	}
	p.decay(now)
	return p.max
}

func (p *PathRTT) decay(now time.Time) {
	if p.at.IsZero() {
		p.at = now
		return
	}
	if k := now.Sub(p.at) / PathRTTDecay; k > 0 {
		p.max >>= min(k, 62)
		p.at = p.at.Add(k * PathRTTDecay)
	}
}

// deliveryRate estimates the path's bottleneck rate from what the peer
// says has arrived: packets acknowledged, READ responses placed, and with
// selective repeat the packets its NAKs report placed beyond a hole. Each
// sample spans at least a round trip; the estimate is the largest sample
// of the last two buckets of deliveryBucket round trips each (BBR's
// bottleneck-bandwidth filter, in two buckets). With selective repeat a
// loss cuts nothing, and on a path that marks no ECN and is too short for
// the delay rule the window would grow until the app ran out of work,
// queueing it all on the path: the cap this gives (IRN's BDP cap, the
// rate times the least round trip) keeps it near what the path holds.
type deliveryRate struct {
	total     uint64    // packets delivered so far
	t0        time.Time // the running sample's start
	d0        uint64    // total at t0
	cur, prev float64   // the largest sample, packets per second, of this bucket and the last
	bucket    time.Time // when the current bucket began
}

// deliveryBucket is the length of one bucket of the filter, in round trips.
const deliveryBucket = 8

// delivered counts n more packets delivered at now and takes a sample
// when the running one spans span (a round trip) or more.
func (d *deliveryRate) delivered(n int, now time.Time, span time.Duration) {
	if n > 0 {
		d.total += uint64(n)
	}
	if span <= 0 {
		return
	}
	if d.t0.IsZero() {
		d.t0, d.d0, d.bucket = now, d.total, now
		return
	}
	el := now.Sub(d.t0)
	if el < span {
		return
	}
	if now.Sub(d.bucket) >= deliveryBucket*span {
		d.prev, d.cur, d.bucket = d.cur, 0, now
	}
	d.cur = max(d.cur, float64(d.total-d.d0)/el.Seconds())
	d.t0, d.d0 = now, d.total
}

// cap is the packets the path holds at the estimated rate over the
// round trip rtt, with a quarter more (so that the rate can be seen to
// grow: BBR's probing gain) and a pacing burst; 0 before any sample.
func (d *deliveryRate) cap(rtt time.Duration) int {
	r := max(d.cur, d.prev)
	if r == 0 || rtt <= 0 {
		return 0
	}
	return max(initialWindow, int(math.Ceil(r*rtt.Seconds()*2))+paceBurst)
}
