package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/reliability"
)

// NICConfig sets up a NIC: its port, its address on the network, and the
// fixed capacity of every resource.
type NICConfig struct {
	// Ports are the port's queues, one engine goroutine each. A QP belongs
	// to the engine of queue QPN mod len(Ports); a frame arriving on
	// another queue is handed to its QP's engine.
	Ports []Port
	MAC   wire.MAC
	IP    netip.Addr // IPv4 or IPv6; the source of every frame to an address of its family
	// Addrs are the NIC's other addresses (its netdev's GIDs, IP among
	// them or not). A frame to an address of the other family than IP's
	// leaves from the first of Addrs of that family and scope (an IPv6
	// global address to a global destination, the link-local address to
	// a link-local one), and a connected QP takes frames sent to that
	// address: the address its peer knows it by (its GID).
	Addrs  []netip.Addr
	Memory *hostmem.Memory
	DMA    *hostmem.DMA

	// Table sizes (defaults 256, 256, 64, 1024, 65536). MaxQPs counts
	// the QPs an application can create: QPNs FirstQPN to
	// FirstQPN+MaxQPs-1.
	MaxQPs, MaxCQs, MaxSRQs, MaxMRs, MaxMTT int
	Cache                                   ctxcache.Config
	// ReplayEntries is the capacity of the NIC-wide replay buffer, from
	// which each RC QP reserves its allocation when it moves to RTS
	// (default 32768: 128 QPs at the default allocation).
	ReplayEntries int
	// NoCongestionControl turns off every RC sender's congestion window,
	// pacing and early probes: a NIC as RoCE NICs were before congestion
	// control, for comparison runs (bench shallow's baseline).
	NoCongestionControl bool
	// ECN is the ECN field of the packets the NIC sends (default ECNAuto:
	// ECT(0) while its RC senders react to CNPs, else not ECN-capable).
	ECN ECN
	// DelayRule is when RC senders apply the delay rule
	// (reliability.Params.Delay; default: on paths of at least
	// reliability.DelayAutoRTT).
	DelayRule reliability.DelayRule
	// DCQCN, when set, makes every RC QP's congestion control DCQCN's
	// rate-based reaction point with these parameters
	// (reliability.Params.DCQCN) instead of the window; nil: the window.
	DCQCN *reliability.DCQCNParams
	// Poll is what an idle engine does: sleep at once (PollSleep, the
	// default: on a machine with few cores, shared by both ends of a
	// link, a polling engine takes the time its peer needs), poll its
	// port and queues for PollBudget (default 50 us) before it sleeps
	// (PollAdaptive), poll for ever (PollSpin: a core per engine), or
	// leave the polling to the application (PollApp).
	Poll       PollMode
	PollBudget time.Duration
	// ACKHold is how long, with PollApp, an application's turn whose only
	// frames are ACKs holds them for its answer, to send both in one
	// batch (holdACKs): 0 is the default, 10 us; negative, never.
	ACKHold time.Duration
	// PostHold is how long, with PollApp, the frames of a post that comes
	// hard on another post wait for the application's next call, to
	// leave with the frames of the posts after it in one system call
	// (holdPosts): 0 is the default, DefaultPostHold; negative, never.
	PostHold time.Duration
	// BaselineQPC puts the blocking baseline (ctxcache.Baseline) in front
	// of the QP contexts instead of GCCache, to measure GCCache's effect
	// on the whole NIC (softrnic bench scale); the other contexts keep
	// GCCache. BaselineFetches is how many host fetches it has in flight:
	// 0 or 1 is the classic blocking cache (a miss holds up every lookup
	// behind it for a host round trip); more is an in-order cache whose
	// misses overlap but whose answers still wait their turn.
	BaselineQPC     bool
	BaselineFetches int
	// HPU sizes the handler stage (package hpu), started when the first
	// execution context is attached (zero: hpu's defaults, PsPIN's 4
	// clusters of 8 HPUs).
	HPU hpu.Config
	// Notify is called after a CQE has reached host memory, with the CQ's
	// number: the completion event a driver waits on.
	Notify func(cqn uint32)
	// KernelRx keeps room for frames the host takes in outside the
	// ports and hands over with Deliver: RoCEv2 datagrams the XDP program
	// did not steer to an XSK socket, caught by a kernel UDP socket
	// (package kernelrx).
	KernelRx bool
	// DeliverTap, if set, is shown each frame Deliver takes in, before
	// the NIC does (a capture's interface for the frames that came
	// through the kernel's UDP stack instead of a port). It must not keep
	// the frame.
	DeliverTap func(frame []byte)
	// Clock is the time of the protocol's timers and of the reliability
	// state machines (nil: the system's clock). A test gives the NIC and
	// its DMA engine one hostmem.DrivenClock and runs the engines itself
	// (PollApp and NIC.Progress, without Run), so that it decides when a
	// context fetch completes and a timer expires.
	Clock hostmem.Clock
}

// PollMode is what an idle engine does.
type PollMode uint8

const (
	PollSleep    PollMode = iota // sleep at once: woken by a frame, a doorbell or a timer
	PollAdaptive                 // poll for NICConfig.PollBudget, then sleep
	PollSpin                     // poll for ever
	// PollApp: the application's polling drives the engines (NIC.Progress,
	// which verbs' CQ.Poll and CQ.Wait call), in its own thread, as a
	// poll-mode driver does: no wake-up between the application and the
	// NIC. The engines' goroutines only keep the timers and the control
	// path going, once a millisecond, when the application does not poll.
	PollApp
)

// String names the mode as the -poll flags do.
func (m PollMode) String() string {
	switch m {
	case PollSpin:
		return "spin"
	case PollAdaptive:
		return "adaptive"
	case PollApp:
		return "app"
	}
	return "sleep"
}

// ParsePollMode reads a -poll flag's value.
func ParsePollMode(s string) (PollMode, error) {
	for _, m := range []PollMode{PollSleep, PollAdaptive, PollSpin, PollApp} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("datapath: poll mode %q: want adaptive, spin, sleep or app", s)
}

// FirstQPN is the first QP number the NIC hands out, as rdma_rxe's first
// is 17: QPN 0 and 1 name the special QPs (QP0, the SMI, and QP1, the GSI,
// which carries connection management), and a packet to a QP number
// below FirstQPN reaches no QP.
const FirstQPN = 17

