package datapath

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// maxRdAtomic is how many READs and atomics a responder answers at once
// per QP (the device's max_qp_rd_atom; it remembers the answers of
// reliability.ReadHistory); a requester keeps no more than that
// outstanding.
const maxRdAtomic = reliability.MaxRdAtomic

// maxRereads is how many partial re-reads a responder queues beside the
// READs it answers (selective repeat: a requester asks for just the
// responses it lacks, each hole its own request); one beyond them is
// dropped, counted, and the requester's timer asks again.
const maxRereads = 8

// srqRun is the NIC's running state of a shared receive queue. The
// engines of every queue take from it, under its lock; the host writes
// its producer index.
type srqRun struct {
	mu       sync.Mutex
	producer atomic.Uint32
	consumer uint32 // under mu
}

// qpRun is the NIC's running state of one QP, as an RNIC keeps it on
// chip: its send side (requester and completer), its receive side
// (responder) and the packets parked for its contexts, each touched only
// by the engine that owns the QP.
type qpRun struct {
	errored bool // the QP is in the error state: it takes no requests and sends nothing new
	// rcvStarted: the receiver's PSN is taken from the context (at RTR
	// or later, startReceiver). Until then its Receiver holds no
	// deadline, and the timers read only this line: with thousands of
	// QPs that only send, their receive state stays cold.
	rcvStarted bool
	// parkHead and parkN place qpParked's packets in its ring; every
	// packet that comes in looks at parkN, so they sit here, in the
	// first cache line with the requester's scalars, and the ring
	// itself at the end.
	parkHead, parkN int
	qpSend
	qpRecv
	qpParked
}

// qpSend is a QP's send side: the requester's queue position, the work
// requests in flight, and the reliability Sender that gates and recovers
// them.
type qpSend struct {
	// The requester's scalars first, then the Sender, whose per-packet
	// fields lead it: with thousands of QPs a QP's state is cold when
	// its turn comes, and each cache line it touches is a miss.
	sndStarted             bool     // the sender's PSN taken from the context (at RTS)
	sqWaiting              bool     // the requester waits for a context (park.go)
	timerWaiting           bool     // a due timer waits for the QP's context, with the requester (expire)
	onLater                bool     // on the engine's list of QPs to come back to next pass
	dmaFault               bool     // a read of its WQEs or payload failed: the requester fails the QP
	roomWait               bool     // on the engine's list of QPs waiting for room for the answers
	fetch                  int32    // its WQE fetch slot + 1, or 0 (dmastage.go)
	cmdHead, cmdTail       int32    // its handlers' commands waiting for the requester: slot+1, a list through hpuCmd.next (hpu.go)
	psn                    wire.PSN // UC and UD: the next PSN
	sqProducer, sqConsumer uint32
	ifSeq                  uint32 // the next in-flight entry's number
	seenGen                uint32 // the sender's StatsGen when its counters were last added (senderStats)
	ifHead, ifN            int
	sendIdx, sendPkt       int                        // next new packet: message (from ifHead) and packet
	awaitOut               int                        // answers it awaits (READ responses, ACKs), as counted in the engine's awaitOut
	inflight               []inflight                 // fetched, not yet completed, in order: a ring of min(SQ size, maxInflight) (sizeInflight)
	wheel                  wheelLink                  // its place on the engine's timing wheel (timers.go)
	alloc                  reliability.Allocation     // its replay entries
	snd                    reliability.Sender         // RC: the window, replay entries, timer
	seen                   reliability.TransportStats // the sender's counters last added to the NIC's (senderStats)
}

// maxInflight is the most work requests a QP has in flight at once
// (fetched, not yet completed); a QP with a smaller send queue holds as
// many as its queue.
const maxInflight = 64

