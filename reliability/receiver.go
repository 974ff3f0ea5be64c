package reliability

import (
	"math/bits"
	"time"
	"unsafe"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/internal/warm"
)

// MaxRdAtomic is how many READs and atomics a responder answers at once
// per QP and remembers the answers of (the device's max_qp_rd_atom).
const MaxRdAtomic = 16

// SeqNAKInterval is the least time between two PSN sequence NAKs of a QP.
// A real gap seen again after it is NAKed again; it is far below any ACK
// timeout, so a lost packet is still repaired long before the timer.
const SeqNAKInterval = 100 * time.Microsecond

// SeqNAKRepeat and SeqNAKRepeatMax pace the NAKs of one gap after its
// first: while requests beyond the gap keep coming, the gap is NAKed
// again SeqNAKRepeat after its last NAK, the wait doubling to
// SeqNAKRepeatMax. A lost NAK would otherwise leave the sender to its
// local ACK timeout (rdma_cm gives rxe's QPs about 2 s), and the wait,
// above a round trip, lets the packets sent before the sender's go-back
// arrive without a NAK of their own.
const (
	SeqNAKRepeat    = time.Millisecond
	SeqNAKRepeatMax = 64 * time.Millisecond
)

// GapQuiet and GapQuietMax pace the NAKs of a go-back-N gap whose sender
// has gone quiet: no request for GapQuiet after the gap's last NAK or
// its last request beyond it, the gap is NAKed again (QuietGap), the
// wait doubling to GapQuietMax, at most GapQuietNAKs times before a
// request comes again (a sender that stays silent longer has gone, or
// will go back on its own timer). A sender whose packet sent again was
// lost, and which ignores NAKs during a retry (rxe), sends nothing more
// before its local ACK timeout; the wait, well beyond a round trip and
// beyond the pauses of a slow sender's stream, keeps the NAK from
// landing while the sender is still sending.
const (
	GapQuiet     = 8 * time.Millisecond
	GapQuietMax  = 256 * time.Millisecond
	GapQuietNAKs = 8
)

// IdleQuiet is the first wait of a go-back-N receiver's repairs of a loss
// nothing has shown, the quiet sender of an open message (QuietTail) and
// the idle probe (QuietIdle: the application waits for a message, a
// receive posted): nothing came for IdleQuiet, then twice as long, up to
// GapQuietMax, GapQuietNAKs times before a request comes again. A
// message whose last or only packet was lost (a SEND of a connection's
// exchange, or its ACK) has nothing behind it to show the gap, and its
// sender (an rxe with the local ACK timeout rdma_cm sets) would wait
// 2.1 s. The wait is far beyond any round trip and beyond the pauses of
// a slow sender's stream (an emulated rxe sending two QPs' 64 KiB
// messages paused one of them for more than GapQuiet, and a NAK then sent
// it back to resend what had come), so that a repair rarely meets a
// message still in flight, and the repairs end long before that timeout.
const IdleQuiet = 50 * time.Millisecond

// ReadRepairs is how many times a go-back-N responder answers again, on
// its own, the READs of a requester gone quiet after them (QuietRead)
// before a request comes again: the first wait IdleQuiet after the last
// response, then twice as long each time.
const ReadRepairs = 3

// Class is what a request's PSN makes of it.
type Class uint8

const (
	// New is the expected PSN: execute the request.
	New Class = iota
	// Duplicate is behind the expected PSN: answer it again (Receiver's
	// FindRead, FindAtomic, or an ACK of Expected()-1), never execute it.
	Duplicate
	// OutOfSequence is ahead of the expected PSN: drop it; NAK says
	// whether to send a PSN sequence NAK for Expected() (the first of a
	// gap no sooner than SeqNAKInterval after the QP's last, and again
	// while the gap lasts, SeqNAKRepeat after and doubling).
	OutOfSequence
	// Ahead is, with selective repeat, a PSN ahead of the expected one
	// within the receive window: a packet that can be placed on its own
	// (a WRITE_ONLY, which carries its address) is placed now and
	// recorded with Placed; any other is dropped as OutOfSequence. NAK
	// says, as for OutOfSequence, whether to NAK the gap.
	Ahead
	// AlreadyPlaced is a PSN ahead of the expected one that was placed
	// before: a copy, dropped without a word.
	AlreadyPlaced
)