// Counters are the NIC's counters, named as rdma_rxe names its hardware
// counters.
type Counters struct {
	SentPkts, RcvdPkts         atomic.Uint64
	DuplicateRequest           atomic.Uint64
	OutOfSeqRequest            atomic.Uint64
	RcvdSeqErr                 atomic.Uint64
	SendErr                    atomic.Uint64
	RdmaSends, RdmaRecvs       atomic.Uint64 // as rxe counts them: SEND work requests completed (not flushed), and receive completions (messages, WRITE_WITH_IMM's included)
	RcvdBadICRC, RcvdMalformed atomic.Uint64 // frames Parse refused
	RcvdUnknownQP              atomic.Uint64
	RcvdWrongTransport         atomic.Uint64 // requests of another transport than their QP's (an RC packet for a UC QP: the peer runs another connection type), dropped
	lastWrongTransport         atomic.Uint32 // the last such request's transport
	LinkDowned                 atomic.Uint64 // times the port's netdev lost its link (rxe's link_downed; counted by whoever follows the netdev: netdev.WatchLink)
	RcvdRNRErr, SendRNRErr     atomic.Uint64
	RetryExceededErr           atomic.Uint64
	RetryRNRExceededErr        atomic.Uint64
	Retransmits                atomic.Uint64 // go-back-N restarts (timeouts and NAKs): rxe's completer_retry_err too
	AckDeferred                atomic.Uint64 // ACKs, NAKs and READ responses whose handling waited, parked, for a context (rxe's ack_deferred: the completer's work put off)
	Parked, ParkDropped        atomic.Uint64 // packets set aside for a QP context miss, and dropped for lack of room
	RcvdBadResponse            atomic.Uint64 // READ responses whose length or opcode does not fit their place, dropped
	SendWaits                  atomic.Uint64 // times a requester stopped for a context miss while other QPs went on
	DMAWaits                   atomic.Uint64 // host reads the engine waited for: no fetch slot or staged-frame room, or the DMA queue full (dmastage.go)
	DMAFaults                  atomic.Uint64 // host reads of WQEs or payload that failed in host memory
	HandedOff, HandoffDropped  atomic.Uint64 // frames passed to their QP's engine from another queue, and dropped for lack of room
	KernelRxFrames             atomic.Uint64 // frames that reached the kernel's UDP stack instead of a port, taken in through Deliver
	KernelRxDropped            atomic.Uint64 // of those, dropped: no room, or a NIC without KernelRx
	RcvdBadPKey                atomic.Uint64 // packets whose P_Key does not match their QP's, dropped
	RcvdBadAddr                atomic.Uint64 // packets for a connected (RC, UC) QP from another address than its peer's, or to another than the NIC's, dropped
	RcvdLengthErr              atomic.Uint64 // requests whose payload does not fit the path MTU, the message or the receive buffer (invalid request NAK)
	RcvdOpSeqErr               atomic.Uint64 // requests whose opcode does not fit the message under way (a MIDDLE without a FIRST...): invalid request NAK
	RcvdRKeyErr                atomic.Uint64 // requests whose R_Key, PD, access rights or bounds refuse the access: remote access error NAK
	RcvdMisalignedAtomic       atomic.Uint64 // atomics on an address not 8-byte aligned: invalid request NAK
	DuplicateDropped           atomic.Uint64 // duplicate READs dropped: they match no READ the responder remembers, or (selective repeat) more re-reads are queued than it keeps
	SeqNAKSuppressed           atomic.Uint64 // out-of-sequence requests not NAKed: their gap had its NAK, or the QP's last NAK was too recent
	SeqNAKRepeated             atomic.Uint64 // sequence NAKs sent again for a gap that lasted (its NAK may have been lost: reliability.SeqNAKRepeat)
	SeqNAKQuiet                atomic.Uint64 // go-back-N: of the repeated NAKs, those for a gap whose sender went quiet (reliability.GapQuiet)
	SeqNAKTail                 atomic.Uint64 // go-back-N: NAKs of the next PSN of a message left open while its sender went quiet (reliability.QuietTail)
	SeqNAKIdle                 atomic.Uint64 // go-back-N: NAKs of the expected PSN while a receive waited and the sender was quiet (reliability.QuietIdle)
	ACKsRepeated               atomic.Uint64 // go-back-N: ACKs sent again when the sender went quiet after them, on a QP that has seen loss (reliability.QuietACK)
	RNRRepairs                 atomic.Uint64 // go-back-N: gaps asked for again with an RNR NAK, a repeated sequence NAK having gone unanswered (QPFlagRNRRepair)
	ACKsBeforeNAK              atomic.Uint64 // go-back-N: ACKs of what came in order sent just before a sequence NAK (rxe heeds a NAK during a retry only after one)
	RcvdStaleResponse          atomic.Uint64 // ACKs, NAKs and responses for PSNs outside [oldest unacknowledged, last sent], ignored
	ReplayStalls               atomic.Uint64 // times a QP's packet waited at the transmit gate for a free replay entry
	ReplayStalledNs            atomic.Uint64 // the time QPs so waited, in nanoseconds
	RetransmittedPkts          atomic.Uint64 // packets sent again from their replay entries
	ReadResponsesResent        atomic.Uint64 // READ response packets sent again for duplicate READ requests
	ReadRepairs                atomic.Uint64 // go-back-N: READs answered again, unasked, when a requester that went back for READs went quiet after them (reliability.QuietRead)
	AtomicRepairs              atomic.Uint64 // go-back-N: atomics answered again, unasked, ahead of an idle probe's NAK (the atomic was the last request)
	LocalACKTimeouts           atomic.Uint64 // local ACK timer expiries
	TimersHeld                 atomic.Uint64 // times an engine held its due timers for starveGrace: it had been off the CPU (engine.starved)
	TimerRuns                  atomic.Uint64 // QP timers that ran with their deadline passed (each resolves its QP's context once)
	LaterRuns                  atomic.Uint64 // times the engine came back to a QP it put off: a pacing wait's end, retransmissions beyond a burst (each resolves its QP's context once)
	EarlyRetransmits           atomic.Uint64 // early retransmission timer expiries (a lost tail sent again after about two round trips, before the local ACK timeout)
	CreditWaits                atomic.Uint64 // times a SEND waited for the responder's end-to-end credits
	RoomWaits                  atomic.Uint64 // times a request waited for room at the port for the answers it asks for: READ responses, ACKs (room)
	ReadPaceCuts               atomic.Uint64 // go-back-N READ retries that doubled the spacing of a QP's READ responses (readpace.go)
	PlacedAhead                atomic.Uint64 // WRITE_ONLY packets placed ahead of order (selective repeat)
	PlacedReports              atomic.Uint64 // selective repeat: sequence NAKs sent in place of an ACK, with the packets placed past the hole
	RepairNAKs                 atomic.Uint64 // selective repeat: sequence NAKs of a hole already being repaired (nothing sent again)
	NPECNMarked                atomic.Uint64 // requests received marked Congestion Experienced
	NPCNPSent                  atomic.Uint64 // CNPs sent for them
	RPCNPHandled               atomic.Uint64 // CNPs received, each cutting the QP's window (or, with DCQCN, its rate)
	HPUPackets                 atomic.Uint64 // packets handed to execution contexts' handlers
	HPURefused                 atomic.Uint64 // packets the handlers had no room for: not acknowledged, sent again by the peer
	HPUFaults                  atomic.Uint64 // messages failed by a handler's fault (NAKed, the QP to error)
	HPUAborted                 atomic.Uint64 // messages under way with handlers ended by a reset, an error or a UC loss
	HPUCommands                atomic.Uint64 // packets handlers sent (Send, Put)
	HPUCommandsRefused         atomic.Uint64 // handlers' packets refused: no buffer free, or the QP cannot send
	AppLingers                 atomic.Uint64 // polls that drove the NIC on for the next frame after the completion that left a QP idle (NIC.Linger)
	AppLingerHits              atomic.Uint64 // of them, those that saw a frame within the poll budget
	AppYields                  atomic.Uint64 // idle polls on a single CPU that slept on the port instead of spinning (NIC.Progress)
	AckHolds                   atomic.Uint64 // application turns whose only frames, ACKs, waited for its next turn (holdACKs)
	PostHolds                  atomic.Uint64 // posts whose frames waited for the application's next call, to leave with later posts' in one batch (NICConfig.PostHold)
	PostHoldsTrusted           atomic.Uint64 // holds that armed no timer: the program's own calls had ended the holds before (the lease bounds them)
	PostHoldsTrustedLate       atomic.Uint64 // trusted holds the NIC's goroutine sent: each withdraws trust for a while
	PostHoldsLate              atomic.Uint64 // held posts that no call of the application's sent: the engine's goroutine did, at PostHold (holding pauses)
	AckHoldsLate               atomic.Uint64 // held ACKs that left without an answer (NICConfig.ACKHold): holding pauses
	McastRecvs                 atomic.Uint64 // copies of multicast datagrams given to the QPs attached to their group (mcast.go)

	// The resolve stage's (resolve.go): context lookups through the
	// caches, by type; lookups that waited for a miss to be filled (no
	// ticket free, or nothing resolved ahead); CQEs that waited, queued,
	// for their CQ's context while the engine went on.
	CtxLookups [hostmem.NumContextTypes]atomic.Uint64
	CtxWaits   atomic.Uint64
	CQEsHeld   atomic.Uint64

	replay *reliability.Pool
	hpu    *atomic.Pointer[hpuState]
}

