package reliability

import (
	"math"
	"math/bits"
	"sort"
	"time"
	"unsafe"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/internal/warm"
)

// Kind is what an entry's packet asks of the responder, which decides
// what retires it.
type Kind uint8

const (
	// Data is a SEND or WRITE packet: a cumulative ACK covering its PSN
	// retires it.
	Data Kind = iota
	// Read is a READ request: it occupies the PSNs of its responses and
	// retires when the last of them has come.
	Read
	// Atomic is a CMP_AND_SWAP or FETCH_AND_ADD: its atomic ACK retires
	// it.
	Atomic
)

// Entry is one replay buffer entry: what the requester needs to send a
// packet again, never the payload itself. WQE, Offset and Length refer
// back to the source (the send queue entry and the bytes of its message
// the packet carries); PSN, Span, Opcode and AckReq are the header state.
type Entry struct {
	PSN    wire.PSN    // the packet's PSN (a READ's first response PSN)
	Span   uint32      // PSNs it occupies: 1, or a READ's response packets
	WQE    uint32      // the send queue index of its work request
	Offset uint32      // its payload's byte offset in the message
	Length uint32      // its payload's length
	Opcode wire.Opcode // as sent
	AckReq bool
	Kind   Kind
	// Consumes says the packet takes a receive WQE at the responder (a
	// SEND's first packet, a WRITE_WITH_IMM's last): end-to-end credits
	// count these.
	Consumes bool
	// Placeable says a selective-repeat peer places the packet even
	// ahead of order (a WRITE_ONLY without immediate data).
	Placeable bool
	Got       uint32 // READ: responses placed, in order
	done      bool   // READ or atomic: answered in full
	sent      time.Time
	resent    bool // sent again: its answer is no round-trip sample (Karn)
}

// last is the last PSN the entry occupies.
func (e *Entry) last() wire.PSN { return e.PSN.Add(e.Span - 1) }

// contains reports whether psn is one of the entry's PSNs.
func (e *Entry) contains(psn wire.PSN) bool {
	return !psn.Before(e.PSN) && uint32(psn.Diff(e.PSN)) < e.Span
}

// Params are a QP's reliability attributes, as verbs names them.
type Params struct {
	Timeout  uint8 // local ACK timeout exponent: 4.096 us x 2^Timeout; 0 means none (softrnic uses 100 ms)
	RetryCnt uint8 // retries after a timeout before IBV_WC_RETRY_EXC_ERR (3 bits)
	RNRRetry uint8 // retries after an RNR NAK before IBV_WC_RNR_RETRY_EXC_ERR; 7 is infinite
	// SelectiveRepeat: the peer places WRITE_ONLY packets that come ahead
	// of order (package reliability's Receiver with selective repeat), so
	// a NAK or a timeout resends the packet missing and the ones after it
	// that cannot be placed that way, not the whole window. Both ends
	// must enable it.
	SelectiveRepeat bool
	// NoCongestionControl turns congestion control off: no congestion window, no
	// pacing, no early probe; the replay allocation alone bounds what is
	// in flight (a NIC without congestion control, for comparison runs).
	NoCongestionControl bool
	// Delay chooses Swift's delay rule on top of the loss-driven window:
	// a round trip above the path's minimum by more than the target
	// delay shrinks the window before a shallow queue overflows, on paths
	// that mark no ECN.
	Delay DelayRule
	// Path, when set, is the round trips of the QPs this one shares its
	// path with: its early timer waits beyond the longest of theirs too.
	Path *PathRTT
	// DCQCN, when set (and congestion control is on), makes the QP's
	// congestion control DCQCN's rate-based reaction point instead of
	// the window: CNPs cut the rate, timers and a byte counter raise it,
	// losses and the round trip move nothing, and every packet the QP
	// sends (its READ responses too: RateHold) goes at the rate. The
	// window is IRN's BDP cap: the packets the line rate carries in the
	// path's least round trip (PathMTU bytes each), within the replay
	// allocation.
	DCQCN *DCQCNParams
	// PathMTU is the QP's path MTU in bytes, for the BDP cap (0: 4096).
	PathMTU int
	// MaxRdAtomic is how many READs and atomics may be outstanding
	// (max_rd_atomic): the responder remembers the answers of no more.
	// 0 means 1; it is at most MaxRdAtomic.
	MaxRdAtomic uint8
}

// MinTimeout is the shortest ACK timeout softrnic keeps: an engine on a
// loaded host can be descheduled for milliseconds, and a spurious
// go-back-N only adds load.
const MinTimeout = 10 * time.Millisecond

// maxBackoff bounds the exponent of the timer's doubling after
// consecutive timeouts.
const maxBackoff = 4

// AckTimeout is the IBTA Local ACK Timeout of exponent t (4.096 us x
// 2^t), at least MinTimeout; t of 0 (no timer) or beyond 31 is 100 ms.
func AckTimeout(t uint8) time.Duration {
	if t == 0 || t > 31 {
		return 100 * time.Millisecond
	}
	return max(time.Duration(4096<<t)*time.Nanosecond, MinTimeout)
}

// Verdict is what the sender makes of an ACK, a NAK or a response.
type Verdict uint8

const (
	// Ignored: it answers nothing outstanding (a stale copy, a PSN never
	// sent, a response out of its place), and changes nothing.
	Ignored Verdict = iota
	// Accepted: state moved (entries retired, a retransmission set up,
	// an RNR wait begun); the caller completes the work requests that
	// end before Una and sends what is due.
	Accepted
	// Failed: the QP is in error; the caller completes the oldest work
	// request with Status and flushes the rest.
	Failed
)

// SenderStats count one QP's sender events; those a NIC adds to its own
// counters come first, in one cache line (TransportStats).
type SenderStats struct {
	TransportStats
	GoBacks         uint64 // go-back-N restarts (NAKs, timeouts, READ gaps)
	Cuts            uint64 // congestion window reductions
	Probes          uint64 // of them go-back-N probes: the oldest unacknowledged packet alone
	SlowStartExits  uint64 // slow starts ended by a rising round trip, before a loss
	DelayCuts       uint64 // window cuts for a round trip above the target (queueing delay)
	CNPCuts         uint64 // window (or, with DCQCN, rate) cuts for congestion notifications (CNPs)
	RateIncreases   uint64 // DCQCN's rate-increase events (timer and byte counter)
	LossCuts        uint64 // DCQCN's rate cuts for losses (DCQCNParams.LossCut)
	HolesAskedAgain uint64 // selective repeat: READ holes asked for again as responses kept coming past them (before the timer)
	LostBehind      uint64 // selective repeat: go-backs for packets sent before a resend the peer acknowledged (repairLost)
	ReadRestarts    uint64 // go-back-N: READ repeats asked for again at once, their own first responses lost
}

// TransportStats are the sender's counters a NIC adds to its own (rxe's
// retransmission and timeout counters, and softrnic's replay stalls).
type TransportStats struct {
	Stalls        uint64        // times the gate held a packet for lack of a free entry
	Stalled       time.Duration // time spent so held
	Retransmitted uint64        // packets sent again
	Timeouts      uint64        // local ACK timeouts
	Early         uint64        // retransmissions on the round-trip estimate, before the local ACK timeout
	Stale         uint64        // answers ignored as outside the window
	CreditWaits   uint64        // times a SEND waited for the responder's receive credits
	NAKsOfRepair  uint64        // selective repeat: sequence NAKs of a hole already being repaired (reports, nothing sent again)
}