// sizeInflight gives a QP whose send queue holds sqSize work requests
// its in-flight ring, when it has none: the per-QP state stays small (a
// few KiB) when there are many QPs with short queues, as the NIC's QP
// state would on chip. It is made once per QP, the first time its
// requester runs after a reset, not per packet.
func (r *qpRun) sizeInflight(sqSize uint32) {
	if r.inflight == nil {
		r.inflight = make([]inflight, min(int(max(sqSize, 1)), maxInflight))
	}
}

// qpRecv is a QP's receive side: the responder's expected PSN and
// message under way, its receive WQE, the WRITE it places, the READs it
// answers, and the messages its execution context's handlers take.
type qpRecv struct {
	// The responder's scalars first, then the Receiver and the handlers'
	// state, whose per-packet fields lead them (qpSend says why).
	idleProbe              bool     // an RC QP with QPFlagIdleProbe moved to RTS (OpenQP): its receiver probes while idle (expecting)
	ucDrop                 bool     // UC: dropping the rest of a broken message
	recvActive             bool     // a receive WQE is taken (recv)
	readListed             bool     // on the NIC's list of QPs answering READs
	inMsg                  uint8    // the message under way (msgSend, msgWrite), for checkOpSeq
	rcvFirst               wire.PSN // the first PSN it expected
	ucExp                  wire.PSN // UC: the expected PSN
	rqProducer, rqConsumer uint32
	recvIndex              uint32 // the receive WQE's queue index
	recvOff                uint32
	writeKey               uint32
	writeLeft              uint32
	writeLen               uint32 // the WRITE's length (its RETH's), for a WRITE_WITH_IMM's completion
	writeVA                uint64
	readHead, readN        int
	lastCNP                time.Time                           // when it last sent a CNP
	rcv                    reliability.Receiver                // RC: expected PSN, duplicates, MSN
	hpu                    hpuRecv                             // messages to its execution context, and its handlers' commands
	recv                   hostmem.RecvWQE                     // the receive WQE taken
	reads                  [maxRdAtomic + maxRereads]readState // READs being answered, in order
	readPace               readPace                            // the spacing of its READ responses (readpace.go)
}

// qpParked holds the packets waiting for the QP's contexts, in order
// (park.go).
type qpParked struct {
	parked [parkDepth]parkedFrame // from parkHead, parkN of them (qpRun)
}

// resetQP clears a QP's running state (modify to RESET), giving back
// what it holds: its replay entries, its place on the timing wheel, its
// parked packets' buffers and what its handlers had under way.
func (e *engine) resetQP(qpn uint32) {
	r := &e.qps[qpn]
	e.nic.replay.Release(r.alloc)
	e.hpuReset(qpn, r)
	e.unwheel(qpn, r)
	e.dropFetch(r)
	e.awaitOut -= r.awaitOut
	if r.roomWait {
		e.roomWaiters = slices.DeleteFunc(e.roomWaiters, func(n uint32) bool { return n == qpn })
	}
	for ; r.parkN > 0; r.parkN-- {
		e.unpark(r.parked[r.parkHead])
		r.parkHead = (r.parkHead + 1) % parkDepth
	}
	*r = qpRun{}
}

// readState is a READ response in progress.
type readState struct {
	psn            wire.PSN
	va             uint64
	key            uint32
	total, packets int
	next           int
	until          int // a repair's end (reliability.ReadRepeat): the packets before it; 0: every packet
	msn            uint32
	again          bool // answering a duplicate: every packet is sent again
}

// inflight is a fetched work request: sending, or waiting for its ACK or
// READ response.
type inflight struct {
	wqe      hostmem.SendWQE
	index    uint32 // the WQE's send queue index
	seq      uint32 // its number in the in-flight list (its replay entries name it)
	cmd      int32  // a handler's command (slot+1) instead of a WQE, or 0
	firstPSN wire.PSN
	lastPSN  wire.PSN
	packets  int
	length   uint32
	chunk    int // a READ: response packets asked for per request (readChunk)
	signaled bool
	started  bool // its first packet has been admitted: firstPSN and lastPSN hold
}