// Each calls fn with every counter's name (rxe's where rxe has one) and
// value.
func (c *Counters) Each(fn func(name string, v uint64)) {
	for _, e := range []struct {
		name string
		v    *atomic.Uint64
	}{
		{"sent_pkts", &c.SentPkts}, {"rcvd_pkts", &c.RcvdPkts}, {"duplicate_request", &c.DuplicateRequest},
		{"out_of_seq_request", &c.OutOfSeqRequest}, {"rcvd_seq_err", &c.RcvdSeqErr}, {"send_err", &c.SendErr}, {"link_downed", &c.LinkDowned},
		{"rdma_sends", &c.RdmaSends}, {"rdma_recvs", &c.RdmaRecvs}, {"rcvd_bad_icrc", &c.RcvdBadICRC},
		{"rcvd_malformed", &c.RcvdMalformed}, {"rcvd_unknown_qp", &c.RcvdUnknownQP}, {"rcvd_wrong_transport", &c.RcvdWrongTransport}, {"rcvd_rnr_err", &c.RcvdRNRErr},
		{"send_rnr_err", &c.SendRNRErr}, {"retry_exceeded_err", &c.RetryExceededErr},
		{"retry_rnr_exceeded_err", &c.RetryRNRExceededErr}, {"retransmits", &c.Retransmits}, {"completer_retry_err", &c.Retransmits}, {"ack_deferred", &c.AckDeferred}, {"parked", &c.Parked},
		{"park_dropped", &c.ParkDropped}, {"rcvd_bad_response", &c.RcvdBadResponse}, {"send_waits", &c.SendWaits},
		{"dma_waits", &c.DMAWaits}, {"dma_faults", &c.DMAFaults},
		{"handed_off", &c.HandedOff}, {"handoff_dropped", &c.HandoffDropped},
		{"kernel_rx_frames", &c.KernelRxFrames}, {"kernel_rx_dropped", &c.KernelRxDropped}, {"rcvd_bad_pkey", &c.RcvdBadPKey}, {"rcvd_bad_addr", &c.RcvdBadAddr},
		{"rcvd_length_err", &c.RcvdLengthErr}, {"rcvd_op_seq_err", &c.RcvdOpSeqErr}, {"rcvd_rkey_err", &c.RcvdRKeyErr},
		{"rcvd_misaligned_atomic", &c.RcvdMisalignedAtomic}, {"duplicate_dropped", &c.DuplicateDropped},
		{"seq_nak_suppressed", &c.SeqNAKSuppressed}, {"seq_nak_repeated", &c.SeqNAKRepeated}, {"seq_nak_quiet", &c.SeqNAKQuiet}, {"seq_nak_tail", &c.SeqNAKTail}, {"seq_nak_idle", &c.SeqNAKIdle}, {"acks_repeated", &c.ACKsRepeated}, {"acks_before_nak", &c.ACKsBeforeNAK}, {"rnr_nak_repairs", &c.RNRRepairs}, {"rcvd_stale_response", &c.RcvdStaleResponse},
		{"replay_stall", &c.ReplayStalls}, {"replay_stalled_ns", &c.ReplayStalledNs},
		{"retransmitted_pkts", &c.RetransmittedPkts}, {"read_responses_resent", &c.ReadResponsesResent}, {"read_repairs", &c.ReadRepairs}, {"atomic_repairs", &c.AtomicRepairs}, {"local_ack_timeout", &c.LocalACKTimeouts}, {"early_retransmits", &c.EarlyRetransmits}, {"timers_held", &c.TimersHeld}, {"timer_runs", &c.TimerRuns}, {"later_runs", &c.LaterRuns}, {"credit_waits", &c.CreditWaits}, {"room_waits", &c.RoomWaits}, {"read_pace_cuts", &c.ReadPaceCuts}, {"placed_ahead", &c.PlacedAhead}, {"placed_reports", &c.PlacedReports}, {"repair_naks", &c.RepairNAKs},
		{"np_ecn_marked_roce_packets", &c.NPECNMarked}, {"np_cnp_sent", &c.NPCNPSent}, {"rp_cnp_handled", &c.RPCNPHandled},
		{"hpu_packets", &c.HPUPackets}, {"hpu_refused", &c.HPURefused}, {"hpu_faults", &c.HPUFaults},
		{"hpu_aborted", &c.HPUAborted}, {"hpu_commands", &c.HPUCommands}, {"hpu_commands_refused", &c.HPUCommandsRefused},
		{"app_lingers", &c.AppLingers}, {"app_linger_hits", &c.AppLingerHits}, {"app_yields", &c.AppYields}, {"ack_holds", &c.AckHolds}, {"ack_holds_late", &c.AckHoldsLate}, {"post_holds", &c.PostHolds}, {"post_holds_late", &c.PostHoldsLate}, {"post_holds_trusted", &c.PostHoldsTrusted}, {"post_holds_trusted_late", &c.PostHoldsTrustedLate}, {"mcast_recvs", &c.McastRecvs},
	} {
		fn(e.name, e.v.Load())
	}
	for t := range hostmem.NumContextTypes {
		fn("ctx_lookups_"+strings.ToLower(t.String()), c.CtxLookups[t].Load())
	}
	fn("ctx_waits", c.CtxWaits.Load())
	fn("cqes_held", c.CQEsHeld.Load())
	if c.replay != nil {
		st := c.replay.Stats()
		fn("replay_entries", uint64(st.Capacity))
		fn("replay_entries_reserved", uint64(st.Reserved))
		fn("replay_entries_in_use", uint64(st.InUse))
		fn("replay_entries_high", uint64(st.HighWater))
		fn("replay_reserve_refused", st.Refused)
	}
	if c.hpu != nil {
		if h := c.hpu.Load(); h != nil { // the handler stage's scheduler
			st := &h.engine.Stats
			fn("hpu_scheduled", st.Packets.Load())
			fn("hpu_buffers_full", st.Full.Load())
			fn("hpu_spills", st.Spills.Load())
			fn("hpu_messages", st.Messages.Load())
			fn("hpu_handler_faults", st.Faults.Load())
			fn("hpu_overlong", st.Overlong.Load())
			fn("hpu_helped", st.Helped.Load())    // tasks the NIC's engines ran themselves (hpu.Helper)
			fn("hpu_kept_off", st.KeptOff.Load()) // contexts kept off the engines: a handler waited, or faulted
			fn("hpu_nudges", st.Nudges.Load())    // sleeping HPUs the scheduler's watchdog woke
		}
	}
}