// Sender is the requester half of an RC QP's reliability: the PSN window
// [Una, Next), the replay entries of the packets in it, admission of new
// packets at the transmit gate, retirement by ACKs and responses, the
// go-back-N cursor, the local ACK timer and RNR waits. It does no I/O and
// reads no clock: the caller passes the time in.
type Sender struct {
	// The fields every packet sent and every ACK reads come first, in
	// as few cache lines as they fit: with thousands of QPs each QP's
	// state is cold when its turn comes, and each line it touches is a
	// miss. Recovery's state and the counters follow.

	alloc Allocation
	ring  []Entry // alloc.entries
	head  int
	n     int // entries in use: unacknowledged packets, oldest first
	// statsGen moves whenever a counter in stats does (count): a reader
	// that keeps the last one it saw reads the counters only after
	// they moved, not the whole struct per packet.
	statsGen uint32
	next     wire.PSN
	rdAtom   int // of them READs and atomics
	sinceAck int // packets admitted since the last that asked for an ACK
	pkts     int // packets in flight: the entries' PSNs not yet answered
	// rdPkts of them READ responses: what the peer will send this QP
	// that its port must take in (ReadInFlight).
	rdPkts int
	// acks: entries in use that asked for an ACK (or an atomic's
	// response), not READs: with rdPkts, the most the peer will answer
	// (Awaited).
	acks   int
	placed int // selective repeat: packets reported placed ahead (sacked's bits)
	resend int // entries from head still to send again; -1: none
	params Params

	deadline time.Time
	// The early retransmission timer the round-trip estimate sets: a
	// lost tail is sent again after about a round trip, not after the
	// local ACK timeout; only the local ACK timeout counts towards
	// retry_cnt.
	early        time.Time
	retries      int
	rnrTries     int
	backoff      uint
	earlyBackoff uint

	failed    bool
	rnrWait   bool
	stalled   bool
	probing   bool // go-back-N: a probe of Una is out (Tick's early timer)
	lossSeen  bool // a loss for DCQCN's LossCut, not yet taken
	byRate    bool // the QP runs DCQCN (rate), not the window (cc)
	marked    bool // a CNP has come: the path marks ECN (delayRule)
	resendOne bool // the resend is one READ's missing responses only
	timerBack bool // the resend is a timer's: the first entry goes even if sent again lately

	// End-to-end credits (IBTA 9.7.7.2): the responder's count of free
	// receive WQEs after it executed creditPSN, from an ACK that carried
	// one; rxe and others send none, and then nothing waits.
	creditValid bool
	credits     uint32
	creditPSN   wire.PSN

	// The controllers (congestion.go): the pacing, the round-trip
	// estimate and the window.
	pace pacer
	rtt  rttStats
	cc   congestion

	// Recovery's state, read only when it runs.
	resendPSN wire.PSN // the PSN the first of them is resent from (inside a READ)
	selFrom   wire.PSN // with selective repeat, the resend skips placeable entries after it
	// lostBefore: with selective repeat, packets sent before it and not
	// reported placed are lost (repairLost): the resend does not pass
	// over them. timerRepair is when the early timer's repair went.
	lostBefore  time.Time
	timerRepair time.Time
	readUntil   wire.PSN // with resendOne: ask up to here (exclusive)
	probePSN    wire.PSN // the probe's last PSN
	gapAsked    bool     // a READ response gap has been asked for again
	rdLast      wire.PSN // with go-back-N, the last READ response's PSN, Una or past it
	status      ibv.WCStatus
	failUna     wire.PSN // Una when it failed: the work before it completed

	stallSince time.Time
	stats      SenderStats

	// Selective repeat for READs: bit i, the response at PSN rdBase+i
	// has been placed ahead of order; rdAlign keeps rdBase at Una.
	rdPlaced [SRWindow / 64]uint64
	rdBase   wire.PSN
	// rdHigh is one past the highest READ response PSN seen; a response
	// beyond it opens a new hole, [rdHigh, psn), asked for at once (or
	// queued in holes behind the one being asked for), as IRN's
	// requester asks for each gap once it sees it.
	rdHigh wire.PSN
	holes  [maxHoles]hole
	holeN  int
	// rdAskAt is when holes were last asked for: responses that still
	// come past them a round trip later ask again.
	rdAskAt time.Time

	rate dcqcn // DCQCN's reaction point, with byRate

	// Selective repeat for WRITEs, as IRN's sender keeps it: the peer
	// NAKs each packet it places ahead of a hole, the NAK naming the
	// packet (OnPlaced); bit i of sacked, the packet at PSN sBase+i has
	// been placed (sAlign keeps sBase at Una); placed counts the bits:
	// in flight no longer, they leave room in the window while the hole
	// is repaired, as SACKed segments do in TCP's pipe. sHigh is one past
	// the highest PSN reported placed: a packet before it that is neither
	// placed nor sent again within a round trip is lost, and is sent
	// again at once (every hole, not one at a time).
	sacked [SRWindow / 64]uint64
	sBase  wire.PSN
	sHigh  wire.PSN
	// bw: with selective repeat on the window (not DCQCN), the delivery
	// rate whose BDP caps the window (Window).
	bw deliveryRate
}

// PaceAt is when pacing lets the next packet go; the gate holds a packet
// before it. Zero before the first round-trip sample (no pacing yet).
func (s *Sender) PaceAt() time.Time { return s.pace.at }

// paced reports whether pacing holds a packet at now.
func (s *Sender) paced(now time.Time) bool { return !s.params.NoCongestionControl && s.pace.holds(now) }

// noteCapRate gives DCQCN the rate the BDP cap allows, for a first cut.
func (s *Sender) noteCapRate() {
	s.rate.capRate = 0
	if s.rtt.min > 0 {
		s.rate.capRate = float64(s.bdpCap()*(s.pathMTU()+PacketOverhead)*8) / s.rtt.min.Seconds()
	}
}

// takeLoss gives DCQCN a loss seen since the last call.
func (s *Sender) takeLoss(now time.Time) {
	if s.lossSeen {
		s.lossSeen = false
		s.noteCapRate()
		if s.rate.onLoss(now, s.rtt.srtt) {
			s.stats.LossCuts++
		}
	}
}

// spendEntry moves the pacing clock on by k packets of entry e: by the
// window's spacing, or with DCQCN by their bytes at its rate.
func (s *Sender) spendEntry(now time.Time, e *Entry, k uint32) {
	if !s.byRate {
		s.cc.onSent(now)
		rtt, w := s.rtt.srtt, s.cc.paceWindow()
		if w < 1 && s.rtt.min > 0 {
			// Below one packet the pacing is the QP's rate: spaced over
			// the least round trip, the same for every QP of a path,
			// not over a smoothed one that a repair's late answer
			// stretched (one QP of an incast would else send at a
			// quarter of another's rate with the same window).
			rtt = s.rtt.min
		}
		if c := s.srCap(); c > 0 && float64(c) < w {
			// The window is the path's BDP at the delivery rate over the
			// least round trip (Window): paced over the smoothed one,
			// which a queue (or READ responses queued behind others)
			// lengthens, it would go slower than the rate it was sized
			// for, and the rate it measures would shrink it again. The
			// congestion window, when it is the smaller, is a window over
			// the smoothed round trip (below a packet, the pacing is all
			// that holds the QP back).
			rtt, w = s.rtt.min, float64(c)
		}
		gain := paceGain
		if s.cc.cwnd < s.cc.ssthresh {
			gain = slowStartPace // the window doubles a round trip: pace ahead of it
		}
		s.pace.spend(now, k, rtt, w, gain, s.cc.cwnd >= s.cc.limit/2)
		return
	}
	s.spendBytes(now, e.bytes(k))
}

// spendBytes counts bytes sent against DCQCN's rate and byte counter.
func (s *Sender) spendBytes(now time.Time, bytes uint64) {
	s.rate.onSent(now, bytes)
	// Before any CNP, and back at the line rate, the QP goes at the line
	// rate, as a NIC's port lets it: unpaced, an engine that outruns the
	// link (9 Gbit/s into a 2 Gbit/s one) put a whole BDP cap into the
	// queue at once each time a QP's rate came back to the line rate.
	// Idle time buys a burst as the window's pacing allows one: four
	// packets, or one for a QP paced slower than that in paceBurstTime
	// (pacer.spend says why).
	one := s.rate.gap(uint64(s.pathMTU() + PacketOverhead))
	s.pace.spendFor(now, s.rate.gap(bytes), idleBurst(one, paceBurst))
}

// PacketOverhead is the bytes a RoCEv2 packet carries besides its
// payload, as DCQCN's rate counts them: Ethernet (with FCS), IPv4, UDP,
// BTH and ICRC, and a RETH or AETH.
const PacketOverhead = 18 + 20 + 8 + 12 + 4 + 16

// bytes is what k packets of e put on the wire, as DCQCN counts them: a
// data packet its payload, a READ request or atomic its own headers
// (the responses are the peer's to pace).
func (e *Entry) bytes(k uint32) uint64 {
	if e.Kind != Data {
		return uint64(k) * PacketOverhead
	}
	return uint64(e.Length) + uint64(k)*PacketOverhead
}

// DelayRule says when a sender applies the delay rule.
type DelayRule uint8

const (
	// DelayAuto applies it on paths whose minimum round trip is at
	// least DelayAutoRTT: there queueing delay stands out of a host's
	// scheduling noise (about 100 us on a busy 2-core host), while on a
	// short path the noise alone would hold the sender below the link
	// rate; and only until the QP's first CNP: a path that marks ECN
	// tells its queue more exactly than the round trip does, and the
	// two rules cutting at once for one queue (the delay target, 1/8 of
	// a 1 ms round trip, is a queue of 32 KiB at 2 Gbit/s, where a
	// shallow switch marks) leave the link a quarter idle.
	DelayAuto DelayRule = iota
	DelayOff
	DelayOn
)

// DelayAutoRTT is the least minimum round trip on which DelayAuto applies
// the delay rule.
const DelayAutoRTT = 500 * time.Microsecond

// delayRule reports whether the delay rule applies now.
func (s *Sender) delayRule() bool {
	switch s.params.Delay {
	case DelayOn:
		return true
	case DelayAuto:
		return s.rtt.min >= DelayAutoRTT && !s.marked
	}
	return false
}