// SRWindow is how far ahead of the expected PSN a selective-repeat
// receiver places packets (a fixed bitmap per QP).
const SRWindow = 1024

// ReceiverStats count one QP's responder events.
type ReceiverStats struct {
	Duplicates, OutOfSequence, NAKsSuppressed uint64
	NAKsRepeated                              uint64 // sequence NAKs of a gap NAKed before (SeqNAKRepeat, GapQuiet)
	QuietNAKs                                 uint64 // of them, NAKs of a gap whose sender went quiet (Quiet)
	TailNAKs                                  uint64 // NAKs of the next PSN of a message left open while its sender went quiet (Quiet)
	IdleNAKs                                  uint64 // NAKs of the expected PSN while a receive waited and the sender was quiet (Quiet)
	ACKsRepeated                              uint64 // ACKs sent again once the sender went quiet (Quiet)
	ReadRepairs                               uint64 // quiet deadlines that answered READs again, unasked (QuietRead)
	PlacedAhead                               uint64 // packets placed ahead of order (selective repeat)
}

// Receiver is the responder half of an RC QP's reliability: the expected
// PSN, the classification of each request's PSN, one sequence NAK per
// gap, the MSN, and the READs and atomics it executed, so that a
// duplicate gets the same answer and never a second execution.
type Receiver struct {
	// What every request reads and writes, in two cache lines (with
	// many QPs the state is cold when a QP's turn comes, and Warm reads
	// these lines together); the counters, the records and the
	// selective-repeat bitmap follow.
	exp        wire.PSN
	msn        uint32
	nakSent    bool
	nakRepeat  bool // the last NAK Classify asked for repeated its gap's
	sr         bool // selective repeat
	lastNAK    time.Time
	nakAgain   time.Duration // the wait before the gap's next NAK
	quietAt    time.Time     // go-back-N: when the sender counts as quiet (Quiet; zero: no deadline)
	quietWait  time.Duration // the quiet wait after the next quiet NAK
	quietNAKs  uint8         // quiet NAKs since the sender's last request
	quietKind  QuietKind     // what quietAt repairs
	lossy      bool          // go-back-N: loss seen on the QP (a duplicate, a gap, NoteLoss)
	idleDone   bool          // go-back-N: the idle probes ran out since the last request (Expecting)
	retrying   bool          // the requests coming are duplicates: the requester went back (goBack)
	hasGoBack  bool          // goBack is set
	goBack     wire.PSN      // the PSN the requester last went back to (the first duplicate of its latest retry)
	lastDup    wire.PSN      // the latest duplicate's PSN
	ackNext    wire.PSN      // the expected PSN after the last SEND or WRITE executed (AckPSN)
	stats      ReceiverStats
	reads      [MaxRdAtomic]ReadRecord
	readNext   int
	atomics    [MaxRdAtomic]AtomicRecord
	atomicNext int
	placed     [SRWindow / 64]uint64 // bit i: PSN exp+i placed ahead of order
}

// ReadRecord is a READ request the responder executed.
type ReadRecord struct {
	valid   bool
	PSN     wire.PSN // its first PSN
	Packets uint32
	VA      uint64
	RKey    uint32
	Length  uint32
	MSN     uint32 // the MSN its responses carry
}

// AtomicRecord is an atomic the responder executed, with its result.
type AtomicRecord struct {
	valid bool
	PSN   wire.PSN
	Orig  uint64
	MSN   uint32
}

// Init sets the receiver up to expect psn first; sr enables selective
// repeat (both ends must have).
func (r *Receiver) Init(psn wire.PSN, sr bool) {
	*r = Receiver{exp: psn & wire.PSNMask, ackNext: psn & wire.PSNMask, sr: sr}
}