// DefaultReplayAllocation is the replay entries an RC QP reserves unless
// it asks for another number: 256 packets in flight. A QP's throughput is
// at most its allocation times the path MTU per round trip, so the
// natural size is the path's bandwidth-delay product in packets: 256
// entries of 4096 bytes keep 25 Gbit/s busy over a 335 us round trip,
// 100 Gbit/s over 84 us (at 1024 bytes, a quarter of that).
const DefaultReplayAllocation = 256

// Replay returns the NIC's replay pool, for its counters.
func (n *NIC) Replay() *reliability.Pool { return n.replay }

// OpenQP reserves entries replay entries for an RC QP (0: the default)
// from the NIC's pool, returning any it held: the host calls it when the
// QP moves to RTS, with q its context as it moves. It fails with
// reliability.ErrPoolFull when the pool has no room. The QP's receiver
// starts from q if no request has started it (the PSN it expects, its
// go-back-N or selective repeat), so that a go-back-N QP with
// hostmem.QPFlagIdleProbe whose application waits for a message already
// probes for it if none comes (reliability.Receiver.Expecting).
func (n *NIC) OpenQP(qpn uint32, entries int, q *hostmem.QPCEntry) error {
	if qpn >= uint32(len(n.qps)) {
		return errors.New("datapath: no such QP")
	}
	var err error
	e := n.owner(qpn)
	c := *q
	e.command(func() { err = e.openQP(qpn, &n.qps[qpn], entries, &c) })
	return err
}

// Doorbell tells the NIC that a QP's send queue (or, with Recv, its
// receive queue) producer index moved.
type Doorbell struct {
	QPN      uint32 // or, with SRQ, the SRQ number
	Producer uint32
	Recv     bool
	SRQ      bool
}