// minEarly and minProbe bound the early retransmission timer from below.
// With selective repeat, between softrnic peers, it resends what the
// peer lacks after about a round trip (at least minEarly). With go-back-N
// it sends one probe, the oldest unacknowledged packet, never the
// window, after two round trips and at least minProbe (Linux's tail loss
// probe): any peer may be on the other end, and a slow one (an emulated
// rxe) must not see duplicates on a path that loses nothing, while a lost
// tail or a lost retransmission is still found long before the local ACK
// timeout. Either waits beyond the longest round trip seen too (twice it
// for the probe): a peer that was once starved of CPU for tens of
// milliseconds (a loaded host) may be again, and what it has not yet
// answered is not lost.
const (
	minEarly = time.Millisecond
	minProbe = 20 * time.Millisecond
)

// fewInFlight is IRN's N: a selective-repeat QP with no more packets
// than this in flight arms its early timer on its own round trip alone
// (armEarly).
const fewInFlight = 3

// firstRTT is the round trip a selective-repeat QP assumes before it or
// any QP on its path has seen one: its early timer then fires after 3 ms
// (srtt + 4 rttvar), not after the local ACK timeout (67 ms at the usual
// 14), and the path's samples take over from the next arming.
const firstRTT = time.Millisecond

// firstProbeRTT is the round trip a go-back-N QP assumes before it or any
// QP on its path has seen one: its probe goes after 150 ms (2 srtt + 4
// rttvar), far beyond any answer a live peer gives, even an emulated
// one, and far short of the local ACK timeout.
const firstProbeRTT = 50 * time.Millisecond

// maxHoles is how many READ response holes a selective-repeat sender
// queues to ask for behind the one it is asking for; one beyond them
// waits for the early timer, which asks for every hole the bitmap shows.
const maxHoles = 8

// hole is a range of READ response PSNs to ask for again, [from, until).
type hole struct{ from, until wire.PSN }

// NewSender makes a sender whose first PSN is psn, holding its entries in
// alloc (from Pool.Reserve; a zero Allocation admits nothing).
func NewSender(alloc Allocation, psn wire.PSN, p Params) *Sender {
	s := &Sender{}
	s.Init(alloc, psn, p)
	return s
}

// Init sets the sender up in place (a NIC keeps its senders in an array).
func (s *Sender) Init(alloc Allocation, psn wire.PSN, p Params) {
	psn &= wire.PSNMask
	*s = Sender{alloc: alloc, ring: alloc.entries, next: psn, params: p, resend: -1, cc: newCongestion(len(alloc.entries)), sBase: psn, sHigh: psn}
	if p.DCQCN != nil && !p.NoCongestionControl {
		s.byRate, s.rate = true, newDCQCN(*p.DCQCN)
	}
}

// OnCNP takes a congestion notification for the QP: its packets crossed
// a congested switch. The window shrinks by alpha/2, at most once per
// round trip, as DCQCN cuts a rate.
func (s *Sender) OnCNP(now time.Time) {
	if s.byRate {
		s.noteCapRate()
		if s.rate.onCNP(now) {
			s.stats.CNPCuts++
		}
		return
	}
	s.marked = true
	if s.cc.onCNP(now, s.rtt.srtt) {
		s.stats.CNPCuts++
	}
}

// Rate is DCQCN's current rate in bits per second, and whether a CNP
// has limited it; 0 and false for a QP without DCQCN.
func (s *Sender) Rate() (bits float64, limited bool) {
	if !s.byRate {
		return 0, false
	}
	return s.rate.rate(), s.rate.limited()
}

// RateHold reports whether the QP's rate holds a packet it answers with
// (a READ response) at now, and until when; never without DCQCN.
func (s *Sender) RateHold(now time.Time) (until time.Time, held bool) {
	if !s.byRate {
		return time.Time{}, false
	}
	held = s.pace.holds(now) && s.ratePaced(now) // the wait may shrink first
	return s.pace.at, held
}

// RateSent counts a packet of bytes the QP answered with (a READ
// response) against its rate, with DCQCN.
func (s *Sender) RateSent(now time.Time, bytes int) {
	if s.byRate {
		s.spendBytes(now, uint64(bytes))
	}
}

// Window is the congestion window, in packets: a new packet may go out
// while fewer than that are in flight (a READ counts the response packets
// it asks for).
func (s *Sender) Window() int {
	if s.byRate {
		return s.bdpCap()
	}
	w := s.cc.window()
	if c := s.srCap(); c > 0 {
		w = min(w, c)
	}
	return w
}

// srCap is, with selective repeat, the delivery rate's BDP that caps the
// window (0: none yet); 0 without selective repeat, whose QPs do not
// read the delivery rate's state.
func (s *Sender) srCap() int {
	if !s.params.SelectiveRepeat {
		return 0
	}
	return s.bw.cap(s.rtt.min)
}

// bdpCap is IRN's cap on what a DCQCN sender keeps in flight: the line
// rate's packets in the least round trip seen, with an eighth more, and
// at least initialWindow; initialWindow before a round trip is known (the
// replay allocation then let 64 QPs of an incast, all at the line rate
// before their first CNP, pour their whole queues into a switch queue of
// 32 frames, and the few whose packets got through finished at a fifth of
// the others' time). It opens as slow start opens a window: by one packet
// for each packet acknowledged, doubling a round trip, up to the BDP.
// Opened at once, five QPs at the line rate put five BDPs in flight in
// their second round trip, before the first CNPs came back: through a 1
// ms path's queue of a quarter BDP, a third of the drops of a whole run
// came in those two milliseconds.
func (s *Sender) bdpCap() int {
	n := max(len(s.ring), 1)
	if s.rtt.min == 0 {
		return min(n, initialWindow)
	}
	bdp := s.rate.p.LineRate * s.rtt.min.Seconds() / 8 / float64(s.pathMTU()+PacketOverhead)
	return min(n, max(initialWindow, int(math.Ceil(bdp*9/8))), s.rate.opened)
}

// pathMTU is Params.PathMTU, 4096 when unset.
func (s *Sender) pathMTU() int {
	if s.params.PathMTU <= 0 {
		return 4096
	}
	return s.params.PathMTU
}

// InFlight is the packets sent and not yet answered (with selective
// repeat, not reported placed either): what the window counts.
func (s *Sender) InFlight() int { return s.pkts - s.placed }

// ReadInFlight is the number of READ response packets asked for and not
// yet placed: what the responder may still send this QP.
func (s *Sender) ReadInFlight() int { return s.rdPkts }

// Awaited is how many packets the peer may still send this QP in answer
// to what is in flight: the READ responses (ReadInFlight), and an ACK or
// an atomic's response for each other packet that asked for one (the
// peer may coalesce ACKs, never send more). Its port must have room for
// them.
func (s *Sender) Awaited() int { return s.rdPkts + s.acks }

// RTT is the smoothed round-trip estimate (0 before the first sample).
func (s *Sender) RTT() time.Duration { return s.rtt.srtt }

// sample updates the round-trip estimate, and the window by the delay
// rule.
func (s *Sender) sample(d time.Duration, now time.Time) {
	if d > 0 && s.params.Path != nil {
		s.params.Path.Sample(d, now)
	}
	if !s.rtt.update(d) || !s.delayRule() || s.params.NoCongestionControl || s.byRate {
		return
	}
	exit, cut := s.cc.onDelay(&s.rtt, now)
	if exit {
		s.stats.SlowStartExits++
	}
	if cut {
		s.stats.DelayCuts++
	}
}

// cut reacts to a loss of the packet at psn: the window halves, once for
// all losses among the packets in flight when it does.
func (s *Sender) cut(psn wire.PSN, placeable bool) {
	if s.byRate {
		s.lossSeen = true // DCQCN cuts its rate at the gate's next call (LossCut)
		return
	}
	if s.params.SelectiveRepeat && placeable {
		// IRN's rule: with selective repeat a lost packet the peer places
		// ahead (a WRITE_ONLY, or a READ response this side places) costs
		// one packet, and the BDP cap (Window) bounds what is in flight;
		// congestion is ECN's to signal (OnCNP). A go-back-N from a gap
		// (a timeout, a SEND) still cuts.
		return
	}
	if s.cc.onLoss(psn, s.next) {
		s.stats.Cuts++
	}
}

// Allocation returns the sender's reserved entries, for Pool.Release
// after Reset.
func (s *Sender) Allocation() Allocation { return s.alloc }

// Una is the oldest unacknowledged PSN (Next when nothing is). A failed
// sender keeps the Una it failed at: the work before it succeeded, the
// work from it on did not.
func (s *Sender) Una() wire.PSN {
	if s.failed {
		return s.failUna
	}
	if s.n == 0 {
		return s.next
	}
	e := &s.ring[s.head]
	if e.Kind == Read {
		return e.PSN.Add(e.Got)
	}
	return e.PSN
}

// Next is the PSN the next new packet takes.
func (s *Sender) Next() wire.PSN { return s.next }

// Outstanding is the number of entries in use; Free the number left.
func (s *Sender) Outstanding() int { return s.n }
func (s *Sender) Free() int        { return len(s.ring) - s.n }

// Failed reports whether the sender is in error, and the status.
func (s *Sender) Failed() (bool, ibv.WCStatus) { return s.failed, s.status }

// Waiting reports whether an RNR NAK holds the sender until its timer.
func (s *Sender) Waiting() bool { return s.rnrWait }

