package datapath

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/reliability"
)

// maxRdAtomic is how many READs and atomics a responder answers at once
// per QP and remembers the answers of (the device's max_qp_rd_atom); a
// requester keeps no more than that outstanding.
const maxRdAtomic = reliability.MaxRdAtomic

// srqRun is the NIC's running state of a shared receive queue. The
// engines of every queue take from it, under its lock; the host writes
// its producer index.
type srqRun struct {
	mu       sync.Mutex
	producer atomic.Uint32
	consumer uint32 // under mu
}

// qpRun is the NIC's running state of one QP.
type qpRun struct {
	sndStarted bool // the sender's PSN taken from the context (at RTS)
	rcvStarted bool // the receiver's (at RTR)
	errored    bool

	// requester and completer
	alloc                  reliability.Allocation // its replay entries
	snd                    reliability.Sender     // RC: the window, replay entries, timer
	psn                    wire.PSN               // UC and UD: the next PSN
	sqProducer, sqConsumer uint32
	inflight               [64]inflight // fetched, not yet completed, in order
	ifHead, ifN            int
	ifSeq                  uint32 // the next in-flight entry's number
	sendIdx, sendPkt       int    // next new packet: message (from ifHead) and packet
	timed                  bool   // on the engine's timer list
	onLater                bool   // on the engine's list of QPs to come back to next pass
	sqWaiting              bool   // the requester waits for a context (park.go)
	seen                   reliability.SenderStats

	// packets waiting for the QP's context (see park.go)
	parked          [parkDepth]parkedFrame
	parkHead, parkN int

	// responder
	rcv                    reliability.Receiver // RC: expected PSN, duplicates, MSN
	lastCNP                time.Time            // when it last sent a CNP
	ucExp                  wire.PSN             // UC: the expected PSN
	rqProducer, rqConsumer uint32
	ucDrop                 bool // UC: dropping the rest of a broken message
	recvActive             bool
	recv                   host.RecvWQE
	recvIndex              uint32 // the receive WQE's queue index
	recvOff                uint32
	writeVA                uint64
	writeKey               uint32
	writeLeft              uint32
	writeLen               uint32                 // the WRITE's length (its RETH's), for a WRITE_WITH_IMM's completion
	reads                  [maxRdAtomic]readState // READs being answered, in order
	readHead, readN        int
	readListed             bool    // on the NIC's list of QPs answering READs
	hpu                    hpuRecv // messages to its execution context, and its handlers' commands
}

// readState is a READ response in progress.
type readState struct {
	psn            wire.PSN
	va             uint64
	key            uint32
	total, packets int
	next           int
	msn            uint32
	again          bool // answering a duplicate: every packet is sent again
}

// inflight is a fetched work request: sending, or waiting for its ACK or
// READ response.
type inflight struct {
	wqe      host.SendWQE
	index    uint32 // the WQE's send queue index
	seq      uint32 // its number in the in-flight list (its replay entries name it)
	cmd      int32  // a handler's command (slot+1) instead of a WQE, or 0
	firstPSN wire.PSN
	lastPSN  wire.PSN
	packets  int
	length   uint32
	signaled bool
	started  bool // its first packet has been admitted: firstPSN and lastPSN hold
}

func pmtu(q *host.QPCEntry) int {
	if q.MTU >= 1 && q.MTU <= 5 {
		return 128 << q.MTU
	}
	return 1024
}

// startReceiver takes a QP's first expected PSN from its context, when
// the first request comes (at RTR or later).
func (r *qpRun) startReceiver(q *host.QPCEntry) {
	if !r.rcvStarted {
		r.rcvStarted = true
		r.rcv.Init(wire.PSN(q.RQPSN), q.Type == host.QPTRC && q.Flags&host.QPFlagSelectiveRepeat != 0)
		r.ucExp = wire.PSN(q.RQPSN) & wire.PSNMask
	}
}

// startSender takes a QP's first PSN and its retry attributes from its
// context, when it first sends (at RTS).
func (r *qpRun) startSender(q *host.QPCEntry, cfg *NICConfig) {
	if !r.sndStarted {
		r.sndStarted = true
		r.snd.Init(r.alloc, wire.PSN(q.SQPSN), reliability.Params{Timeout: q.Timeout, RetryCnt: q.RetryCnt,
			RNRRetry: q.RNRRetry, MaxRdAtomic: q.MaxRdAtomic, SelectiveRepeat: q.Flags&host.QPFlagSelectiveRepeat != 0,
			NoCongestionControl: cfg.NoCongestionControl, Delay: cfg.DelayRule})
		r.psn = wire.PSN(q.SQPSN) & wire.PSNMask
	}
}

// complete writes a CQE into a completion queue.
// QPs of several engines may share a CQ: its lock keeps its producer
// index and its ring in step.
func (n *engine) complete(cqn uint32, c *host.CQE) {
	if cqn >= uint32(len(n.cqLocks)) {
		return
	}
	n.cqLocks[cqn].Lock()
	defer n.cqLocks[cqn].Unlock()
	if !n.ctx(host.CQC, uint64(cqn), n.entry[:64]) {
		return
	}
	var r host.RingEntry
	r.Decode(n.entry[:64])
	if !r.Valid || r.Size == 0 {
		return
	}
	c.Owner = uint8((r.Producer/r.Size)&1) ^ 1
	var b [host.CQESize]byte
	c.Encode(b[:])
	n.cfg.DMA.Write(r.Base+uint64(r.Producer%r.Size)*host.CQESize, b[:])
	n.cfg.DMA.Quiesce() // the CQE must be in host memory before the notice
	if n.cfg.Notify != nil {
		n.cfg.Notify(cqn)
	}
	r.Producer++
	r.Encode(n.entry[:64])
	words := n.words[:8]
	for i := range words {
		words[i] = le.Uint64(n.entry[8*i:])
	}
	n.cqCache.Update(uint64(cqn), words)
}