func pmtu(q *hostmem.QPCEntry) int {
	if q.MTU >= 1 && q.MTU <= 5 {
		return 128 << q.MTU
	}
	return 1024
}

// startReceiver takes a QP's first expected PSN from its context, when
// the first request comes (at RTR or later).
func (r *qpRun) startReceiver(q *hostmem.QPCEntry) {
	if !r.rcvStarted {
		r.rcvStarted = true
		r.rcv.Init(wire.PSN(q.RQPSN), q.Type == ibv.QPTRC && q.Flags&hostmem.QPFlagSelectiveRepeat != 0)
		r.rcvFirst = wire.PSN(q.RQPSN) & wire.PSNMask
		r.ucExp = wire.PSN(q.RQPSN) & wire.PSNMask
	}
}

// startSender takes a QP's first PSN and its retry attributes from its
// context, when it first sends (at RTS).
func (r *qpRun) startSender(q *hostmem.QPCEntry, cfg *NICConfig, path *reliability.PathRTT) {
	if !r.sndStarted {
		r.sndStarted = true
		r.snd.Init(r.alloc, wire.PSN(q.SQPSN), reliability.Params{Timeout: q.Timeout, RetryCnt: q.RetryCnt,
			RNRRetry: q.RNRRetry, MaxRdAtomic: q.MaxRdAtomic, SelectiveRepeat: q.Flags&hostmem.QPFlagSelectiveRepeat != 0,
			NoCongestionControl: cfg.NoCongestionControl, Delay: cfg.DelayRule, Path: path, DCQCN: cfg.DCQCN, PathMTU: pmtu(q)})
		r.psn = wire.PSN(q.SQPSN) & wire.PSNMask
	}
}

// The CQE stage: a completion is written into its CQ's ring, in host
// memory, through the CQ's context. QPs of several engines may share a
// CQ: its lock keeps its producer index and its ring in step, and the
// context (whose producer index moves with every CQE) is looked up under
// it, once per CQE. A context that misses holds the CQE, not the engine:
// the CQE waits, with every later CQE of that CQ from this engine, in
// order, in a queue of fixed capacity (cqeQueue) until the context comes,
// while the engine goes on. A QP's later CQEs on its other CQ wait behind
// it too: its completions reach the host in the order the engine made
// them (an ACK's send completion before the receive completion of the
// message the peer sent after it), as a program that waits on one
// channel for both of a QP's CQs expects (perftest's -e).

// cqeQueue is how many CQEs an engine holds for CQ contexts that missed.
// Beyond that a CQE waits for its context (counted, ctx_waits).
const cqeQueue = 256

// pendingCQE is a CQE waiting for its CQ's context.
type pendingCQE struct {
	cqn uint32
	cqe hostmem.CQE
}

// complete writes a CQE into a completion queue, or queues it behind the
// CQ's context (or behind the CQ's CQEs already queued).
func (e *engine) complete(cqn uint32, c *hostmem.CQE) {
	if cqn >= uint32(len(e.nic.cqLocks)) {
		return
	}
	if e.cqeHeld[cqn] > 0 || e.cqeHeldQP[c.QPN%uint32(len(e.cqeHeldQP))] > 0 || !e.writeCQE(cqn, c, e.cqeN < cqeQueue) {
		e.holdCQE(cqn, c)
	}
}

// holdCQE queues a CQE until its CQ's context comes; a full queue waits
// for the context instead.
func (e *engine) holdCQE(cqn uint32, c *hostmem.CQE) {
	if e.cqeN == cqeQueue {
		e.counters.CtxWaits.Add(1)
		if e.flushCQEs(false); e.cqeN == cqeQueue {
			e.flushCQEs(true)
		}
		if e.cqeHeld[cqn] == 0 && e.cqeHeldQP[c.QPN%uint32(len(e.cqeHeldQP))] == 0 {
			e.writeCQE(cqn, c, false)
			return
		}
	}
	e.cqes[(e.cqeHead+e.cqeN)%cqeQueue] = pendingCQE{cqn: cqn, cqe: *c}
	e.cqeN++
	e.cqeHeld[cqn]++
	e.cqeHeldQP[c.QPN%uint32(len(e.cqeHeldQP))]++
	e.counters.CQEsHeld.Add(1)
}

