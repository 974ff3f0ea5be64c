package datapath

import "time"

// readPace paces the READ responses of one QP. A responder hears nothing
// of its READ responses (the requester does not acknowledge them); the
// one sign that they outrun the path or the requester (a slow peer, a
// queue that drops, a tap whose reader lags) is the requester asking
// again for the rest of a READ from the first response it lacks, as
// go-back-N does. Each such retry doubles the spacing of the QP's
// responses (from readGapMin, up to readGapMax); each readProbeBytes of
// READs answered in full with no retry since shortens it by an eighth,
// down to none. This is AIMD on the spacing, as DCQCN cuts a rate on a
// CNP and raises it again by its byte counter.
// Only an overrun counts: a retry that leaves more than readOverrun of
// the responses sent behind it unreceived (more than a receiver holds in
// flight: a queue overflowed). A random loss leaves fewer, and costs the
// responses resent, not the rate.
// A retry that comes while the READ it restarts is being answered says
// more: the responses before the one asked for came through in the time
// since the READ's first went, so the spacing becomes that rate's (with a
// quarter to spare) at once, as BBR takes the delivery rate, instead of
// doubling its way there retry after retry. A selective request (a range
// that ends before the READ does: a requester with selective repeat
// asking for what a random loss took) is answered at the pace in force
// and cuts nothing.
type readPace struct {
	gap   time.Duration // between two response packets; 0: as fast as the engine sends them
	next  time.Time     // when the next response may go
	clean bool          // no retry since the READ answered now began
	bytes int           // bytes answered cleanly since the spacing last changed
}

const (
	readGapMin     = time.Microsecond
	readGapMax     = time.Millisecond
	readRateSample = 16  // responses through before a retry that make a rate
	readOverrun    = 512 // responses sent past the one a retry asks for that make it an overrun
	readProbeBytes = 16 << 20
)

// retry takes a go-back-N retry of a READ answer of which sent responses
// had gone and delivered came through in elapsed: after an overrun the
// spacing takes their rate, or doubles. It reports whether it cut.
func (p *readPace) retry(now time.Time, delivered, sent int, elapsed time.Duration) bool {
	if sent-delivered <= readOverrun {
		return false
	}
	gap := 2 * p.gap
	if delivered >= readRateSample {
		gap = elapsed * 5 / time.Duration(4*delivered)
	}
	p.gap = min(max(gap, readGapMin), readGapMax)
	p.clean, p.bytes = false, 0
	if p.next.Before(now) {
		p.next = now
	}
	return true
}

// answered takes a READ of size bytes whose every response has been
// sent: with no retry since it began, it counts towards shortening the
// spacing.
func (p *readPace) answered(size int) {
	if p.clean && p.gap > 0 {
		if p.bytes += size; p.bytes >= readProbeBytes {
			p.bytes = 0
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

// sent moves the pace on by one response sent at now.
func (p *readPace) sent(now time.Time) {
	if p.gap == 0 {
		return
	}
	if late := now.Add(-p.gap); p.next.Before(late) {
		p.next = late // idle time buys one response at most, lateness no more
	}
	p.next = p.next.Add(p.gap)
}