// bit reports whether PSN exp+i was placed ahead.
func (r *Receiver) bit(i int) bool { return r.placed[i/64]&(1<<(i%64)) != 0 }

// Placed records that a packet of class Ahead was placed.
func (r *Receiver) Placed(psn wire.PSN) {
	if d := int(psn.Diff(r.exp)); r.sr && d > 0 && d < SRWindow {
		r.placed[d/64] |= 1 << (d % 64)
		r.stats.PlacedAhead++
	}
}

// PlacedAhead reports whether packets beyond the expected PSN are placed:
// after a hole filled, another hole lies before them, and it is NAKed at
// once instead of waiting for a packet to come past it.
func (r *Receiver) PlacedAhead() bool {
	if !r.sr {
		return false // only selective repeat places ahead
	}
	for _, w := range r.placed {
		if w != 0 {
			return true
		}
	}
	return false
}

// NewestPlaced is the highest PSN placed ahead of order, if any: with
// selective repeat a sequence NAK names it to the sender (in the AETH's
// MSN field), which takes it as placed and every packet before it that
// it has not heard of as lost.
func (r *Receiver) NewestPlaced() (wire.PSN, bool) {
	for i := len(r.placed) - 1; i >= 0; i-- {
		if w := r.placed[i]; w != 0 {
			return r.exp.Add(uint32(64*i + 63 - bits.LeadingZeros64(w))), true
		}
	}
	return 0, false
}

// Selective reports whether the receiver runs selective repeat.
func (r *Receiver) Selective() bool { return r.sr }

// shift moves the placed bitmap down by k PSNs.
func (r *Receiver) shift(k int) { shiftBits(r.placed[:], k) }

// shiftBits moves a bitmap down by k bits (bit k becomes bit 0); a k
// outside [0, len(b)*64) clears it.
func shiftBits(b []uint64, k int) {
	if k < 0 || k >= len(b)*64 {
		clear(b)
		return
	}
	w, sh := k/64, uint(k%64)
	for i := range b {
		var v uint64
		if j := i + w; j < len(b) {
			v = b[j] >> sh
			if sh > 0 && j+1 < len(b) {
				v |= b[j+1] << (64 - sh)
			}
		}
		b[i] = v
	}
}

// RepeatedNAK reports whether the NAK the last Classify asked for was a
// repeat of its gap's (SeqNAKRepeat), not the gap's first.
func (r *Receiver) RepeatedNAK() bool { return r.nakRepeat }

// Expected is the PSN of the next new request.
func (r *Receiver) Expected() wire.PSN { return r.exp }

// MSN is the number of messages completed, modulo 2^24, as AETHs carry it.
func (r *Receiver) MSN() uint32 { return r.msn & 0xffffff }

// Stats returns the receiver's counters.
func (r *Receiver) Stats() ReceiverStats { return r.stats }

// Classify classifies a request's PSN at now; for OutOfSequence, nak
// says whether to NAK the gap.
func (r *Receiver) Classify(psn wire.PSN, now time.Time) (c Class, nak bool) {
	switch d := psn.Diff(r.exp); {
	case d < 0:
		r.stats.Duplicates++
		r.lossy = true
		if !r.retrying || psn.Before(r.lastDup) {
			r.goBack, r.hasGoBack = psn, true // a retry starts here
		}
		r.retrying, r.lastDup = true, psn
		r.idleDone = false // the sender is back: its answer may be lost again
		return Duplicate, false
	case d > 0 && r.sr && d < SRWindow && r.bit(int(d)):
		return AlreadyPlaced, false
	case d > 0:
		r.stats.OutOfSequence++
		r.lossy = true
		c = OutOfSequence
		if r.sr && d < SRWindow {
			c = Ahead
		}
		switch since := now.Sub(r.lastNAK); {
		case !r.nakSent && since >= SeqNAKInterval:
			r.nakSent, r.lastNAK, r.nakAgain, r.nakRepeat = true, now, SeqNAKRepeat, false
			r.quietWait = GapQuiet
			r.quiet(now)
			return c, true
		case r.nakSent && since >= r.nakAgain: // the NAK may be lost: again
			r.lastNAK, r.nakAgain, r.nakRepeat = now, min(2*r.nakAgain, SeqNAKRepeatMax), true
			r.stats.NAKsRepeated++
			r.quiet(now)
			return c, true
		}
		r.quiet(now)
		r.stats.NAKsSuppressed++
		return c, false
	}
	return New, false
}