// NIC is a softrnic RNIC on one port with one or more queues. Its
// contexts live in host memory, in the tables Tables returns, and are
// reached through one GCCache per context type, in which every engine is
// a pipeline; host memory is reached only through the DMA engine. One
// engine goroutine per queue runs the requester, responder and completer
// for the QPs it owns; the host reaches them only through doorbells and
// commands.
type NIC struct {
	cfg      NICConfig
	tables   [hostmem.NumContextTypes]*hostmem.Table
	caches   [hostmem.NumContextTypes]ContextCache
	cqCache  *ctxcache.GCCache // the CQC's, for the engines' write-back of producer indices
	mttLine  int               // MTT entries per cache line
	counters Counters
	engines  []*engine
	qps      []qpRun  // running state of each QP, as an RNIC keeps it on chip; each owned by one engine
	srqs     []srqRun // and of each SRQ, shared by the engines under its lock
	cqLocks  []sync.Mutex
	replay   *reliability.Pool // the replay buffer every RC QP reserves from
	atomicMu sync.Mutex        // atomics are atomic across engines
	placed   atomic.Uint64
	waiters  atomic.Int32  // goroutines in WaitWritesPlaced
	placedCh chan struct{} // wakes one of them
	stopOnce sync.Once
	running  atomic.Bool // Run was called: Close waits for the engines' goroutines
	stop     chan struct{}
	hpu      atomic.Pointer[hpuState] // the handler stage, from the first context attached
	hpuMu    sync.Mutex
	paths    chan *memPath // the HPU clusters' memory paths (mempath.go), one per cluster
	src      sources       // the address a frame to each kind of destination leaves from
	// askedAt is arrivals when the application last rang a send
	// doorbell (PollApp): a Linger after it waits only if nothing has
	// come since.
	askedAt atomic.Uint64
	// oneCPU: the process may run on one CPU only (its affinity), where
	// a poll that spins holds the processor that what it waits for needs
	// (the peer's process, the kernel's receive work); idlePolls counts
	// the application's idle polls in a row there (NIC.Progress).
	oneCPU    bool
	idlePolls atomic.Int32
	mcast     mcastGroups // the multicast groups UD QPs are attached to (mcast.go)
}

// NewNIC builds the NIC's tables, caches and engines. Call Run to start it.
func NewNIC(cfg NICConfig) (*NIC, error) {
	if len(cfg.Ports) == 0 || cfg.Memory == nil || cfg.DMA == nil || !cfg.IP.IsValid() {
		return nil, errors.New("datapath: a NIC needs a port, host memory, a DMA engine and an IP address")
	}
	for _, p := range cfg.Ports {
		if p == nil {
			return nil, errors.New("datapath: a NIC's port queue is nil")
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxQPs, 256)
	def(&cfg.MaxCQs, 256)
	def(&cfg.MaxSRQs, 64)
	def(&cfg.MaxMRs, 1024)
	def(&cfg.MaxMTT, 65536)
	// A cache pipeline per engine, and one per HPU cluster's memory path.
	clusters := cfg.HPU.WithDefaults().Clusters
	cfg.Cache.Pipelines = len(cfg.Ports) + clusters
	qpTable := FirstQPN + cfg.MaxQPs // QPNs below FirstQPN stay invalid
	def(&cfg.ReplayEntries, 32768)
	if cfg.PollBudget <= 0 {
		cfg.PollBudget = 50 * time.Microsecond
	}
	if cfg.PostHold == 0 {
		cfg.PostHold = DefaultPostHold
	}
	if cfg.ACKHold == 0 {
		cfg.ACKHold = DefaultACKHold
	}
	if cfg.Clock == nil {
		cfg.Clock = hostmem.SystemClock{}
	}
	cfg.IP = cfg.IP.Unmap() // as packets' addresses are compared (rx.go) and sent from
	n := &NIC{cfg: cfg, src: newSources(cfg.IP, cfg.Addrs), qps: make([]qpRun, qpTable), replay: reliability.NewPool(cfg.ReplayEntries), srqs: make([]srqRun, cfg.MaxSRQs),
		cqLocks: make([]sync.Mutex, cfg.MaxCQs), stop: make(chan struct{}), placedCh: make(chan struct{}, 1)}
	n.counters.replay, n.counters.hpu = n.replay, &n.hpu
	counts := [hostmem.NumContextTypes]int{hostmem.QPC: qpTable, hostmem.CQC: cfg.MaxCQs, hostmem.SRQC: cfg.MaxSRQs, hostmem.MPT: cfg.MaxMRs, hostmem.MTT: cfg.MaxMTT}
	for t := range hostmem.NumContextTypes {
		n.tables[t] = hostmem.NewTable(cfg.Memory, t, hostmem.EntrySizes[t], counts[t])
		ad := ctxcache.NewAdapter(n.tables[t])
		if t == hostmem.QPC && cfg.BaselineQPC {
			bc := cfg.Cache
			bc.Outstanding = max(1, cfg.BaselineFetches)
			if bc.PIDs != 0 && bc.PIDs < bc.Outstanding {
				bc.PIDs = bc.Outstanding
			}
			b, err := ctxcache.NewBaseline(ad, cfg.DMA, bc)
			if err != nil {
				return nil, err
			}
			n.caches[t] = b
			continue
		}
		c, err := ctxcache.New(ad, cfg.DMA, cfg.Cache)
		if err != nil {
			return nil, err
		}
		n.caches[t] = c
		switch t {
		case hostmem.CQC:
			n.cqCache = c
		case hostmem.MTT:
			n.mttLine = c.EntriesPerLine()
		}
	}
	for i, p := range cfg.Ports {
		n.engines = append(n.engines, newEngine(n, i, p))
	}
	n.paths = make(chan *memPath, clusters)
	for i := range clusters {
		n.paths <- &memPath{nic: n, pipe: len(cfg.Ports) + i}
	}
	n.oneCPU = onOneCPU()
	return n, nil
}

// onOneCPU reports whether the process may run on one CPU only (taskset
// -c N): its main thread's affinity, which every thread started after it
// inherits. A program that pins only its polling thread to a CPU of its
// own keeps spinning there.
func onOneCPU() bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(unix.Getpid(), &set) == nil && set.Count() == 1
}

// Table returns the host-memory table of a context type.
func (n *NIC) Table(t hostmem.ContextType) *hostmem.Table { return n.tables[t] }

// ContextCache is what the NIC needs of a context cache: lookups for its
// engines' pipelines, and the host's commands. GCCache is one; the
// blocking baseline is another (NICConfig.BaselineQPC).
type ContextCache interface {
	ctxcache.Cache
	HostWrite(idx uint64, src []uint64) error
	Invalidate(idx uint64)
}

// Cache returns the context cache of a type, for host commands (HostWrite,
// Invalidate) and counters.
func (n *NIC) Cache(t hostmem.ContextType) ContextCache { return n.caches[t] }

// Counters returns the NIC's counters.
func (n *NIC) Counters() *Counters { return &n.counters }