// count returns the counters for an event of TransportStats to be
// added, and moves StatsGen. The others (the congestion window's cuts,
// go-backs, probes) are added in place: read only when asked (Stats),
// they need not send the engine to the QP's counters, cold with many
// QPs, after every delay cut.
func (s *Sender) count() *SenderStats {
	s.statsGen++
	return &s.stats
}

// StatsGen moves whenever a counter of TransportStats does: a caller
// that polls them per packet compares it with the one it saw last and
// reads them only when it moved.
func (s *Sender) StatsGen() uint32 { return s.statsGen }

// TransportStats returns the counters a NIC adds to its own: a caller
// that does so per packet reads one cache line of the sender's, not all
// of Stats.
func (s *Sender) TransportStats() TransportStats { return s.stats.TransportStats }

// Stats returns the sender's counters.
func (s *Sender) Stats() SenderStats {
	st := s.stats
	st.RateIncreases = s.rate.inc
	return st
}

// Deadline is when Tick next has something to do; zero when the timer is
// not armed.
func (s *Sender) Deadline() time.Time {
	if !s.early.IsZero() && !s.rnrWait {
		return s.early
	}
	return s.deadline
}

// entry returns the i-th entry from the oldest.
func (s *Sender) entry(i int) *Entry { return &s.ring[(s.head+i)%len(s.ring)] }

// Hold is why the transmit gate holds a packet back.
type Hold uint8

const (
	Go             Hold = iota // it went: Gate.PSN is its PSN
	HoldFailed                 // the QP failed
	HoldRNR                    // an RNR NAK's wait runs
	HoldResend                 // retransmissions go first (Resend)
	HoldRdAtomic               // the READs and atomics outstanding are at max_rd_atomic
	HoldReplayFull             // no replay entry free (a stall, counted)
	HoldWindow                 // the congestion window is full
	HoldPacing                 // pacing: until Gate.Until
	HoldCredits                // the responder's end-to-end credits are spent (counted)
)

var holdNames = [...]string{"go", "failed", "rnr wait", "resend", "rd_atomic limit", "replay full", "window", "pacing", "credits"}

func (h Hold) String() string {
	if int(h) < len(holdNames) {
		return holdNames[h]
	}
	return "hold(?)"
}

// Gate is the transmit gate's answer for one packet.
type Gate struct {
	Hold  Hold
	Until time.Time // with HoldPacing: when the packet may go at the current rate
	// Again, with HoldPacing, is when to ask again: Until, or sooner
	// when DCQCN's rate timer may raise the rate first (the wait then
	// shrinks, ratePaced); an engine may sleep until then.
	Again  time.Time
	PSN    wire.PSN // with Go: the packet's PSN
	AckReq bool     // with Go: whether it asks for an ACK
}

// Send is the transmit gate in one call: a new packet (its replay entry
// e, without PSN) goes now, admitted (Admit: an entry, its PSN, the
// timer), or the answer says why not: the QP failed, an RNR wait, a
// retransmission first, the READ/atomic limit, no replay entry free,
// the window, pacing until when, or the responder's credits.
func (s *Sender) Send(e Entry, now time.Time) Gate {
	g := s.Ask(e, now)
	if g.Hold == Go {
		g.PSN, g.AckReq = s.Admit(e, now)
	}
	return g
}

// Ask is the transmit gate's answer for a new packet without admitting
// it: Go (and nothing taken yet: Admit takes its entry and PSN), or why
// it must wait, as Send says. A requester asks before it resolves the
// packet's memory, so that a held packet costs no memory lookups.
func (s *Sender) Ask(e Entry, now time.Time) Gate {
	if h := s.hold(e.Kind, now); h != Go {
		g := Gate{Hold: h}
		if h == HoldPacing {
			g.Until, g.Again = s.pace.at, s.pace.at
			if s.byRate && s.rate.limited() && !s.rate.timerAt.IsZero() && s.rate.timerAt.Before(g.Again) {
				g.Again = s.rate.timerAt
			}
		}
		return g
	}
	if e.Consumes && !s.HasCredit() {
		return Gate{Hold: HoldCredits}
	}
	return Gate{}
}

// CanSend reports whether a new packet of kind k may go now (Send's
// gate, without the credits).
func (s *Sender) CanSend(k Kind, now time.Time) bool { return s.hold(k, now) == Go }

// hold is the gate's reason to hold a new packet of kind k at now, or Go.
func (s *Sender) hold(k Kind, now time.Time) Hold {
	s.takeLoss(now)
	switch {
	case s.failed:
		return HoldFailed
	case s.rnrWait:
		return HoldRNR
	case s.resend >= 0:
		return HoldResend
	case k != Data && s.rdAtom >= min(max(int(s.params.MaxRdAtomic), 1), MaxRdAtomic):
		return HoldRdAtomic
	case s.n == len(s.ring):
		if !s.stalled {
			s.stalled, s.stallSince = true, now
			s.count().Stalls++
		}
		return HoldReplayFull
	case s.params.NoCongestionControl:
		return Go
	case s.InFlight() >= s.Window():
		return HoldWindow
	case s.paced(now) && s.ratePaced(now):
		return HoldPacing
	}
	return Go
}

// ratePaced reports whether a QP paced at now still waits once DCQCN's
// timers have run to now: a wait the pacer measured at the rate of the
// last packet shrinks as the rate rises (a packet sent at the least rate,
// a megabit a second, would else hold the QP for 33 ms while its rate
// timer brought the rate back within a millisecond, and one QP of an
// incast would starve). A window's QP is paced as it was.
func (s *Sender) ratePaced(now time.Time) bool {
	if !s.byRate || !s.rate.limited() {
		return true
	}
	was := s.rate.rate()
	s.rate.advance(now)
	if r := s.rate.rate(); r > was {
		left := s.pace.at.Sub(now)
		s.pace.at = now.Add(time.Duration(float64(left) * was / r))
	}
	return s.pace.holds(now)
}

// Admit records a new packet in a free entry (CanSend must have said
// yes), gives it the next PSN (and a READ its Span), and arms the timer.
// It returns the entry's PSN and whether the packet asks for an ACK: the
// caller's AckReq (a message's last packet), a READ or atomic, the
// packet that fills the window, and one in every quarter window (at most
// 64 apart, as rxe asks every 64 PSNs): entries come free a few at a
// time, so the gate reopens smoothly instead of in bursts that would
// queue on the path.
func (s *Sender) Admit(e Entry, now time.Time) (wire.PSN, bool) {
	if e.Span == 0 {
		e.Span = 1
	}
	s.sinceAck++
	if e.Kind != Data || s.sinceAck >= min(64, max(1, s.Window()/4)) || s.InFlight()+int(e.Span) >= s.Window() || s.n+1 == len(s.ring) {
		e.AckReq = true
	}
	if e.AckReq {
		s.sinceAck = 0
	}
	e.PSN, e.Got, e.done, e.sent, e.resent = s.next, 0, false, now, false
	*s.entry(s.n) = e
	s.n++
	s.pkts += int(e.Span)
	s.spendEntry(now, &e, e.Span)
	if e.Kind != Data {
		s.rdAtom++
	}
	if e.Kind == Read {
		s.rdPkts += int(e.Span)
	} else if e.AckReq {
		s.acks++
	}
	s.alloc.pool.use(1)
	s.next = s.next.Add(e.Span)
	if s.deadline.IsZero() {
		s.arm(now)
	}
	return e.PSN, e.AckReq
}

func (s *Sender) arm(now time.Time) {
	// The local ACK timeout, or twice the longest round trip this QP or
	// its path has seen lately if that is longer: a queue of a thousand
	// QPs' packets, or a peer starved of CPU, answers later than the
	// timeout the QP was given, and what it has not yet answered is not
	// lost (as MinTimeout, a floor a loaded host needs).
	longest := max(s.rtt.max, s.params.Path.Max(now))
	s.deadline = now.Add(max(AckTimeout(s.params.Timeout), 2*longest) << s.backoff)
	s.armEarly(now)
}