// quiet sets, for a NAKed go-back-N gap, when its sender counts as quiet:
// the quiet wait after now (a request beyond the gap, or its NAK).
func (r *Receiver) quiet(now time.Time) {
	if r.nakSent && !r.sr {
		r.quietAt, r.quietNAKs, r.quietKind = now.Add(r.quietWait), 0, QuietGap
	}
}

// QuietKind is what a go-back-N receiver's quiet deadline repairs when
// the sender sends nothing before it.
type QuietKind uint8

const (
	// QuietNone: no deadline.
	QuietNone QuietKind = iota
	// QuietGap: a gap NAKed before; NAK it again.
	QuietGap
	// QuietTail: a message left open (its last packet, or the ACK that
	// would have let the sender go on, was lost, and nothing beyond it
	// tells the receiver): NAK the next PSN.
	QuietTail
	// QuietACK: the last ACK, on a QP that has seen loss (it may have
	// been lost, and the sender waits for it): send it again, once.
	QuietACK
	// QuietIdle: nothing came while the application waits for a message
	// (Expecting): the sender's last message may have been lost with
	// nothing behind it, or the ACK of it; NAK the expected PSN, which
	// acknowledges what came and asks for what did not (a sender with
	// nothing outstanding ignores it).
	QuietIdle
	// QuietRead: a requester that has gone back for READs on a QP that
	// has seen loss went quiet after their responses: answer again,
	// unasked, the READs from the PSN it last went back to (ReadsToRepeat).
	// rxe's completer, once a READ response gap has started a retry,
	// drops every response out of order and every NAK until one comes in
	// order; when the response it waits for is lost again it sends
	// nothing more before its local ACK timeout (2.1 s on rdma_cm's QPs),
	// and only that response, sent again, moves it on.
	QuietRead
)

// QuietDeadline is when the sender counts as quiet (Quiet); zero without
// a deadline.
func (r *Receiver) QuietDeadline() time.Time { return r.quietAt }

// Opened sets, go-back-N, the quiet deadline of a message the request
// just executed left open (not its last packet): IdleQuiet on, its next
// packet is taken as lost (QuietTail). A NAKed gap's deadline stays.
func (r *Receiver) Opened(now time.Time) {
	if !r.sr && r.quietKind != QuietGap {
		r.quietAt, r.quietKind, r.quietWait, r.quietNAKs = now.Add(IdleQuiet), QuietTail, IdleQuiet, 0
	}
}

// Acknowledged sets, go-back-N on a QP that has seen loss, the quiet
// deadline of the ACK just sent: GapQuiet on, with nothing new from the
// sender, it is sent again (QuietACK). Another deadline stays.
func (r *Receiver) Acknowledged(now time.Time) {
	if !r.sr && r.lossy && r.quietKind == QuietNone {
		r.quietAt, r.quietKind = now.Add(GapQuiet), QuietACK
	}
}

// Expecting arms, go-back-N, the idle probe of a QP whose application
// waits for a message (a receive is posted), if no other quiet deadline
// is armed and the probes have not run out since the last request:
// IdleQuiet on, with nothing from the sender, the expected PSN is NAKed
// (QuietIdle).
func (r *Receiver) Expecting(now time.Time) {
	if !r.sr && !r.idleDone && r.quietKind == QuietNone {
		r.quietAt, r.quietKind, r.quietWait, r.quietNAKs = now.Add(IdleQuiet), QuietIdle, IdleQuiet, 0
	}
}