// flushCQEs writes the queued CQEs, in order: those whose contexts have
// come, stopping at the first that misses again (a new ticket), or, with
// wait, every one, waiting for the contexts.
func (e *engine) flushCQEs(wait bool) {
	for e.cqeN > 0 {
		pc := &e.cqes[e.cqeHead]
		if !e.writeCQE(pc.cqn, &pc.cqe, !wait) {
			return
		}
		e.cqeHeld[pc.cqn]--
		e.cqeHeldQP[pc.cqe.QPN%uint32(len(e.cqeHeldQP))]--
		e.cqeHead = (e.cqeHead + 1) % cqeQueue
		e.cqeN--
	}
}

// notice tells the host a CQE is in CQ cqn's ring once it is in host
// memory: at once without a PCIe model; else by a DMA fence issued behind
// the CQE's write, whose completion (from whoever polls the DMA engine)
// is the notice. The engine does not wait for the write.
func (e *engine) notice(cqn uint32) {
	if e.cfg.Notify == nil {
		return
	}
	if !e.asyncDMA() {
		e.cfg.Notify(cqn)
		return
	}
	for {
		err := e.cfg.DMA.Fence(e.noticer, uint64(cqn))
		if err == nil {
			return
		}
		if !errors.Is(err, hostmem.ErrDMABusy) { // closed: no one to tell
			return
		}
		e.counters.DMAWaits.Add(1)
		e.pollDMA()
	}
}

// noticer calls Notify when a CQE's fence completes.
type noticer struct{ notify func(cqn uint32) }

func (n noticer) DMADone(tag uint64, _ error) { n.notify(uint32(tag)) }

// writeCQE writes a CQE through its CQ's context. With park, a context
// that misses leaves the CQE unwritten (false), its ticket recorded;
// without, the write waits for the context. A CQ with no valid context
// takes nothing (true: the CQE is gone, as on an RNIC).
func (e *engine) writeCQE(cqn uint32, c *hostmem.CQE, park bool) bool {
	e.nic.cqLocks[cqn].Lock()
	defer e.nic.cqLocks[cqn].Unlock()
	st, pid, words := e.look(hostmem.CQC, uint64(cqn))
	switch {
	case st == ctxcache.Hit:
		putWords(e.entry[:64], words)
	case st == ctxcache.Miss && park:
		e.parkPID[hostmem.CQC][pid] = cqeWait
		return false
	case st == ctxcache.Miss:
		e.counters.CtxWaits.Add(1)
		e.waitTicket(hostmem.CQC, pid, words)
		putWords(e.entry[:64], words)
	default: // a fault, or no ticket free
		if !e.ctx(hostmem.CQC, uint64(cqn), e.entry[:64]) {
			return true
		}
	}
	var r hostmem.RingEntry
	r.Decode(e.entry[:64])
	if !r.Valid || r.Size == 0 {
		return true
	}
	c.Owner = uint8((r.Producer/r.Size)&1) ^ 1
	var b [hostmem.CQESize]byte
	c.Encode(b[:])
	e.cfg.DMA.Write(r.Base+uint64(r.Producer%r.Size)*hostmem.CQESize, b[:])
	e.notice(cqn)
	r.Producer++
	r.Encode(e.entry[:64])
	w := e.words[:8]
	for i := range w {
		w[i] = le.Uint64(e.entry[8*i:])
	}
	e.nic.cqCache.Update(uint64(cqn), w)
	return true
}