// WritesPlaced counts the RDMA WRITE messages whose data the responder has
// handed to the DMA engine, counted at their last packet. With the DMA
// engine at memory speed the data is in host memory when the count moves,
// and loading the count orders it before the loader's reads: an
// application that waits for a peer's WRITE by watching its buffer (as
// perftest's write_lat does) reads the buffer only after the count moved.
func (n *NIC) WritesPlaced() uint64 { return n.placed.Load() }

// YieldPolls is how many polls a loop that drives the NIC (PollApp)
// makes between two looks at its context and yields of its goroutine
// (runtime.Gosched): about a millisecond of idle polls. A yield puts the
// goroutine on the runtime's global queue, where another thread may take
// it; one every 64 polls (a few microseconds) had a latency test's
// program hop between five threads thousands of times a second, each
// hop a thread woken on a machine whose cores spinning threads hold (the
// share of its iterations over 15 us fell from 1.6-4 % to 0.9-1.2 %).
// The runtime's own preemption keeps other goroutines from starving.
const YieldPolls = 16384

// WaitWritesPlaced blocks until WritesPlaced differs from seen, or ctx
// ends, and returns it: the sleeping form of watching the count.
func (n *NIC) WaitWritesPlaced(ctx context.Context, seen uint64) (uint64, error) {
	for i := 0; n.AppDriven(); i++ { // the caller's polling drives the NIC
		if cur := n.placed.Load(); cur != seen {
			return cur, nil
		}
		if !n.Progress() && i%YieldPolls == YieldPolls-1 {
			if err := ctx.Err(); err != nil {
				return seen, err
			}
			runtime.Gosched()
		}
	}
	for {
		if cur := n.placed.Load(); cur != seen {
			return cur, nil
		}
		n.waiters.Add(1)
		if cur := n.placed.Load(); cur != seen {
			n.waiters.Add(-1)
			return cur, nil
		}
		select {
		case <-n.placedCh:
			n.waiters.Add(-1)
		case <-ctx.Done():
			n.waiters.Add(-1)
			return n.placed.Load(), ctx.Err()
		}
	}
}

// writePlaced counts a placed WRITE message and wakes a waiter.
func (n *NIC) writePlaced() {
	n.placed.Add(1)
	if n.waiters.Load() > 0 {
		select {
		case n.placedCh <- struct{}{}:
		default:
		}
	}
}

// Engines returns each engine's counters, by queue.
func (n *NIC) Engines() []*EngineStats {
	s := make([]*EngineStats, len(n.engines))
	for i, e := range n.engines {
		s[i] = &e.stats
	}
	return s
}

// owner returns the engine that owns QP qpn.
func (n *NIC) owner(qpn uint32) *engine { return n.engines[qpn%uint32(len(n.engines))] }

// Deliver takes in a frame that reached the host outside the ports (a
// RoCEv2 datagram the kernel's UDP stack received because the XDP program
// did not see it: package kernelrx), as if the first queue had received
// it; noICRC says its integrity was checked already (the kernel's UDP
// checksum) and its ICRC is not to be. The frame is copied. It reports
// false, counting the frame dropped, when the NIC was opened without
// KernelRx or has no buffer free for it. Any goroutine may call it.
func (n *NIC) Deliver(frame []byte, noICRC bool) bool {
	n.counters.KernelRxFrames.Add(1)
	if n.cfg.DeliverTap != nil {
		n.cfg.DeliverTap(frame)
	}
	if e := n.engines[0]; e.inbox != nil && e.takeIn(frame, noICRC) {
		return true
	}
	n.counters.KernelRxDropped.Add(1)
	return false
}

// Ring queues a doorbell for the engine that owns the QP, waking it if it
// sleeps on its port; it blocks only if that engine is that far behind. An
// SRQ's producer index is shared by every engine and is written at once.
func (n *NIC) Ring(d Doorbell) {
	switch {
	case d.SRQ:
		if d.QPN < uint32(len(n.srqs)) {
			n.srqs[d.QPN].producer.Store(d.Producer)
		}
		return
	case d.Recv:
		e := n.owner(d.QPN)
		e.recvBells <- d
		n.bell(e, false)
	default:
		if n.cfg.Poll == PollApp {
			n.askedAt.Store(n.arrivals())
		}
		e := n.owner(d.QPN)
		e.doorbells <- d
		n.bell(e, true)
	}
}

// bell wakes an engine for a doorbell. When the application's polling
// drives it (PollApp), the caller's thread takes the doorbell, a turn at
// once, as a poll would: the frames leave without waiting for the
// application's next poll (a call and its return more, from C) or a
// wake-up of the engine's thread. An engine whose goroutine runs a turn
// right now is left alone unless it sleeps. A send doorbell's turn is a
// post's (holdPosts).
func (n *NIC) bell(e *engine, post bool) {
	if n.cfg.Poll != PollApp {
		e.wake()
		return
	}
	if e.mu.TryLock() {
		e.byApp, e.byPost = true, post
		_, err := e.turn()
		e.byApp, e.byPost = false, false
		e.mu.Unlock()
		if err == nil {
			return
		}
	}
	if e.sleeping.Load() {
		e.wake()
	}
}

// Progress runs one turn of every engine no other goroutine is running,
// in the caller's goroutine, and reports whether any had work. With
// PollApp the application's polling is what drives the NIC; with the
// other modes it only helps the engines' goroutines.
func (n *NIC) Progress() bool {
	busy := false
	for _, e := range n.engines {
		now := nanotime()
		if n.cfg.Poll == PollApp {
			e.drivenGap.Store(now - e.drivenStart.Swap(now)) // from its last call's start: its period
			e.driven.Store(now)                              // a long turn is the application's too
			e.renewLease(now)
		}
		if e.mu.TryLock() {
			e.byApp = n.cfg.Poll == PollApp
			b, _ := e.turnAt(now) // the turn's clock is this read
			e.byApp = false
			if n.cfg.Poll == PollApp && b {
				e.driven.Store(nanotime()) // before the lock goes: the engine's goroutine sees it (an idle turn is as short as a clock read)
			}
			e.mu.Unlock()
			busy = busy || b
		}
	}
	if n.oneCPU && n.cfg.Poll == PollApp {
		switch {
		case busy:
			n.idlePolls.Store(0)
		case n.idlePolls.Add(1) >= oneCPUIdlePolls:
			n.idlePolls.Store(0)
			n.yieldCPU()
		}
	}
	return busy
}