// NoteLoss records loss the receiver did not see itself (the QP's own
// requester sent packets again): its ACKs are then sent again when the
// sender goes quiet (Acknowledged).
func (r *Receiver) NoteLoss() { r.lossy = true }

// AnsweredRead arms, go-back-N on a QP that has seen loss, the repair of
// READs whose requester goes quiet (QuietRead): a READ request, new or
// duplicate, was queued for its responses at now. It replaces an idle
// probe's or an ACK's deadline, not a gap's or an open message's.
func (r *Receiver) AnsweredRead(now time.Time) {
	if !r.sr && r.lossy && r.quietKind != QuietGap && r.quietKind != QuietTail {
		r.quietAt, r.quietKind, r.quietWait, r.quietNAKs = now.Add(IdleQuiet), QuietRead, IdleQuiet, 0
	}
}

// ReadsSent moves a READ repair's deadline to the current wait after now:
// the responses queued went out at now, and the requester's quiet counts
// from the last of them.
func (r *Receiver) ReadsSent(now time.Time) {
	if r.quietKind == QuietRead && !r.quietAt.IsZero() {
		r.quietAt = now.Add(r.quietWait)
	}
}

// RepairsReads reports whether a quiet deadline that fired (Quiet) should
// answer READs again as well as NAK (QuietGap, QuietTail, QuietIdle): the
// requester went back for READs on this QP, and a requester quiet at a
// gap may wait on a READ response of its retry that was lost again; an
// rxe in a retry acts on no NAK before a response comes in order
// (rxe_comp.c: any answer beyond its oldest READ only asks for the retry
// it has begun), and the requests of its retry that came in order do not
// say that it has had that response. The first ReadRepairs quiet
// deadlines in a row do, the rest NAK only.
func (r *Receiver) RepairsReads() bool {
	return !r.sr && r.hasGoBack && r.quietNAKs <= ReadRepairs
}

// ReadRepeat is a READ to answer again (QuietRead): its record, and the
// response packets to send, From up to Until (exclusive) packets into it.
type ReadRepeat struct {
	ReadRecord
	From, Until uint32
}

// ReadsToRepeat fills out with the READs a quiet requester may still wait
// for, oldest first, and returns how many: those remembered that end at
// or after the PSN the requester last went back to, the first from that
// PSN on (every READ remembered when it never went back), and up to
// readRepeatMargin READs before them whole, if they are small (the first
// requests of the retry may have been lost on the way, so the PSN it went
// back to can lie before the first one seen), ReadRepeatBudget response
// packets in all. A requester drops the responses before the one it
// waits for, and its wait is most often near where it went back.
func (r *Receiver) ReadsToRepeat(out *[MaxRdAtomic]ReadRepeat) int {
	var recs [MaxRdAtomic]ReadRecord
	k, start := 0, -1
	for i := range len(r.reads) {
		rr := r.reads[(r.readNext+i)%len(r.reads)]
		if !rr.valid {
			continue
		}
		if start < 0 && (!r.hasGoBack || !rr.PSN.Add(readPackets(rr)-1).Before(r.goBack)) {
			start = k
		}
		recs[k] = rr
		k++
	}
	if start < 0 {
		return 0 // every READ remembered ends before it: nothing to wait for
	}
	from := uint32(0)
	if r.hasGoBack && recs[start].PSN.Before(r.goBack) {
		from = uint32(r.goBack.Diff(recs[start].PSN))
	}
	m, margin := start, uint32(0)
	for m > 0 && start-m < readRepeatMargin && margin+readPackets(recs[m-1]) <= ReadRepeatBudget/4 {
		m--
		margin += readPackets(recs[m])
	}
	if m < start {
		from = 0 // READs before it go too: this one whole, in order
	}
	n, left := 0, uint32(ReadRepeatBudget)
	for i := m; i < k && left > 0; i++ {
		f := uint32(0)
		if i == start {
			f = from
		}
		until := min(readPackets(recs[i]), f+left)
		out[n] = ReadRepeat{ReadRecord: recs[i], From: f, Until: until}
		n++
		left -= until - f
	}
	return n
}

