package datapath

import (
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// qpRun is the NIC's running state of one QP.
type qpRun struct {
	started bool // PSNs taken from the context
	errored bool

	// requester
	sqProducer, sqConsumer uint32
	nextPSN                wire.PSN
	inflight               [64]inflight // sent, not yet completed, in order
	ifHead, ifN            int

	// responder
	rqProducer, rqConsumer uint32
	expPSN                 wire.PSN
	msn                    uint32
	recvActive             bool
	recv                   host.RecvWQE
	recvOff                uint32
	writeVA                uint64
	writeKey               uint32
	writeLeft              uint32
}

// inflight is a sent work request waiting for its ACK or response.
type inflight struct {
	wqe       host.SendWQE
	firstPSN  wire.PSN
	lastPSN   wire.PSN
	length    uint32
	signaled  bool
	readDone  uint32 // bytes of a READ response placed
	completed bool
}

// Work completion opcodes and statuses as verbs numbers them.
const (
	wcSend          = 0
	wcRDMAWrite     = 1
	wcRDMARead      = 2
	wcRecv          = 128
	wcRecvRDMAImm   = 129
	wcSuccess       = 0
	wcLocProtErr    = 4
	wcWRFlushErr    = 5
	wcRemInvReqErr  = 9
	wcRemAccessErr  = 10
	wcRemOpErr      = 11
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
		r.expPSN = wire.PSN(q.RQPSN) & wire.PSNMask
	}
}

// complete writes a CQE into a completion queue.
func (n *NIC) complete(cqn uint32, c *host.CQE) {
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