// oneCPUIdlePolls is how many idle polls in a row, on a single CPU, an
// application's polling spins before it sleeps on the port (yieldCPU).
const oneCPUIdlePolls = 4

// yieldCPU sleeps, in the application's polling thread, on the first
// engine's port until a frame, a doorbell (another thread's post) or the
// timers' next tick, as the engine's goroutine does when idle: on a
// single CPU nothing the poll waits for can happen while it spins (the
// peer process that answers, the kernel's work that delivers the frame
// are held off the processor until the scheduler takes it away, a
// time slice of milliseconds), and sleeping hands the processor over at
// once. An engine with work pending does not sleep.
func (n *NIC) yieldCPU() {
	e := n.engines[0]
	if !e.mu.TryLock() {
		return
	}
	e.sendHeld() // no later turn to answer in
	if !e.dma.busy() && !e.cfg.DMA.Busy() && e.sleepOnPort(e.sleepFor()) {
		n.counters.AppYields.Add(1)
	}
	e.mu.Unlock()
}

// Source is the address the NIC's frames to dst leave from
// (NICConfig.IP, or the first of Addrs of dst's kind): a connection
// manager's local address for a connection to dst.
func (n *NIC) Source(dst netip.Addr) netip.Addr { return n.src.forDst(dst.Unmap()) }

// HasAddr reports whether ip is one of the NIC's addresses (NICConfig.IP
// and Addrs).
func (n *NIC) HasAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip == n.cfg.IP || slices.ContainsFunc(n.cfg.Addrs, func(a netip.Addr) bool { return a.Unmap() == ip })
}

// Linger drives the NIC in the caller's thread, as Progress does, until
// a WRITE is placed or a message received (what a program waits for
// from its peer) or four poll budgets (NICConfig.PollBudget) pass with
// no frame; frames that come meanwhile (the packets of a message under
// way) keep it going, for lingerMax budgets in all at most (PollApp;
// with the other modes it does nothing). An application's poll calls it
// when the completion it found leaves its QP with no work outstanding: a
// program that then waits for its peer without a verb call (perftest's
// write_lat spins on the buffer the peer WRITEs) gets the peer's message
// handled in its own thread, which is running, instead of in the
// engine's, which a frame must wake. As a kernel socket's busy poll does
// (SO_BUSY_POLL), it spends the budget only where a frame is likely:
// verbs keeps the odds per CQ, and Linger does not wait when a WRITE was
// placed or a message received since the program's last request (its
// last send doorbell): what it waits for is here already. (Counted from
// the last linger instead, a peer whose frames the goroutine took
// between two polls, as a UC ping-pong's, whose send completes at once,
// made every poll skip its linger and hand nothing over: each WRITE
// waited for the goroutine's lease, 2.5 ms a half round trip. Ended by
// any frame, a linger left the rest of a message of several packets to
// that lease too.)
//
// lingered says it waited; hit, that what the program waits for came. A
// linger that did not see it hands the engines to their own goroutines
// (Release): the program may not poll again soon.
func (n *NIC) Linger() (lingered, hit bool) {
	if n.cfg.Poll != PollApp {
		return false, false
	}
	asked := n.askedAt.Load()
	if n.arrivals() != asked {
		return false, false
	}
	n.counters.AppLingers.Add(1)
	rx := n.rxFrames()
	budget := int64(n.cfg.PollBudget)
	now := nanotime()
	end, last := now+4*budget, now+lingerMax*budget
	for i := 1; ; i++ {
		n.Progress()
		if n.arrivals() != asked {
			n.counters.AppLingerHits.Add(1)
			return true, true
		}
		if i%8 != 0 { // the clock every 8 polls: a poll is a clock read's time or two
			continue
		}
		now := nanotime()
		if k := n.rxFrames(); k != rx { // a message under way
			rx, end = k, min(now+4*budget, last)
		}
		if now > end {
			n.Release()
			return true, false
		}
	}
}

// lingerMax is the most poll budgets a Linger lasts while frames keep
// coming (12.8 ms with the default budget): beyond, the NIC's goroutine
// takes the rest of a long message. The program's thread lingers where
// it would otherwise spin on its buffer beside that goroutine, two
// threads where one does the work: ib_write_lat took 3.0-5.2 ms at 1 MiB
// and 32 ms at 4 MiB with 16 budgets, 1.5-2.3 and 10 with 256 (MTU 1500).
// A linger ends sooner when the frames stop (four budgets without one)
// or the peer's message is there; frames of the program's own traffic
// on other QPs (their ACKs) stop when it posts no more, as it does not
// while it lingers.
const lingerMax = 256

// arrivals counts what a program may wait for that is not a completion
// of its own requests: WRITEs placed and messages received.
func (n *NIC) arrivals() uint64 { return n.placed.Load() + n.counters.RdmaRecvs.Load() }

// Arrivals is arrivals for a driver: its polls linger only while the
// peer sends of its own accord.
func (n *NIC) Arrivals() uint64 { return n.arrivals() }

// rxFrames is the frames the engines have taken from their queues.
func (n *NIC) rxFrames() uint64 {
	var k uint64
	for _, e := range n.engines {
		k += e.stats.RxFrames.Load()
	}
	return k
}

// Driving says the application polls (PollApp) without running the
// engines this time: its poll found completions. The engines' own
// goroutines stay out of its way as they do while it runs them
// (NIC.Progress), so that the application's thread and theirs do not
// both run the NIC, and a program that always finds completions
// (perftest's bandwidth loop) keeps its NIC to itself.
func (n *NIC) Driving() {
	if n.cfg.Poll != PollApp {
		return
	}
	now := nanotime()
	for _, e := range n.engines {
		e.driven.Store(now)
		e.renewLease(now)
	}
}

// SendHeld sends, in the caller's thread, the ACKs an application's
// turns hold for its answer (holdACKs): a program whose exchange is over
// calls it before it tells its peer so by other means (perftest's end of
// a latency run, before its connection closes), so that the peer's last
// completion does not wait for the NIC's goroutine. NIC.Close does it
// too.
func (n *NIC) SendHeld() {
	for _, e := range n.engines {
		e.mu.Lock()
		e.sendHeldByApp()
		e.mu.Unlock()
	}
}