// readPackets is the response packets of a READ (one for a READ of none).
func readPackets(rr ReadRecord) uint32 { return max(rr.Packets, 1) }

// readRepeatMargin is how many READs before the one the requester last
// went back into a READ repair sends too (when they are small).
const readRepeatMargin = 2

// ReadRepeatBudget bounds a READ repair, in response packets: a requester
// of large READs (8 MiB) that goes quiet between them would else be sent
// megabytes it has had.
const ReadRepeatBudget = 256

// Quiet reports, at now, what to send because the sender has been quiet
// until the deadline: for QuietGap and QuietTail a NAK of the expected
// PSN (counted as repeats, RepeatedNAK, for a gap), the next wait twice
// as long, the timer stopping after GapQuietNAKs in a row until a
// request comes; for QuietACK the ACK of what came in order, once; for
// QuietRead the READs again (ReadsToRepeat), the next wait twice as
// long, ReadRepairs times.
func (r *Receiver) Quiet(now time.Time) QuietKind {
	if r.quietAt.IsZero() || now.Before(r.quietAt) {
		return QuietNone
	}
	k := r.quietKind
	if k == QuietACK {
		r.quietAt, r.quietKind = time.Time{}, QuietNone
		r.stats.ACKsRepeated++
		return k
	}
	r.quietWait = min(2*r.quietWait, GapQuietMax)
	r.quietAt = now.Add(r.quietWait)
	if k == QuietRead {
		if r.quietNAKs++; r.quietNAKs >= ReadRepairs {
			r.quietAt, r.quietKind = time.Time{}, QuietNone
		}
		r.stats.ReadRepairs++
		return k
	}
	if r.quietNAKs++; r.quietNAKs >= GapQuietNAKs {
		r.quietAt = time.Time{}
		if k == QuietIdle {
			// Only a request (or a duplicate: the sender is back) arms
			// the probe again.
			r.idleDone, r.quietKind = true, QuietNone
		}
	}
	r.lastNAK = now
	switch k {
	case QuietTail:
		r.stats.TailNAKs++
		return k
	case QuietIdle:
		r.stats.IdleNAKs++
		return k
	}
	r.nakRepeat = true
	r.stats.NAKsRepeated++
	r.stats.QuietNAKs++
	return k
}

// Executed moves the expected PSN past a request that occupied span PSNs
// (1, or a READ's response packets); done says it completed a message,
// which moves the MSN.
//
// With selective repeat, the expected PSN then moves past the packets
// placed ahead that now follow in order, each a whole message (a
// WRITE_ONLY), so that the next ACK acknowledges them all.
func (r *Receiver) Executed(span uint32, done bool) { r.execute(span, done, false) }

// execute is Executed; answered (a READ or an atomic, whose response
// acknowledges it) leaves the PSN plain ACKs name (AckPSN) where it was.
func (r *Receiver) execute(span uint32, done, answered bool) {
	span = max(span, 1)
	r.exp = r.exp.Add(span)
	r.nakSent = false // a gap closed
	r.quietAt, r.quietKind, r.idleDone, r.retrying = time.Time{}, QuietNone, false, false
	if done {
		r.msn++
	}
	if r.sr {
		r.shift(int(span))
		k := 0
		for k < SRWindow && r.bit(k) {
			k++
		}
		if k > 0 {
			r.exp = r.exp.Add(uint32(k))
			r.msn += uint32(k)
			r.shift(k)
		}
	}
	if !answered {
		r.ackNext = r.exp
	}
}

