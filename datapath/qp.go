package datapath

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// maxRdAtomic is how many READs and atomics a responder answers at once
// per QP and remembers the answers of (the device's max_qp_rd_atom); a
// requester keeps no more than that outstanding.
const maxRdAtomic = 16

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
	started bool // PSNs taken from the context
	errored bool

	// requester and completer
	sqProducer, sqConsumer uint32
	nextPSN                wire.PSN     // PSN of the next new message
	una                    wire.PSN     // oldest unacknowledged PSN
	sentMax                wire.PSN     // newest PSN sent
	inflight               [64]inflight // fetched, not yet completed, in order
	ifHead, ifN            int
	sendIdx, sendPkt       int       // next packet to send: message (from ifHead) and packet
	deadline               time.Time // retransmission timer; zero when idle
	armed                  bool      // on the NIC's timer list
	retries, rnrRetries    int
	rnrWait                bool // paused by an RNR NAK until the deadline
	sqWaiting              bool // the requester waits for a context (park.go)
	gapAsked               bool // a READ gap has been asked for again

	// packets waiting for the QP's context (see park.go)
	parked          [parkDepth]parkedFrame
	parkHead, parkN int

	// responder
	rqProducer, rqConsumer uint32
	expPSN                 wire.PSN
	msn                    uint32
	nakSent                bool      // a PSN sequence NAK is out for expPSN
	lastSeqNAK             time.Time // when the last PSN sequence NAK went out
	ucDrop                 bool      // UC: dropping the rest of a broken message
	recvActive             bool
	recv                   host.RecvWQE
	recvIndex              uint32 // the receive WQE's queue index
	recvOff                uint32
	writeVA                uint64
	writeKey               uint32
	writeLeft              uint32
	reads                  [maxRdAtomic]readState // READs being answered, in order
	readHead, readN        int
	readListed             bool                      // on the NIC's list of QPs answering READs
	atomics                [maxRdAtomic]atomicResult // answers to recent atomics, for duplicates
	atomicNext             int
	readsDone              [maxRdAtomic]readRecord // recent READs accepted, for duplicates
	readsDoneNext          int
}

// readRecord remembers a READ request the responder accepted: a duplicate
// of it (a retry, whole or from a later PSN) is answered again; a
// duplicate that matches none is dropped.
type readRecord struct {
	valid   bool
	psn     wire.PSN // its first PSN
	packets int
	va      uint64
	key     uint32
	total   uint32
	msn     uint32
}

// covers reports whether a duplicate READ request for psn asking for
// length bytes at va under key asks again for (part of) this READ: the
// same key, its PSN among the READ's, and its range inside the READ's (as
// rxe checks a duplicate READ against the resource it finds).
func (rr *readRecord) covers(psn wire.PSN, va uint64, key, length uint32) bool {
	if !rr.valid || key != rr.key || psn.Before(rr.psn) || int(psn.Diff(rr.psn)) >= rr.packets {
		return false
	}
	return va >= rr.va && uint64(length) <= uint64(rr.total) && va-rr.va <= uint64(rr.total)-uint64(length)
}

// readState is a READ response in progress.
type readState struct {
	psn            wire.PSN
	va             uint64
	key            uint32
	total, packets int
	next           int
	msn            uint32
}

// atomicResult remembers the answer to an atomic request: a duplicate must
// get the same answer, not a second execution.
type atomicResult struct {
	valid bool
	psn   wire.PSN
	orig  uint64
}

// inflight is a fetched work request: sending, or waiting for its ACK or
// READ response.
type inflight struct {
	wqe       host.SendWQE
	index     uint32 // the WQE's send queue index
	firstPSN  wire.PSN
	lastPSN   wire.PSN
	packets   int
	length    uint32
	signaled  bool
	completed bool // a READ whose last response has come
}

// Work completion opcodes and statuses as verbs numbers them.
const (
	wcSend          = 0
	wcRDMAWrite     = 1
	wcRDMARead      = 2
	wcCompSwap      = 3
	wcFetchAdd      = 4
	wrAtomicCAS     = 5
	wrAtomicFAA     = 6
	wcRecv          = 128
	wcRecvRDMAImm   = 129
	wcSuccess       = 0
	wcLocLenErr     = 1
	wcLocQPOpErr    = 2
	wcLocProtErr    = 4
	wcWRFlushErr    = 5
	wcRemInvReqErr  = 9
	wcRemAccessErr  = 10
	wcRemOpErr      = 11
	wcRetryExcErr   = 12
	wcRNRRetryExcEr = 13
	wcFlagGRH       = 1
	wcFlagImm       = 2
	wcFlagInv       = 8
	wrRDMAWrite     = 0
	wrRDMAWriteImm  = 1
	wrSend          = 2
	wrSendImm       = 3
	wrRDMARead      = 4
	wrSendInv       = 9
	sendFlagSignald = 2
)

func pmtu(q *host.QPCEntry) int {
	if q.MTU >= 1 && q.MTU <= 5 {
		return 128 << q.MTU
	}
	return 1024
}

// start takes a QP's initial PSNs from its context.
func (r *qpRun) start(q *host.QPCEntry) {
	if !r.started {
		r.started = true
		r.nextPSN = wire.PSN(q.SQPSN) & wire.PSNMask
		r.una = r.nextPSN
		r.sentMax = r.nextPSN.Sub(1)
		r.expPSN = wire.PSN(q.RQPSN) & wire.PSNMask
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
	n.caches[host.CQC].Update(uint64(cqn), words)
}