// Release hands the engines back to their own goroutines until the
// application's polling drives them again (PollApp): a program that arms
// a completion channel and then sleeps on it polls no more, and its
// frames must not wait for the engines' millisecond tick.
func (n *NIC) Release() {
	if n.cfg.Poll != PollApp {
		return
	}
	for _, e := range n.engines {
		if e.postHeld.Load() && e.mu.TryLock() { // what its posts held leaves now, not at the goroutine's wake-up
			e.sendHeldByApp()
			e.mu.Unlock()
		}
		e.driven.Store(0)
		e.wakeLease()
		e.wake()
	}
}

// SpareProcs sets the Go runtime's GOMAXPROCS to twice the CPUs, unless
// the environment sets it; a program that runs NICs calls it first.
// Threads of the NIC and of the application sleep in system calls (an
// engine between its turns while the application polls; a C program's
// thread, for the runtime, between two calls into the verbs), and with
// no P idle the runtime's monitor takes such a thread's P away every 20
// us and hands it on, a wake-up of another thread each time, and one
// more to get a P back: on a machine whose cores spinning programs hold,
// each preempts them. With Ps to spare it leaves them for 10 ms.
//
// Without spare Ps, engines asleep on their ports hold the Ps they slept
// with: with two engines on two CPUs no P is left, and a goroutine made
// ready meanwhile (an application woken by a completion) waits until the
// monitor takes a P back, up to 10 ms when it has been idle (a test
// binary's incast lost 10-20 ms at its end so). verbs.Open calls it, so
// that a Go program gets what the softrnic command and the C library
// get. It only ever raises GOMAXPROCS.
func SpareProcs() {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < 2*runtime.NumCPU() {
		runtime.GOMAXPROCS(2 * runtime.NumCPU())
	}
}

// AppDriven reports whether the application's polling drives the NIC
// (PollApp).
func (n *NIC) AppDriven() bool { return n.cfg.Poll == PollApp }

// QPErrored reports whether the NIC has moved a QP to the error state
// (after an error completion).
func (n *NIC) QPErrored(qpn uint32) bool {
	if qpn >= uint32(len(n.qps)) {
		return false
	}
	var e bool
	n.owner(qpn).command(func() { e = n.qps[qpn].errored })
	return e
}

// ResetQP clears the NIC's running state of a QP (modify to RESET).
func (n *NIC) ResetQP(qpn uint32) {
	if qpn < uint32(len(n.qps)) {
		e := n.owner(qpn)
		e.command(func() { e.resetQP(qpn) })
	}
}

// SendsLeft reports whether QP qpn has sends still to go of the work
// requests posted up to producer (its send queue's producer index): not
// yet taken from the queue, in flight, or frames not yet handed to the
// port. For a UD or UC QP none left means every posted send has left
// (verbs.QP.Destroy waits for that: a program that posts its last
// datagrams and exits at once, as mckey's sender does, must not lose
// them to a NIC that had not yet taken its doorbell).
func (n *NIC) SendsLeft(qpn, producer uint32) bool {
	if qpn >= uint32(len(n.qps)) {
		return false
	}
	e := n.owner(qpn)
	left := true
	e.command(func() {
		r := &e.qps[qpn]
		left = r.sqConsumer != producer || r.ifN > 0 || !e.txIdle()
	})
	return left
}

// ResetSRQ forgets an SRQ's queue positions: the host destroyed it, and
// its number may serve a new one.
func (n *NIC) ResetSRQ(num uint32) {
	if num >= uint32(len(n.srqs)) {
		return
	}
	s := &n.srqs[num]
	s.mu.Lock()
	s.producer.Store(0)
	s.consumer = 0
	s.mu.Unlock()
}

// FlushQP is the host moving a QP to the error state: every work request
// posted to it and not yet complete completes with a flush error
// (IBV_WC_WR_FLUSH_ERR), as ibv_modify_qp to IBV_QPS_ERR has it, the
// receives too (a QP with an SRQ leaves the SRQ's to the others).
func (n *NIC) FlushQP(qpn uint32) {
	if qpn >= uint32(len(n.qps)) {
		return
	}
	e := n.owner(qpn)
	e.command(func() {
		var q hostmem.QPCEntry
		if !e.qpc(qpn, &q) {
			return
		}
		r := &n.qps[qpn]
		if !r.errored {
			e.fail(qpn, &q, r, ibv.WCWRFlushErr)
		}
		e.recvBellsDue()
		e.flushRecv(qpn, &q, r)
	})
}

// Command runs fn on the first engine's goroutine while every other
// engine waits between two turns, and returns: the way the host changes
// what the engines use (host memory a context cache reads included, with
// no engine reading it meanwhile), and a fence between the host and all
// of them.
func (n *NIC) Command(fn func()) {
	if len(n.engines) == 1 {
		n.engines[0].command(fn)
		return
	}
	parked, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range n.engines[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.command(func() {
				parked <- struct{}{}
				<-release
			})
		}()
	}
	for range n.engines[1:] {
		<-parked
	}
	n.engines[0].command(fn)
	close(release)
	wg.Wait()
}

// Run runs the engines, one goroutine per queue; it returns when Close is
// called and every engine has stopped.
func (n *NIC) Run() {
	n.running.Store(true)
	var wg sync.WaitGroup
	for _, e := range n.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run()
		}()
	}
	wg.Wait()
}

// Close stops the engines and waits for them.
func (n *NIC) Close() {
	n.stopOnce.Do(func() {
		close(n.stop)
		for _, e := range n.engines {
			e.wakeLease()
			e.port.Wake()
		}
	})
	if n.running.Load() {
		for _, e := range n.engines {
			<-e.done
		}
	}
	for _, e := range n.engines { // the port buffers parked in place go back before the port closes
		e.mu.Lock()
		e.sendHeld()
		e.releaseHeld()
		if e.hpuHelper != nil {
			e.hpuHelper.Flush() // the tasks it kept, to the HPUs: the engine closes after them
		}
		e.mu.Unlock()
	}
	if h := n.hpu.Load(); h != nil {
		h.engine.Close()
	}
}

// LastWrongTransport is the transport of the last request counted in
// RcvdWrongTransport (0 before any).
func (c *Counters) LastWrongTransport() wire.Transport {
	return wire.Transport(c.lastWrongTransport.Load())
}