// ExecutedRead records a READ executed at the expected PSN and moves past
// it; it returns the MSN its responses carry.
func (r *Receiver) ExecutedRead(rec ReadRecord) uint32 {
	psn, msn := r.exp, r.msn+1 // before any packets placed ahead that follow
	r.execute(rec.Packets, true, true)
	rec.valid, rec.PSN, rec.MSN = true, psn, msn
	r.reads[r.readNext] = rec
	r.readNext = (r.readNext + 1) % len(r.reads)
	return rec.MSN
}

// ExecutedAtomic records an atomic executed at the expected PSN, with the
// original value it returned, and moves past it.
func (r *Receiver) ExecutedAtomic(orig uint64) {
	psn, msn := r.exp, r.msn+1
	r.execute(1, true, true)
	r.atomics[r.atomicNext] = AtomicRecord{valid: true, PSN: psn, Orig: orig, MSN: msn}
	r.atomicNext = (r.atomicNext + 1) % len(r.atomics)
}

// AtomicsToRepeat fills out with the atomics a quiet requester may still
// wait for, oldest first, and returns how many: every one remembered,
// even those before the PSN it last went back to. An atomic's response
// is one packet; a requester drops those before the one it waits for,
// and an rxe in a retry heeds nothing else: one that a sequence NAK sent
// back to a later PSN while an older atomic's response was lost waits on
// that older one (rxe_comp.c ignores the later responses while its retry
// runs), and through 10 % loss atomic_bw's rxe waited out its 2.1 s
// timer for it when the repair began at the PSN it went back to.
func (r *Receiver) AtomicsToRepeat(out *[MaxRdAtomic]AtomicRecord) int {
	n := 0
	for i := range len(r.atomics) {
		a := r.atomics[(r.atomicNext+i)%len(r.atomics)]
		if a.valid {
			out[n] = a
			n++
		}
	}
	return n
}

// LastAnswered reports whether the last request executed was a READ or
// an atomic: its response is its acknowledgement. A plain ACK of
// Expected()-1 would then name the READ's (or atomic's) last PSN, and an
// rxe requester whose response was lost completes the READ on such an
// ACK without its data (rxe_comp.c: an ACK of a pending WQE's last PSN
// completes it), as an rping server then wrote back the previous ping.
func (r *Receiver) LastAnswered() bool { return r.ackNext != r.exp }

// AckPSN is the PSN a plain ACK names: the last SEND or WRITE executed
// (with the packets placed ahead that followed it), never a READ's or an
// atomic's, whose responses acknowledge them (as rxe's responder keeps
// its ack_psn): an rxe requester whose READ response was lost completes
// the READ without its data on an ACK of the READ's PSN.
func (r *Receiver) AckPSN() wire.PSN { return r.ackNext.Sub(1) }

// FindRead returns the READ a duplicate READ request asks again for: the
// same R_Key, its PSN among the READ's, and its range inside the READ's
// (as rxe checks a duplicate READ against the resource it finds). A
// duplicate that matches none must be dropped: a NAK for it could fail
// the live connection.
func (r *Receiver) FindRead(psn wire.PSN, va uint64, rkey, length uint32) (ReadRecord, bool) {
	for _, rr := range r.reads {
		if !rr.valid || rkey != rr.RKey || psn.Before(rr.PSN) || uint32(psn.Diff(rr.PSN)) >= max(rr.Packets, 1) {
			continue
		}
		if va >= rr.VA && uint64(length) <= uint64(rr.Length) && va-rr.VA <= uint64(rr.Length)-uint64(length) {
			return rr, true
		}
	}
	return ReadRecord{}, false
}

// FindAtomic returns the result of the atomic executed at psn, if the
// receiver remembers it.
func (r *Receiver) FindAtomic(psn wire.PSN) (AtomicRecord, bool) {
	for _, a := range r.atomics {
		if a.valid && a.PSN == psn {
			return a, true
		}
	}
	return AtomicRecord{}, false
}

// Warm reads the cache lines every request reads (see package warm),
// returning the sum of the words read.
func (r *Receiver) Warm() uintptr {
	return warm.Lines(unsafe.Pointer(r), unsafe.Offsetof(r.stats))
}
