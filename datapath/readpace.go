package datapath

import (
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
)

// readPace paces the READ responses of one QP. A responder hears nothing
// of its READ responses (the requester does not acknowledge them); the
// one sign that they outrun the path or the requester (a slow peer, a
// queue that drops, a tap whose reader lags) is the requester asking
// again for the rest of a READ from the first response it lacks, as
// go-back-N does.
//
// Only an overrun counts: a retry with readOverrun or more responses
// sent after the one it asks for (by PSN: more than a receiver holds in
// flight, so a queue overflowed). A random loss leaves fewer, and costs
// the responses resent, not the rate; so does a selective request (a
// range inside a READ: a requester with selective repeat asking for what
// a random loss took).
//
// An overrun's retry says how fast the responses got through: those
// before the one asked for came in the time since the sample began. A
// sample begins when the QP is asked again, when a READ's first
// response goes after the requester's think time (readThink: perftest
// -a's small READs come one round trip apart, and counted in a sample
// that time would make the rate a fraction of what got through), and
// after any pause of readIdle. A shorter pause within a READ (the
// engine's own: a sleep, a descheduled thread) does not end it: the
// receiver's queue drains through it, and a sample cut there would
// leave the response asked for before it, with no rate to take. After
// an overrun's retry the receiver's queue still holds the rest of the
// overrun, which it takes (and drops) before the responses asked for
// again: until a pause of readIdle, a sample counts them (those sent
// after the one the retry asked for, at most) as taken too, else it
// would show a fraction of the rate.
//
// The spacing becomes that rate's, with a quarter to spare, at once, as
// BBR takes the delivery rate; with too few responses through to make a
// rate it doubles (from readGapMin, up to readGapMax). Each
// readProbeBytes of READs answered in full with no retry since, or each
// readProbeEvery of them, shortens it by an eighth, down to none, as
// DCQCN raises a rate again by its byte counter and its timer.
type readPace struct {
	gap   time.Duration // between two response packets; 0: as fast as the engine sends them
	next  time.Time     // when the next response may go
	clean bool          // no retry since the READ answered now began
	bytes int           // bytes answered cleanly since the spacing last changed
	since time.Time     // when it last changed

	sampling  bool      // a sample runs
	samplePSN wire.PSN  // its first response's PSN
	sampleAt  time.Time // when that went
	last      time.Time // when the last response went
	lastPSN   wire.PSN  // and its PSN
	// backlog is how many responses the last overrun's retry left sent
	// after the one it asked for, until a pause of readIdle: the
	// receiver's queue held them (at most), and takes (and drops) them
	// before the responses asked for again.
	backlog int
}

const (
	readGapMin     = time.Microsecond
	readGapMax     = time.Millisecond
	readRateSample = 16  // responses through before a retry that make a rate
	readOverrun    = 512 // responses sent past the one a retry asks for that make it an overrun
	readProbeBytes = 16 << 20
	readProbeEvery = 3 * time.Second
	readIdle       = 20 * time.Millisecond // a pause that ends a sample
	readThink      = time.Millisecond      // a pause before a READ that ends one
)

// retry takes a go-back-N retry of a READ from the response psn: after
// an overrun the spacing takes the sample's rate, or doubles. It reports
// whether it cut.
func (p *readPace) retry(now time.Time, psn wire.PSN) bool {
	delivered := int(psn.Diff(p.samplePSN))
	overrun := p.lastPSN.Diff(psn) >= readOverrun
	if !p.sampling || delivered < 0 {
		delivered = 0 // the one asked for went before the sample began: no rate
	}
	elapsed := now.Sub(p.sampleAt)
	p.sampling = false // the responses asked for again begin the next
	if !overrun {
		return false
	}
	gap := 2 * p.gap
	if delivered >= readRateSample {
		gap = elapsed * 5 / time.Duration(4*(delivered+p.backlog))
	}
	p.backlog = int(p.lastPSN.Diff(psn))
	p.gap = min(max(gap, readGapMin), readGapMax)
	p.clean, p.bytes, p.since = false, 0, now
	if p.next.Before(now) {
		p.next = now
	}
	return true
}

// answered takes a READ of size bytes whose every response has been
// sent at now: with no retry since it began, it counts towards
// shortening the spacing.
func (p *readPace) answered(size int, now time.Time) {
	if p.clean && p.gap > 0 {
		if p.bytes += size; p.bytes >= readProbeBytes || now.Sub(p.since) >= readProbeEvery {
			p.bytes, p.since = 0, now
			if p.gap -= p.gap / 8; p.gap < readGapMin {
				p.gap = 0
			}
		}
	}
	p.clean = true
}

// holds reports whether the next response must wait at now, and until
// when.
func (p *readPace) holds(now time.Time) (time.Time, bool) {
	return p.next, p.gap > 0 && now.Before(p.next)
}

// sent moves the pace and the sample on by the response of psn, sent at
// now, the first of its READ if first.
func (p *readPace) sent(now time.Time, psn wire.PSN, first bool) {
	pause := now.Sub(p.last)
	if pause > readIdle {
		p.backlog = 0 // the queue drained
	}
	if !p.sampling || pause > readIdle || first && pause > readThink {
		p.sampling, p.samplePSN, p.sampleAt = true, psn, now
	}
	p.last, p.lastPSN = now, psn
	if p.gap == 0 {
		return
	}
	if late := now.Add(-p.gap); p.next.Before(late) {
		p.next = late // idle time buys one response at most, lateness no more
	}
	p.next = p.next.Add(p.gap)
}