// armEarly sets the early retransmission timer from the round-trip
// estimate, if it falls before the local ACK timeout.
func (s *Sender) armEarly(now time.Time) {
	s.early = time.Time{}
	path := s.params.Path.Max(now)
	if !s.params.NoCongestionControl {
		// Before its own first sample a QP takes the round trip the QPs
		// sharing its path have seen, or, before any of them has seen
		// one, firstRTT with selective repeat (one whose first packets
		// were all lost, in an incast, would else wait for the local ACK
		// timeout while the others took the link) and firstProbeRTT with
		// go-back-N, whose peer may be a slow rxe: a QP whose first
		// messages or their ACKs are lost (a connection's exchange over
		// a lossy path, where each resend's ACK is no sample either)
		// would else wait the local ACK timeout (2.1 s as rdma_cm sets
		// it) for each.
		srtt, rttvar := s.rtt.srtt, s.rtt.rttvar
		switch {
		case srtt > 0:
		case path > 0:
			srtt, rttvar = path, path/4
		case s.params.SelectiveRepeat:
			srtt, rttvar = firstRTT, firstRTT/2
		default:
			srtt, rttvar = firstProbeRTT, firstProbeRTT/4
		}
		longest := max(s.rtt.max, path)
		wait := max(srtt+4*rttvar, minEarly, longest+longest/4)
		if s.params.SelectiveRepeat && s.InFlight() <= fewInFlight {
			// IRN's RTO_low: with so few packets out, a loss has none
			// behind it to show it (a tail, or a QP of an incast paced
			// to a packet a round trip), and a spurious resend costs a
			// duplicate or two; the longest round trip seen on the path
			// (a queue that once stood, a peer once starved) would make
			// each such loss cost milliseconds.
			wait = max(srtt+4*rttvar, minEarly)
		}
		if !s.params.SelectiveRepeat {
			wait = max(2*srtt+4*rttvar, minProbe, 2*longest)
		}
		t := now.Add(wait << s.earlyBackoff)
		if s.readHolesOpen() && s.rtt.srtt > 0 {
			// READ holes were asked for: the answer is due within a round
			// trip (it goes ahead of the READs being answered); if it
			// does not come, the holes are asked for again then, not
			// after the longest round trip seen (a READ's samples hold
			// the responses queued before its first).
			hole := max(s.rtt.srtt+s.rtt.srtt/4, s.rtt.srtt+2*s.rtt.rttvar)
			if h := s.rdAskAt.Add(hole << s.earlyBackoff); h.Before(t) {
				t = max2t(h, now)
			}
		}
		if t.Before(s.deadline) {
			s.early = t
		}
	}
}

// readHolesOpen reports whether, with selective repeat, the oldest entry
// is a READ with responses missing below the highest one seen.
func (s *Sender) readHolesOpen() bool {
	return s.params.SelectiveRepeat && s.n > 0 && s.entry(0).Kind == Read && s.rdHigh.After(s.Una()) && !s.rdAskAt.IsZero()
}

func max2t(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// inWindow reports whether psn names a PSN sent and not acknowledged.
func (s *Sender) inWindow(psn wire.PSN) bool {
	return !psn.Before(s.Una()) && psn.Before(s.next)
}

// retire frees the entries an ACK of psn covers, in order: Data entries
// at or before psn, and READs and atomics answered in full (an ACK does
// not stand for READ data or an atomic result). It reports progress.
func (s *Sender) retire(psn wire.PSN, now time.Time) bool {
	k, acked, delivered := 0, 0, 0
	var rtt, resentRTT time.Duration
	repaired := false // the early timer's repair is among those acknowledged (repairLost)
	ambiguous := false
	for s.n > 0 {
		e := &s.ring[s.head]
		if e.Kind == Data && e.PSN.After(psn) || e.Kind != Data && !e.done {
			break
		}
		if e.Kind != Data {
			s.rdAtom--
		}
		s.pkts -= int(e.Span - e.Got)
		if e.Kind == Read {
			s.rdPkts -= int(e.Span - e.Got)
		} else if e.AckReq {
			s.acks--
		}
		acked += int(e.Span) // the window grows by packets, a READ's responses each one
		if e.Kind != Read {
			delivered += int(e.Span) // a READ's responses were counted as they came (ReadPlaced)
		}
		if e.resent {
			ambiguous = true
			if e.Kind != Read {
				resentRTT = now.Sub(e.sent)
				repaired = repaired || e.Kind == Data && e.sent.Equal(s.timerRepair)
			}
		} else if e.Kind != Read {
			// A READ is done when its last response has come: that
			// time includes its transfer. Its round trip is sampled at
			// its first response (ReadPlaced).
			rtt = now.Sub(e.sent)
		}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		k++
		if s.resend > 0 {
			s.resend-- // a go-back-N goes on from the entry that is now head
		}
	}
	if k == 0 {
		return false
	}
	if s.params.SelectiveRepeat {
		was := s.placed
		s.sAlign()
		s.noteDelivered(delivered-(was-s.placed), now) // those reported placed were counted then
	}
	s.alloc.pool.use(-k)
	s.cc.onAcked(acked, now, s.rtt.srtt)
	if s.byRate {
		s.rate.opened = min(s.rate.opened+acked, 1<<20)
	}
	if ambiguous {
		// Karn's rule for a cumulative ACK: one that covers a packet
		// sent again is no sample, not even of the packets after it. With
		// selective repeat those were placed ahead long ago and waited
		// for the hole: their "round trip" is the repair's, and taken as
		// the path's it would slow every later repair (a timer that waits
		// longer, a repair that takes longer, a larger sample).
		rtt = 0
		if s.rtt.srtt == 0 && s.params.SelectiveRepeat {
			// Unless there is no estimate yet: a QP whose first packets
			// were lost (an incast's first burst) would else have none
			// for as long as each ACK covers a packet sent again, and
			// wait the path's longest round trip, doubled, for each
			// loss. Selective repeat dates a packet sent again from its
			// resending: the sample is the repair's round trip, or less.
			// Less when the peer had the packet and the ACK answers its
			// first sending: the timers take it, the least round trip
			// does not (a QP whose early timer went before its first
			// ACKs, on a 1 ms path, took the 15 us from its resend to
			// them for the path's round trip: its BDP cap of 4 packets
			// held it to an eighth of its share for 800 ms).
			s.rtt.smooth(resentRTT)
		}
	}
	s.sample(rtt, now)
	s.cc.decay(now, s.rtt.srtt)
	s.retries, s.rnrTries, s.backoff, s.earlyBackoff = 0, 0, 0, 0
	if s.n == 0 {
		s.resend = -1
	} else if s.resend == 0 && s.resendPSN.Before(s.Una()) {
		s.resendPSN = s.Una() // what was acknowledged is not sent again
	}
	if s.stalled {
		s.stalled = false
		s.count().Stalled += now.Sub(s.stallSince)
	}
	if s.probing && s.probePSN.Before(s.Una()) { // the probe is answered
		s.probing = false
		if s.n > 0 && s.Una() == s.probePSN.Add(1) && s.entry(0).Kind == Data && s.resend < 0 {
			s.goBack(s.Una()) // exactly the probe: the peer dropped what followed it
		}
	}
	if repaired {
		s.repairLost(now)
	}
	switch {
	case s.n == 0:
		s.deadline, s.early, s.rnrWait = time.Time{}, time.Time{}, false
	case !s.rnrWait: // an RNR wait keeps its own deadline
		s.arm(now)
	}
	return true
}

// goBack sets every entry from the one holding psn up to be sent again
// (go-back-N), from psn on.
func (s *Sender) goBack(psn wire.PSN) { s.goBackFor(psn, false) }

// goBackFor is goBack; readHole says it asks for a READ's missing
// responses with selective repeat (askHole), which this side places as
// they come: a random loss, which cuts nothing (cut).
func (s *Sender) goBackFor(psn wire.PSN, readHole bool) {
	for i := range s.n {
		if e := s.entry(i); e.contains(psn) {
			s.resend, s.resendPSN = i, psn
			s.selFrom = psn
			s.probing = false
			s.resendOne = false
			s.stats.GoBacks++
			s.cut(psn, e.Placeable || readHole)
			return
		}
	}
}

// OnAck handles an ACK (a positive AETH syndrome) of psn. An ACK outside
// [Una-1, Next) is stale.
func (s *Sender) OnAck(psn wire.PSN, now time.Time) Verdict {
	if s.failed || psn.Before(s.Una().Sub(1)) || !psn.Before(s.next) {
		s.count().Stale++
		return Ignored
	}
	s.retire(psn, now)
	s.rdConsume(now)
	return Accepted
}

// OnCredits takes the credit code of an ACK of psn (CreditsInvalid:
// none). A stale ACK's credits are ignored.
func (s *Sender) OnCredits(psn wire.PSN, code uint8) {
	n, ok := wire.Credits(code)
	if !ok || s.creditValid && psn.Before(s.creditPSN) {
		return
	}
	s.credits, s.creditPSN, s.creditValid = n, psn, true
}

// HasCredit reports whether a packet that takes a receive WQE may go: the
// responder's last credit count covers the ones sent after it, or no
// credits were ever given, or none of those are outstanding (a probe: its
// answer, an ACK or an RNR NAK, brings fresh credits). A false answer is
// counted once per call.
func (s *Sender) HasCredit() bool {
	if !s.creditValid {
		return true
	}
	taken := uint32(0)
	for i := range s.n {
		if e := s.entry(i); e.Consumes && e.PSN.After(s.creditPSN) {
			taken++
		}
	}
	if taken < s.credits || taken == 0 {
		return true
	}
	s.count().CreditWaits++
	return false
}

// OnAETH takes an ACK, an RNR NAK or a NAK of psn, as its AETH's
// syndrome says, in one call: an ACK retires what it acknowledges and
// brings the responder's credits (OnAck, OnCredits), an RNR NAK starts
// the wait (OnRNR), a NAK goes back or fails the QP (OnNAK).
func (s *Sender) OnAETH(psn wire.PSN, syn wire.Syndrome, now time.Time) Verdict {
	switch {
	case syn.IsACK():
		v := s.OnAck(psn, now)
		if v == Accepted {
			s.OnCredits(psn, syn.Value())
		}
		return v
	case syn.IsRNRNAK():
		return s.OnRNR(psn, syn.Value(), now)
	case syn.IsNAK():
		return s.OnNAK(psn, syn.Value(), now)
	}
	return Ignored
}

// OnNAK handles a NAK (kind 3 syndrome) of psn with its code: a PSN
// sequence error goes back to psn; the others fail the QP with the
// matching status. A NAK outside the window is stale.
func (s *Sender) OnNAK(psn wire.PSN, code uint8, now time.Time) Verdict {
	if !s.failed && psn == s.next && code == wire.NAKPSNSequenceError {
		// A sequence NAK of the next PSN (a go-back-N receiver's idle
		// probe, Receiver.Expecting): the peer has all that was sent; it
		// acknowledges it and asks for nothing.
		if s.retire(psn.Sub(1), now) {
			return Accepted
		}
		return Ignored
	}
	if s.failed || !s.inWindow(psn) {
		s.count().Stale++
		return Ignored
	}
	s.retire(psn.Sub(1), now) // a NAK acknowledges what came before
	if code == wire.NAKPSNSequenceError {
		s.timerBack = false
		s.goBack(psn)
		if s.params.SelectiveRepeat && !s.srNext(now) {
			s.count().NAKsOfRepair++ // every hole it shows is being repaired
		}
		return Accepted
	}
	switch code {
	case wire.NAKRemoteAccessError:
		s.fail(ibv.WCRemAccessErr)
	case wire.NAKInvalidRequest:
		s.fail(ibv.WCRemInvReqErr)
	default:
		s.fail(ibv.WCRemOpErr)
	}
	return Failed
}

// OnPlaced takes, with selective repeat, the packet a sequence NAK of
// psn says the peer placed ahead of order (trigger, as the NAK's MSN
// field carries it: see package datapath's responder). Call it before
// OnAETH takes the NAK, so that the NAK resends what the report shows
// lost. A trigger outside (psn, Next) says nothing.
func (s *Sender) OnPlaced(psn, trigger wire.PSN, now time.Time) {
	if !s.params.SelectiveRepeat || s.failed || s.n == 0 || !trigger.After(psn) || !trigger.Before(s.next) || !s.inWindow(psn) {
		return
	}
	una := s.sAlign()
	d := int(trigger.Diff(una))
	if d <= 0 || d >= SRWindow {
		return
	}
	i, ok := s.find(trigger)
	if !ok {
		return
	}
	e := s.entry(i)
	if e.Kind != Data || !e.Placeable {
		return
	}
	if s.sacked[d/64]&(1<<(d%64)) == 0 {
		s.sacked[d/64] |= 1 << (d % 64)
		s.placed++
		s.noteDelivered(1, now)
		if !e.resent {
			s.sample(now.Sub(e.sent), now) // the peer NAKs as the packet lands
		}
	}
	if !trigger.Before(s.sHigh) {
		s.sHigh = trigger.Add(1)
	}
}

// repairLost applies RACK's rule (RFC 8985) to the early timer's
// repair with selective repeat. The timer resends the oldest packet
// alone when the peer has reported nothing placed beyond it (srSkip
// passes over the rest: they may be on their way), and the in-order ACK
// that answers it reports nothing beyond either. When that ACK comes
// (the repair went at timerRepair) and the peer has still reported
// nothing placed past Una, nothing sent before the repair reached it: a
// peer that places a packet ahead reports it, and reports again while
// the gap stays open. Those packets go again now,
// as the window lets them, not one per early timer (milliseconds each):
// a QP whose whole flight a full queue dropped, as in an incast, got one
// packet through per timer. A NAK's repair needs none of it: the peer's
// reports show what it lacks.
func (s *Sender) repairLost(now time.Time) {
	repaired := s.timerRepair
	if !s.params.SelectiveRepeat || s.n == 0 || s.resendOne || s.failed || s.rnrWait {
		return
	}
	if now.Sub(repaired) < s.rtt.min {
		// Sooner than any round trip: the ACK is the original's, which a
		// queue held (the timer fired early), and what went after it is
		// on its way too (RACK's test for a spurious retransmission).
		return
	}
	e := s.entry(0)
	if e.Kind != Data || s.sHigh.After(e.PSN) || !e.sent.Before(repaired) {
		return
	}
	// A reordering path may bring the repair ahead of packets sent just
	// before it: those wait (RACK's reorder window, a quarter of the
	// least round trip).
	s.lostBefore = repaired.Add(-s.rtt.min / 4)
	if !e.sent.Before(s.lostBefore) {
		return
	}
	s.stats.LostBehind++
	s.goBack(e.PSN)
}

// sAlign moves the placed bitmap to start at Una and returns Una.
func (s *Sender) sAlign() wire.PSN {
	una := s.Una()
	if d := int(una.Diff(s.sBase)); d != 0 {
		s.sBase = una
		shiftBits(s.sacked[:], d)
		n := 0
		for _, w := range s.sacked {
			n += bits.OnesCount64(w)
		}
		s.placed = n
	}
	if !s.sHigh.After(una) {
		s.sHigh = una // nothing reported beyond Una (and no stale PSN 2^23 on)
	}
	return una
}

// sPlaced reports whether the peer reported the packet at psn placed.
func (s *Sender) sPlaced(psn wire.PSN) bool {
	d := int(psn.Diff(s.sBase))
	return d > 0 && d < SRWindow && s.sacked[d/64]&(1<<(d%64)) != 0
}

// find returns the index of the entry holding psn.
func (s *Sender) find(psn wire.PSN) (int, bool) {
	una := s.Una()
	k := int(psn.Diff(una))
	i := sort.Search(s.n, func(i int) bool { return int(s.entry(i).last().Diff(una)) >= k })
	return i, i < s.n && s.entry(i).contains(psn)
}

// srSkip reports whether, with selective repeat, the resend passes over
// the entry: the peer placed it, or it is a WRITE_ONLY beyond what the
// peer has reported (it places it if it comes), or it was sent again
// less than a round trip and a quarter ago (its NAKs were on the way).
func (s *Sender) srSkip(e *Entry, now time.Time) bool {
	switch {
	case s.sPlaced(e.PSN):
		return true
	case e.Placeable && e.PSN.After(s.selFrom) && !e.PSN.Before(s.sHigh) && !e.sent.Before(s.lostBefore):
		return true
	case e.resent && e.Kind == Data && s.rtt.srtt > 0 && now.Sub(e.sent) < s.rtt.srtt+s.rtt.srtt/4:
		return !(s.timerBack && e.PSN == s.selFrom)
	}
	return false
}

// srNext moves the resend cursor past the entries srSkip passes over and
// reports whether one is left to send.
func (s *Sender) srNext(now time.Time) bool {
	for s.resend >= 0 && s.resend < s.n && s.entry(s.resend).Kind == Data && s.srSkip(s.entry(s.resend), now) {
		s.resend++
	}
	if s.resend >= s.n {
		s.resend = -1
	}
	return s.resend >= 0
}

// noteDelivered counts n packets the peer has (acknowledged, placed) for
// selective repeat's BDP cap.
func (s *Sender) noteDelivered(n int, now time.Time) {
	if s.params.SelectiveRepeat && !s.byRate {
		s.bw.delivered(n, now, s.rtt.srtt)
	}
}

// OnRNR handles an RNR NAK of psn: the sender waits the RNR timer code
// encodes, then sends again from psn; after RNRRetry such NAKs in a row
// (7: never) the QP fails.
func (s *Sender) OnRNR(psn wire.PSN, code uint8, now time.Time) Verdict {
	if s.failed || !s.inWindow(psn) {
		s.count().Stale++
		return Ignored
	}
	s.retire(psn.Sub(1), now)
	if s.rnrTries++; s.params.RNRRetry != 7 && s.rnrTries > int(s.params.RNRRetry) {
		s.fail(ibv.WCRNRRetryExcErr)
		return Failed
	}
	s.goBack(psn)
	s.rnrWait, s.early = true, time.Time{}
	s.deadline = now.Add(time.Duration(wire.RNRTimerMicros(code)) * time.Microsecond)
	return Accepted
}

// ReadSlot finds the place of a READ response of psn: the READ entry
// and the response's packet index in it. A response acknowledges every
// request before its READ. ok is false for a response that answers no
// outstanding READ (stale, or never asked for), and for one that is not
// the next expected (a gap, or a stale copy).
//
// With go-back-N the first response past a gap asks once for everything
// from the gap on again; the ones after it are the same stream and ask
// nothing. The responder answers in order, so the stream that answers
// the ask begins after the old one has ended, at a lower PSN than the
// old one reached: if it begins past the gap (its first response was
// lost too), that drop asks again; once it comes in order, the next gap
// in it is a new loss and asks again. Without these, every READ that
// lost a response of its repeat too (a 64 KiB READ of 1 KiB packets at
// 5 % loss, often) waited for the timer.
func (s *Sender) ReadSlot(psn wire.PSN, now time.Time) (e *Entry, k uint32, ok bool) {
	if s.params.SelectiveRepeat {
		return s.readSlotSelective(psn, now)
	}
	if e = s.readEntry(psn, now); e == nil {
		return nil, 0, false
	}
	una := s.Una()
	if psn != una {
		if psn.After(una) {
			if s.gapAsked && psn.Before(s.rdLast) { // a new stream, its first response lost
				s.gapAsked = false
				s.stats.ReadRestarts++
			}
			if !s.gapAsked {
				s.gapAsked = true
				s.goBack(una)
			}
			s.rdLast = psn
		}
		return nil, 0, false
	}
	s.gapAsked, s.rdLast = false, psn
	return e, uint32(psn.Diff(e.PSN)), true
}

// readEntry finds the outstanding READ a response of psn belongs to and
// retires the requests before it (a response acknowledges them); nil,
// counted as stale, for a response that answers none.
func (s *Sender) readEntry(psn wire.PSN, now time.Time) *Entry {
	if !s.failed && s.inWindow(psn) {
		for i := range s.n {
			if e := s.entry(i); e.Kind == Read && e.contains(psn) && !e.done {
				s.retire(e.PSN.Sub(1), now)
				return e
			}
		}
	}
	s.count().Stale++
	return nil
}

// readSlotSelective is ReadSlot with selective repeat: a response ahead
// of the next expected one, within SRWindow, is placed too, and the first
// such asks again for the missing responses only (a READ request for
// that range, which the responder answers as a duplicate).
func (s *Sender) readSlotSelective(psn wire.PSN, now time.Time) (e *Entry, k uint32, ok bool) {
	if e = s.readEntry(psn, now); e == nil {
		return nil, 0, false
	}
	s.rdConsume(now)
	if e.done {
		return nil, 0, false // its last responses were placed ahead
	}
	una := s.rdAlign()
	d := int(psn.Diff(una))
	switch {
	case d == 0:
		s.seenRead(una, psn)
		return e, uint32(psn.Diff(e.PSN)), true
	case d < 0 || d >= SRWindow || s.rdBit(d):
		return nil, 0, false // a copy, or too far ahead
	}
	switch high := s.seenRead(una, psn); {
	case psn.After(high):
		s.askHole(high, psn) // responses [high, psn) went missing
		s.rdAskAt = now
		s.armEarly(now)
	case s.resend < 0 && s.rtt.srtt > 0 && now.Sub(s.rdAskAt) > s.rtt.srtt+s.rtt.srtt/4:
		// Responses still come past the holes a round trip (and a
		// quarter) after they were last asked for: what was asked went
		// missing too (the request or its responses), and is asked for
		// again now, not at the timer.
		if s.askHolesBelow(psn) { // not psn itself: it is being placed
			s.stats.HolesAskedAgain++
		}
		s.rdAskAt = now
		s.armEarly(now)
	}
	return e, uint32(psn.Diff(e.PSN)), true
}

// seenRead records a READ response at psn and returns where the new
// responses began before it: one past the highest seen, or Una.
func (s *Sender) seenRead(una, psn wire.PSN) wire.PSN {
	high := s.rdHigh
	if !high.After(una) || !high.Before(s.next) {
		high = una
	}
	if !psn.Before(high) {
		s.rdHigh = psn.Add(1)
	}
	return high
}

// askHole asks for the READ responses [from, until) again: now, as one
// READ request for the range, if nothing else is being sent again, else
// after the holes queued before it. A go-back in progress asks for it
// anyway; a full queue leaves it to the early timer.
func (s *Sender) askHole(from, until wire.PSN) {
	switch {
	case s.resend < 0:
		s.goBackFor(from, true)
		s.resendOne, s.readUntil = true, until
	case s.resendOne && s.holeN < maxHoles:
		s.holes[s.holeN] = hole{from, until}
		s.holeN++
	}
}

// nextHole sets the next queued hole, if any, to be asked for; false
// when none is left.
func (s *Sender) nextHole() bool {
	una := s.Una()
	for s.holeN > 0 {
		h := s.holes[0]
		copy(s.holes[:], s.holes[1:s.holeN])
		s.holeN--
		if h.until.After(una) && s.n > 0 {
			s.goBackFor(max2(h.from, una), true)
			if s.resend >= 0 {
				s.resendOne, s.readUntil = true, h.until
				return true
			}
		}
	}
	return false
}

// max2 is the later of two PSNs.
func max2(a, b wire.PSN) wire.PSN {
	if a.Before(b) {
		return b
	}
	return a
}

// askHoles queues every hole the READ bitmap shows below rdHigh (the
// early timer's answer with selective repeat when a READ heads the
// queue): their responses, and only those, are asked for again. It
// reports false when there are none (a lost tail: the caller goes
// back).
func (s *Sender) askHoles() bool {
	if !s.askHolesBelow(s.rdHigh) {
		return false
	}
	if head := s.entry(0); s.rdHigh.Before(head.PSN.Add(head.Span)) {
		s.askHole(s.rdHigh, head.PSN.Add(head.Span)) // and the head READ's tail
	}
	return s.resend >= 0
}

// askHolesBelow queues every hole the READ bitmap shows below high, and
// reports whether it asked for any.
func (s *Sender) askHolesBelow(high wire.PSN) bool {
	una := s.rdAlign()
	if s.n == 0 || s.entry(0).Kind != Read || !high.After(una) {
		return false
	}
	top := min(int(high.Diff(una)), SRWindow)
	s.resend, s.resendOne, s.holeN = -1, false, 0
	for i := 0; i < top; {
		if s.rdBit(i) {
			i++
			continue
		}
		j := i
		for j < top && !s.rdBit(j) {
			j++
		}
		s.askHole(una.Add(uint32(i)), una.Add(uint32(j)))
		i = j
	}
	return s.resend >= 0
}

func (s *Sender) rdBit(i int) bool { return s.rdPlaced[i/64]&(1<<(i%64)) != 0 }

// rdAlign moves the READ bitmap down by however far Una moved since it
// was last aligned (an ACK, an atomic's answer or a READ response may
// have moved it), and returns Una.
func (s *Sender) rdAlign() wire.PSN {
	una := s.Una()
	d := int(una.Diff(s.rdBase))
	s.rdBase = una
	if d != 0 {
		shiftBits(s.rdPlaced[:], d)
	}
	return una
}

// ReadPlaced records that the response at psn that ReadSlot found has
// landed; last says it was the READ's last.
func (s *Sender) ReadPlaced(e *Entry, psn wire.PSN, last bool, now time.Time) {
	if s.params.SelectiveRepeat {
		if d := int(psn.Diff(s.rdAlign())); d > 0 {
			s.rdPlaced[d/64] |= 1 << (d % 64) // ahead: counted when the gap fills
			s.pkts--
			s.rdPkts--
			s.noteDelivered(1, now)
			s.arm(now)
			return
		}
	}
	e.Got++
	s.pkts--
	s.rdPkts--
	s.noteDelivered(1, now)
	if e.Got == 1 && !e.resent {
		s.sample(now.Sub(e.sent), now) // the request's round trip, without the READ's transfer
	}
	s.retries, s.backoff, s.earlyBackoff = 0, 0, 0
	s.arm(now)
	if last || e.Got == e.Span {
		e.done = true
		s.gapAsked = false
		s.retire(e.last(), now)
	}
	s.rdConsume(now)
}

// rdConsume counts, with selective repeat, the READ responses placed
// ahead that now follow Una in order, READ after READ.
func (s *Sender) rdConsume(now time.Time) {
	for s.params.SelectiveRepeat && s.n > 0 {
		s.rdAlign()
		if !s.rdBit(0) {
			return
		}
		c := &s.ring[s.head]
		if c.Kind != Read || c.done {
			clear(s.rdPlaced[:]) // cannot be: only READs' responses are placed ahead
			return
		}
		if c.Got++; c.Got == c.Span {
			c.done = true
			s.gapAsked = false
			s.retire(c.last(), now)
		}
	}
}

// ResendUntil is, for the READ entry Resend gave, the PSN its request
// asks up to (exclusive): the READ's end, or with selective repeat the
// end of the gap being asked for.
func (s *Sender) ResendUntil(e *Entry) wire.PSN {
	end := e.PSN.Add(e.Span)
	if s.resendOne && e.contains(s.readUntil) {
		return s.readUntil
	}
	return end
}

// AtomicSlot finds the atomic entry an atomic ACK of psn answers; ok is
// false when none is outstanding.
func (s *Sender) AtomicSlot(psn wire.PSN) (e *Entry, ok bool) {
	if s.failed || !s.inWindow(psn) {
		s.count().Stale++
		return nil, false
	}
	for i := range s.n {
		if e := s.entry(i); e.Kind == Atomic && e.PSN == psn && !e.done {
			return e, true
		}
	}
	s.count().Stale++
	return nil, false
}

// Landing finds, changing nothing, the outstanding READ or atomic a
// response of psn answers and the response's index in it, so that the
// completer can make sure of the memory it lands in before it takes the
// response (ReadSlot, AtomicSlot).
func (s *Sender) Landing(psn wire.PSN) (e *Entry, k uint32, ok bool) {
	if s.failed || !s.inWindow(psn) {
		return nil, 0, false
	}
	for i := range s.n {
		if e := s.entry(i); (e.Kind == Read || e.Kind == Atomic) && e.contains(psn) && !e.done {
			return e, uint32(psn.Diff(e.PSN)), true
		}
	}
	return nil, 0, false
}

// AtomicPlaced records that an atomic's result has landed.
func (s *Sender) AtomicPlaced(e *Entry, now time.Time) {
	s.retire(e.PSN.Sub(1), now)
	e.done = true
	s.retire(e.PSN, now)
	s.rdConsume(now)
}

// Resend returns the next entry to send again and the PSN to send it
// from (a READ's first response not yet placed); ok is false when
// nothing is pending or the sender waits out an RNR NAK. Call Resent
// after sending it.
func (s *Sender) Resend(now time.Time) (e *Entry, from wire.PSN, ok bool) {
	s.takeLoss(now)
	if s.failed || s.rnrWait || s.resend < 0 || s.resend >= s.n {
		if s.resend >= s.n {
			s.resend = -1
		}
		return nil, 0, false
	}
	if s.paced(now) && !(s.resendOne && s.params.SelectiveRepeat) && !s.readGapAsk() {
		// A READ's hole goes at once: its responses take the place of
		// lost ones, in flight no longer, and its READ, the oldest,
		// holds up every completion behind it. (Its pacing debt is
		// still paid, by the packets after it.)
		return nil, 0, false
	}
	if s.params.SelectiveRepeat {
		// Selective repeat: the peer placed these if they came; the
		// ones its NAKs show lost go again (srSkip).
		if !s.srNext(now) {
			return nil, 0, false
		}
		if !s.resendOne { // a hole is asked for from its own start
			s.resendPSN = s.entry(s.resend).PSN
		}
	}
	if s.resend > 0 && !s.params.NoCongestionControl && !(s.params.SelectiveRepeat && s.timerBack) {
		// Entries before the cursor were sent again and are in flight:
		// the rest go as ACKs make room in the window. (With selective
		// repeat no more than InFlight: responses placed ahead are not
		// in Got; and a timer's go-back goes at once.)
		flight := 0
		for i := range s.resend {
			e := s.entry(i)
			flight += int(e.Span - e.Got)
		}
		if s.params.SelectiveRepeat {
			flight = min(flight, s.InFlight())
		}
		if flight >= s.Window() {
			return nil, 0, false
		}
	}
	e = s.entry(s.resend)
	// A packet sent again asks for an ACK: the packets that asked for the
	// ones before it may lie beyond the window now, and without an ACK
	// the recovery would wait for a timer.
	if !e.AckReq && e.Kind != Read {
		s.acks++
	}
	e.AckReq = true
	from = e.PSN
	if s.resendPSN.After(from) && e.contains(s.resendPSN) {
		from = s.resendPSN
	}
	if e.Kind == Read && from.Before(e.PSN.Add(e.Got)) {
		from = e.PSN.Add(e.Got) // what came in order stays placed
	}
	return e, from, true
}

// readGapAsk reports whether, with go-back-N, the resend about to go is
// the oldest READ asked for again from a gap in its responses (ReadSlot).
func (s *Sender) readGapAsk() bool {
	return s.gapAsked && s.resend == 0 && s.entry(0).Kind == Read
}

// Resent moves past the entry Resend gave.
func (s *Sender) Resent(now time.Time) {
	e := s.entry(s.resend)
	switch {
	case e.Kind == Read && s.resendOne && e.contains(s.readUntil):
		s.spendEntry(now, e, uint32(max(s.readUntil.Diff(max2(s.resendPSN, e.PSN.Add(e.Got))), 1)))
	case e.Kind == Read:
		s.spendEntry(now, e, e.Span-e.Got)
	default:
		s.spendEntry(now, e, 1)
	}
	s.count().Retransmitted++
	e.resent = true
	if e.Kind == Data && s.params.SelectiveRepeat {
		e.sent = now // when it went again: its NAKs wait a round trip (srSkip)
		if s.timerBack && e.PSN == s.selFrom {
			s.timerRepair = now // the early timer's repair (repairLost)
		}
	}
	if s.resendOne {
		// A hole that runs on into the next READ asks for that READ's
		// part next; then the next queued hole.
		if end := e.PSN.Add(e.Span); s.readUntil.After(end) && s.resend+1 < s.n && s.entry(s.resend+1).Kind == Read {
			s.resend++
			s.resendPSN = s.entry(s.resend).PSN
			return
		}
		s.resendOne, s.resend = false, -1
		s.nextHole()
		return
	}
	if s.resend++; s.resend >= s.n {
		s.resend = -1
	} else {
		s.resendPSN = s.entry(s.resend).PSN
	}
}

// Resending reports whether retransmissions are pending.
func (s *Sender) Resending() bool { return s.resend >= 0 }

// Tick runs the timer at now: after an RNR wait the sender sends again;
// after a local ACK timeout it goes back to Una, with the timer doubled
// (up to 16x) until progress, or fails after RetryCnt retries.
func (s *Sender) Tick(now time.Time) Verdict {
	if s.failed || s.deadline.IsZero() || now.Before(s.Deadline()) {
		return Ignored
	}
	if s.n == 0 {
		s.deadline, s.rnrWait = time.Time{}, false
		return Ignored
	}
	if s.rnrWait {
		s.rnrWait = false
		s.arm(now)
		return Accepted
	}
	s.pace.restart()
	if now.Before(s.deadline) { // the early timer: a lost tail, sent again
		s.count().Early++
		s.earlyBackoff = min(s.earlyBackoff+1, maxBackoff)
		s.gapAsked = false
		switch {
		case !s.params.SelectiveRepeat:
			s.probe()
		case s.resend >= 0 && !s.resendOne:
			// A go-back a NAK asked for waits for room in the window: it
			// stays, and goes now, room or not (the holes' turn comes
			// after).
			s.timerBack = true
		case !s.askHoles():
			s.timerBack = true
			s.goBack(s.Una())
		}
		s.rdAskAt = now
		s.armEarly(now)
		return Accepted
	}
	s.probing = false
	s.holeN = 0
	s.count().Timeouts++
	if s.retries++; s.retries > int(s.params.RetryCnt) {
		s.fail(ibv.WCRetryExcErr)
		return Failed
	}
	s.backoff = min(s.backoff+1, maxBackoff)
	s.gapAsked = false
	s.timerBack = true
	s.goBack(s.Una())
	s.arm(now)
	return Accepted
}

// probe sets the oldest unacknowledged entry alone to be sent again
// (go-back-N's early timer). If the peer lacked it, it acknowledges
// exactly that packet, having dropped the ones after it, and retire goes
// back from there; if the peer had it, its acknowledgement covers more,
// and only the lost tail, if any, is left for the next probe.
func (s *Sender) probe() {
	e := s.entry(0)
	s.resend, s.resendPSN, s.selFrom = 0, s.Una(), s.Una()
	s.resendOne, s.readUntil = true, e.last().Add(1)
	s.probing, s.probePSN = true, e.last()
	s.stats.Probes++
}

// fail puts the sender in error: every entry is dropped (the caller
// completes its work requests in error).
func (s *Sender) fail(status ibv.WCStatus) {
	s.failUna = s.Una()
	s.failed, s.status = true, status
	s.drop()
}

// drop frees every entry.
func (s *Sender) drop() {
	s.alloc.pool.use(-s.n)
	s.n, s.head, s.resend, s.rdAtom, s.pkts, s.rdPkts, s.acks = 0, 0, -1, 0, 0, 0, 0
	s.holeN, s.placed = 0, 0
	clear(s.sacked[:])
	clear(s.rdPlaced[:])
	s.deadline, s.early, s.rnrWait = time.Time{}, time.Time{}, false
	if s.stalled {
		s.stalled = false
	}
}

// Fail puts the sender in error from outside (a local error): its
// entries are freed.
func (s *Sender) Fail(status ibv.WCStatus) {
	if !s.failed {
		s.fail(status)
	}
}

// Reset frees every entry and forgets the QP's state (modify to RESET);
// the allocation stays with the sender until the caller releases it.
func (s *Sender) Reset() {
	s.drop()
	alloc := s.alloc
	*s = Sender{alloc: alloc, ring: alloc.entries, resend: -1}
}

// Warm reads the cache lines every packet sent and every ACK reads, and
// the replay entry the next packet takes (see package warm), returning
// the sum of the words read.
func (s *Sender) Warm() uintptr {
	w := warm.Lines(unsafe.Pointer(s), unsafe.Offsetof(s.resendPSN))
	if s.n < len(s.ring) { // the replay entry the next packet takes
		w += warm.Lines(unsafe.Pointer(s.entry(s.n)), unsafe.Sizeof(Entry{}))
	}
	return w
}
