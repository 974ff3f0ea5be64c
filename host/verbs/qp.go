package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
)

// QPCap sizes a queue pair's work queues.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int // at most MaxInlineData
}

// MaxInlineData is the most inline data (IBV_SEND_INLINE) a QP may ask
// for. Up to hostmem.MaxInline bytes travel in the WQE itself; more, and any
// on a UD QP (whose WQE holds the address vector there), are copied at
// post time into a bounce slot of the QP's own, one per send queue entry.
const MaxInlineData = 256

// QPInitAttr describes a queue pair to create.
type QPInitAttr struct {
	Type           QPType
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ // receive from this SRQ instead of a receive queue of its own
	Cap            QPCap
	// ReplayEntries is how many replay entries an RC QP reserves from the
	// NIC's replay buffer when it moves to RTS: the packets it may have
	// unacknowledged (0: datapath.DefaultReplayAllocation, sized to a
	// path's bandwidth-delay product). A softrnic extension.
	ReplayEntries int
}

// AH is an address handle: where the peer is on the network.
type AH struct {
	DestMAC wire.MAC
	DestGID netip.Addr // an IPv4 address means RoCEv2 over IPv4
	// TrafficClass is the GRH's traffic class (ibv_global_route's
	// traffic_class): the IP header's DSCP is its upper six bits; the ECN
	// bits are the NIC's (DeviceConfig.ECN).
	TrafficClass uint8
}

// QPAttr holds the attributes Modify sets, as ibv_qp_attr does.
type QPAttr struct {
	State, CurState QPState
	AccessFlags     Access
	PKeyIndex       int
	Port            int
	QKey            uint32
	AH              AH
	PathMTU         int // ibv_mtu enum: 1 (256) to 5 (4096)
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	RQPSN, SQPSN    uint32
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	DestQPN         uint32
	// SelectiveRepeat (with AttrSelectiveRepeat, at INIT->RTR on RC):
	// recover losses by selective repeat instead of go-back-N. The peer
	// must enable it too (perftest's exchange carries it for softrnic
	// perf --sr); a QP with it sends each WRITE packet as a WRITE_ONLY,
	// still standard RoCEv2.
	SelectiveRepeat bool
	// PeerRNRRetry (with AttrPeerRNRRetry, at RTR->RTS on RC) is the RNR
	// retry count the peer's QP has, where this side knows it: a
	// connection manager tells each side's QP its count (softrnic's CM
	// sets it from the count it sent). 7, retries without end, lets the
	// responder ask for a go-back-N gap again with an RNR NAK when a
	// repeated sequence NAK went unanswered: rxe's requester, once a NAK
	// has started a retry, ignores every later NAK until a positive ACK
	// at or past the PSN it went back to (rxe_comp.c), so a loss among
	// the packets it sends again would else wait for its local ACK
	// timeout (about 2 s on rdma_cm's QPs); an RNR NAK makes it send
	// again from that PSN after the RNR timer. Any other count (0:
	// unknown) leaves the repeated sequence NAK alone: an RNR NAK counts
	// against a finite count, and the last one fails the peer's QP.
	PeerRNRRetry uint8
	// IdleProbe (with AttrIdleProbe, at RTR->RTS on RC) has a go-back-N
	// QP's responder NAK the PSN it expects when its application waits
	// for a message (a receive is posted, or the peer has sent requests
	// before: WRITEs, READs or atomics in a ping-pong, with no receive)
	// and the peer has sent nothing
	// for 50 ms, then 100, 200 and 256 ms apart, eight times at most
	// until a request comes (reliability.IdleQuiet): a message whose only
	// packet was lost, or the ACK of it, has nothing behind it to show
	// the loss, and the peer (rxe, with the local ACK timeout rdma_cm
	// sets) would wait 2.1 s to send it again. A peer with nothing
	// outstanding takes the NAK as an acknowledgement of all it sent.
	// softrnic's CM sets it on the QPs it connects.
	IdleProbe bool
}

// QP is a queue pair.
type QP struct {
	// What PostSend and a CQ's poll read comes first, in the QP's first
	// two cache lines: with thousands of QPs, a QP's state is cold when
	// its turn comes, and each line it touches is a memory round trip.
	pd         *PD
	Num        uint32
	Type       QPType
	state      QPState
	destroyed  bool // under mu
	mu         sync.Mutex
	sqSize     uint32
	sqProducer uint32
	maxSendSGE int
	maxInline  int
	sq         []byte        // ring in host memory
	sqDone     atomic.Uint32 // send WQEs the NIC has finished with (from completions)
	sqPosted   atomic.Uint32 // sqProducer, for a poll that asks whether the send queue is empty
	// Completions written before the last reset, in the send and the
	// receive CQ, belong to work requests a reset discarded: Poll drops
	// them, as a libibverbs provider cleans the CQs of a reset QP.
	sendStale, recvStale atomic.Uint64

	ctx           hostmem.QPCEntry
	rq            []byte // ring in host memory
	rqSize        uint32
	rqProducer    uint32
	maxRecvSGE    int
	replayEntries int
	srq           *SRQ
	bounce        *MR          // inline data that is not in the WQE: a slot of maxInline bytes per send queue entry
	mcast         []netip.Addr // the multicast groups it is attached to (under mu)
	rqDone        atomic.Uint32
	sendCQ        *CQ
	recvCQ        *CQ
}

// stale reports whether the completion at position pos of a CQ was
// written before the QP's last reset.
func (qp *QP) stale(recv bool, pos uint64) bool {
	if recv {
		return pos < qp.recvStale.Load()
	}
	return pos < qp.sendStale.Load()
}

// consumed records, from a completion, that the NIC is done with the work
// queue up to and including index.
func (qp *QP) consumed(recv bool, index uint32) {
	if recv && qp.srq != nil {
		advance(&qp.srq.done, index+1)
		return
	}
	if recv {
		advance(&qp.rqDone, index+1)
	} else {
		advance(&qp.sqDone, index+1)
	}
}

// advance moves a consumed count forward (counts wrap at 2^32).
func advance(c *atomic.Uint32, to uint32) {
	for {
		old := c.Load()
		if int32(to-old) <= 0 || c.CompareAndSwap(old, to) {
			return
		}
	}
}

func ringSize(n int) uint32 {
	s := uint32(1)
	for s < uint32(n) {
		s <<= 1
	}
	return s
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	d := pd.dev
	if attr.Type != QPTRC && attr.Type != QPTUC && attr.Type != QPTUD {
		return nil, fmt.Errorf("%w: queue pair type %v", ErrInvalid, attr.Type)
	}
	if err := checkCaps(attr); err != nil {
		return nil, err
	}
	d.mu.Lock()
	num := d.nextQP
	switch {
	case num < uint32(datapath.FirstQPN+d.cfg.MaxQPs):
		d.nextQP++
	case len(d.freeQPs) > 0: // every number used once: the longest free
		num, d.freeQPs = d.freeQPs[0], d.freeQPs[1:]
	}
	d.mu.Unlock()
	if num < datapath.FirstQPN || num >= uint32(datapath.FirstQPN+d.cfg.MaxQPs) { // 0 and 1 are QP0 and QP1, never handed out
		return nil, fmt.Errorf("%w: QP table full", ErrNoResources)
	}
	qp, err := pd.createQP(attr, num)
	if err != nil { // the number goes back
		d.mu.Lock()
		d.freeQPs = append(d.freeQPs, num)
		d.mu.Unlock()
	}
	return qp, err
}

// GSIQKey is the Q_Key of QP1, the general services interface.
const GSIQKey = 0x80010000

// CreateGSI creates QP1, the general services interface: a UD QP that
// receives the datagrams sent to QP 1 (management datagrams such as the
// connection manager's) and sends with source QP 1. A device has one;
// take it to RTS with ReadyUD(qp, GSIQKey).
func (pd *PD) CreateGSI(attr QPInitAttr) (*QP, error) {
	d := pd.dev
	if attr.Type != QPTUD {
		return nil, fmt.Errorf("%w: QP1 is a UD QP, not %v", ErrInvalid, attr.Type)
	}
	if attr.SRQ != nil {
		return nil, fmt.Errorf("%w: QP1 has a receive queue of its own", ErrInvalid)
	}
	if err := checkCaps(attr); err != nil {
		return nil, err
	}
	d.mu.Lock()
	taken := d.gsi
	d.gsi = true
	d.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("%w: the device's QP1 exists", ErrInvalid)
	}
	return pd.createQP(attr, 1)
}

// checkCaps checks a new QP's CQs and queue sizes.
func checkCaps(attr QPInitAttr) error {
	if attr.SendCQ == nil || attr.RecvCQ == nil || attr.Cap.MaxSendSGE > hostmem.MaxSendSGE || attr.Cap.MaxRecvSGE > hostmem.MaxRecvSGE || attr.Cap.MaxInlineData > MaxInlineData || attr.Cap.MaxInlineData < 0 {
		return fmt.Errorf("%w: CQs and at most %d send and %d receive SGEs and %d bytes inline", ErrInvalid, hostmem.MaxSendSGE, hostmem.MaxRecvSGE, MaxInlineData)
	}
	return nil
}

// inlineFor is the inline data a new QP takes: what it asked for, and on
// an RC or UC QP at least its send SGEs' worth (16 bytes an SGE, up to
// what the WQE itself holds), as rxe gives (its send WQE's room for the
// SGEs, which inline data takes instead): a program that asks for none
// and sends a short message inline (rdma_xclient) works there. A UD QP
// takes what it asked: its inline data needs a bounce slot per entry.
func inlineFor(attr QPInitAttr) int {
	if attr.Type == QPTUD {
		return attr.Cap.MaxInlineData
	}
	return max(attr.Cap.MaxInlineData, min(inlinePerSGE*max(attr.Cap.MaxSendSGE, 1), hostmem.MaxInline))
}

// inlinePerSGE is the inline data an SGE's room holds (rxe's struct
// ib_sge).
const inlinePerSGE = 16

// sendsDrain is how long Destroy waits, at most, for a UD or UC QP's
// posted sends to leave.
const sendsDrain = 100 * time.Millisecond

// AttachMulticast attaches a UD QP to the multicast group at address
// group (an IPv4 multicast address, or its IPv4-mapped GID), as
// ibv_attach_mcast does: the QP takes a copy of each datagram sent to the
// group with the multicast QPN (0xFFFFFF) and its Q_Key. The NIC joins
// the group on its port (a port that cannot take multicast, the udp
// port, refuses it). A datagram to the group is sent as any other: an AH
// whose GID is the group's address and whose MAC is the group's
// (MulticastMAC), to DestQPN 0xFFFFFF.
func (qp *QP) AttachMulticast(group netip.Addr) error {
	group = group.Unmap()
	if qp.Type != QPTUD {
		return fmt.Errorf("%w: only a UD QP takes multicast", ErrInvalid)
	}
	if !group.Is4() || !group.IsMulticast() {
		return fmt.Errorf("%w: %s is not an IPv4 multicast address", ErrInvalid, group)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return fmt.Errorf("%w: QP %d is destroyed", ErrInvalid, qp.Num)
	}
	if slices.Contains(qp.mcast, group) {
		return nil
	}
	if err := qp.pd.dev.nic.AttachMulticast(group, qp.Num); err != nil {
		if errors.Is(err, datapath.ErrMulticastFull) {
			return fmt.Errorf("%w: %v", ErrNoResources, err)
		}
		return err
	}
	qp.mcast = append(qp.mcast, group)
	return nil
}

// DetachMulticast detaches the QP from the group (ibv_detach_mcast).
func (qp *QP) DetachMulticast(group netip.Addr) error {
	group = group.Unmap()
	qp.mu.Lock()
	defer qp.mu.Unlock()
	i := slices.Index(qp.mcast, group)
	if i < 0 {
		return fmt.Errorf("%w: QP %d is not attached to %s", ErrInvalid, qp.Num, group)
	}
	qp.mcast = slices.Delete(qp.mcast, i, i+1)
	return qp.pd.dev.nic.DetachMulticast(group, qp.Num)
}

// MulticastMAC is the Ethernet address a datagram to an IPv4 multicast
// group goes to (RFC 1112: 01:00:5e and the group's low 23 bits).
func MulticastMAC(group netip.Addr) [6]byte {
	a := group.Unmap().As4()
	return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
}

// MaxInline is the inline data the QP takes per send (IBV_SEND_INLINE):
// at least what it asked for (inlineFor), as ibv_create_qp reports it in
// the capabilities.
func (qp *QP) MaxInline() int { return qp.maxInline }

func (pd *PD) createQP(attr QPInitAttr, num uint32) (*QP, error) {
	d := pd.dev
	attr.SendCQ.users.Add(1)
	attr.RecvCQ.users.Add(1)
	qp := &QP{pd: pd, Num: num, Type: attr.Type, sqSize: ringSize(max(attr.Cap.MaxSendWR, 1)), rqSize: ringSize(max(attr.Cap.MaxRecvWR, 1)),
		maxSendSGE: max(attr.Cap.MaxSendSGE, 1), maxRecvSGE: max(attr.Cap.MaxRecvSGE, 1), maxInline: inlineFor(attr),
		sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, replayEntries: attr.ReplayEntries}
	sqBase := d.mem.Alloc(int(qp.sqSize) * hostmem.SendWQESize)
	rqBase := d.mem.Alloc(int(qp.rqSize) * hostmem.RecvWQESize)
	qp.sq, _ = d.mem.Slice(sqBase, int(qp.sqSize)*hostmem.SendWQESize)
	qp.rq, _ = d.mem.Slice(rqBase, int(qp.rqSize)*hostmem.RecvWQESize)
	defer func() { d.qps[num].Store(qp) }()
	qp.ctx = hostmem.QPCEntry{Valid: true, Type: attr.Type, State: QPSReset, PD: pd.num,
		SendCQ: attr.SendCQ.num, RecvCQ: attr.RecvCQ.num, SQSize: qp.sqSize, RQSize: qp.rqSize, SQBase: sqBase, RQBase: rqBase}
	if attr.Type == QPTUD {
		// A UD QP has no path MTU: its datagrams may be as large as the
		// port's active MTU (as rxe sends them).
		qp.ctx.MTU = uint8(d.ActiveMTU())
	}
	if qp.maxInline > hostmem.MaxInline || qp.maxInline > 0 && attr.Type == QPTUD {
		var err error
		if qp.bounce, err = pd.RegMR(make([]byte, int(qp.sqSize)*qp.maxInline), AccessLocalWrite); err != nil {
			attr.SendCQ.users.Add(-1)
			attr.RecvCQ.users.Add(-1)
			return nil, err
		}
	}
	if attr.SRQ != nil {
		if attr.SRQ.pd != pd {
			if qp.bounce != nil {
				qp.bounce.Dereg()
			}
			attr.SendCQ.users.Add(-1)
			attr.RecvCQ.users.Add(-1)
			return nil, fmt.Errorf("%w: the SRQ belongs to another protection domain", ErrInvalid)
		}
		qp.ctx.SRQ = attr.SRQ.num + 1
		qp.srq = attr.SRQ
		attr.SRQ.users.Add(1)
	}
	if err := qp.write(); err != nil {
		return nil, err
	}
	if num != 1 {
		d.qpsInUse.Add(1)
	}
	return qp, nil
}

// Destroy destroys the QP, as ibv_destroy_qp does, from any state: what
// is posted is discarded without completions, and the completions of its
// work still unread in its CQs are dropped; the NIC forgets it (a frame to
// its number counts as rcvd_unknown_qp) and releases its replay entries;
// its queues are freed, and its number goes back to the device, for a
// later QP once every number has been used. The QP must not be used
// after.
func (qp *QP) Destroy() error {
	d := qp.pd.dev
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return fmt.Errorf("%w: QP %d is destroyed", ErrInvalid, qp.Num)
	}
	if qp.Type != QPTRC && qp.state == QPSRTS {
		// An unreliable QP's posted sends leave first: its program may
		// have posted its last datagrams just before (it is told of no
		// loss, and gets no completion of unsignaled ones).
		deadline := time.Now().Add(sendsDrain)
		for d.nic.SendsLeft(qp.Num, qp.sqProducer) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, g := range qp.mcast { // its groups give it no more datagrams
		d.nic.DetachMulticast(g, qp.Num)
	}
	qp.mcast = nil
	sq, rq := qp.ctx.SQBase, qp.ctx.RQBase
	qp.ctx = hostmem.QPCEntry{}
	if err := qp.write(); err != nil { // the NIC takes nothing more for it
		return err
	}
	d.nic.ResetQP(qp.Num) // after it the NIC writes no completion of its work
	qp.destroyed, qp.state = true, QPSReset
	qp.sendCQ.forget(qp.Num)
	if qp.recvCQ != qp.sendCQ {
		qp.recvCQ.forget(qp.Num)
	}
	d.qps[qp.Num].Store(nil)
	d.mem.Unmap(sq)
	d.mem.Unmap(rq)
	if qp.bounce != nil {
		qp.bounce.Dereg()
	}
	qp.sendCQ.users.Add(-1)
	qp.recvCQ.users.Add(-1)
	if qp.srq != nil {
		qp.srq.users.Add(-1)
	}
	d.mu.Lock()
	if qp.Num == 1 {
		d.gsi = false
	} else {
		d.qpsInUse.Add(-1)
		d.freeQPs = append(d.freeQPs, qp.Num)
	}
	d.mu.Unlock()
	return nil
}

func (qp *QP) write() error {
	var b [128]byte
	qp.ctx.Encode(b[:])
	return qp.pd.dev.hostWrite(hostmem.QPC, qp.Num, b[:])
}

// State returns the QP's state: as the driver last set it, or ERR once
// the NIC has completed a work request in error.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != QPSReset && qp.state != QPSErr && qp.pd.dev.nic.QPErrored(qp.Num) {
		qp.state = QPSErr
	}
	return qp.state
}

// Modify changes the QP's state and attributes, following the libibverbs
// state machine and its required attribute masks.
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return fmt.Errorf("%w: QP %d is destroyed", ErrInvalid, qp.Num)
	}
	next := qp.state
	if mask&AttrState != 0 {
		next = attr.State
	}
	if err := CheckModify(qp.Type, qp.state, next, mask, attr.CurState); err != nil {
		return err
	}
	c := &qp.ctx
	if mask&AttrAccessFlags != 0 {
		c.Access = attr.AccessFlags
	}
	if mask&AttrQKey != 0 {
		c.QKey = attr.QKey
	}
	if mask&AttrAV != 0 {
		c.DestMAC = attr.AH.DestMAC
		c.DestGID = attr.AH.DestGID.As16()
		c.TClass = attr.AH.TrafficClass
	}
	if mask&AttrPathMTU != 0 {
		if attr.PathMTU < 1 || attr.PathMTU > 5 {
			return fmt.Errorf("%w: path MTU enum %d", ErrInvalidAttr, attr.PathMTU)
		}
		if active := qp.pd.dev.ActiveMTU(); attr.PathMTU > active {
			// libibverbs: EINVAL for a path MTU above the port's active MTU.
			return fmt.Errorf("%w: path MTU %d above the port's active MTU %d (netdev MTU %d)",
				ErrInvalidAttr, wire.MTUFromEnum(attr.PathMTU), wire.MTUFromEnum(active), qp.pd.dev.NetdevMTU())
		}
		c.MTU = uint8(attr.PathMTU)
	}
	if mask&AttrDestQPN != 0 {
		if qp.Type != QPTUD && attr.DestQPN&0xffffff < 2 {
			return fmt.Errorf("%w: destination QPN %d is a special QP (QP0 or QP1), which connects to no RC or UC QP", ErrInvalidAttr, attr.DestQPN&0xffffff)
		}
		c.DestQPN = attr.DestQPN & 0xffffff
		c.SrcPort = wire.SourcePort(qp.Num, c.DestQPN)
	}
	if mask&AttrRQPSN != 0 {
		c.RQPSN = attr.RQPSN & 0xffffff
	}
	if mask&AttrSQPSN != 0 {
		c.SQPSN = attr.SQPSN & 0xffffff
	}
	if mask&AttrTimeout != 0 {
		c.Timeout = attr.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		c.RetryCnt = attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		c.RNRRetry = attr.RNRRetry
	}
	if mask&AttrMinRNRTimer != 0 {
		c.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		c.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		c.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&AttrSelectiveRepeat != 0 {
		c.Flags &^= hostmem.QPFlagSelectiveRepeat
		if attr.SelectiveRepeat {
			c.Flags |= hostmem.QPFlagSelectiveRepeat
		}
	}
	if mask&AttrPeerRNRRetry != 0 {
		c.Flags &^= hostmem.QPFlagRNRRepair
		if attr.PeerRNRRetry == 7 {
			c.Flags |= hostmem.QPFlagRNRRepair
		}
	}
	if mask&AttrIdleProbe != 0 {
		c.Flags &^= hostmem.QPFlagIdleProbe
		if attr.IdleProbe {
			c.Flags |= hostmem.QPFlagIdleProbe
		}
	}
	if next == QPSRTS && qp.state != QPSRTS && qp.Type == QPTRC {
		if err := qp.pd.dev.nic.OpenQP(qp.Num, qp.replayEntries, c); err != nil {
			return fmt.Errorf("%w: %v", ErrNoResources, err)
		}
	}
	c.State = next
	if err := qp.write(); err != nil {
		return err
	}
	if next == QPSErr && qp.state != QPSErr && qp.state != QPSReset {
		qp.pd.dev.nic.FlushQP(qp.Num) // what is posted completes, flushed
	}
	if next == QPSReset {
		qp.pd.dev.nic.ResetQP(qp.Num) // after it the NIC writes no completion of the old work
		qp.sendStale.Store(qp.sendCQ.written.Load())
		qp.recvStale.Store(qp.recvCQ.written.Load())
		qp.sqProducer, qp.rqProducer = 0, 0
		qp.sqPosted.Store(0)
		qp.sqDone.Store(0)
		qp.rqDone.Store(0)
	}
	qp.state = next
	return nil
}

// SGE is a scatter/gather element in registered memory.
type SGE struct {
	Addr   uint64 // an address inside the MR (MR.Addr + offset)
	Length uint32
	LKey   uint32
}

// SendWR is a send work request.
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []SGE
	Imm        uint32 // immediate data, or the R_Key to invalidate
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // atomics: the compare value (CAS) or the addend (FADD)
	Swap       uint64 // CAS: the value to store on a match
	AH         *AH    // UD: where the datagram goes
	RemoteQPN  uint32 // UD
	RemoteQKey uint32 // UD
	// Inline, with SendInline, is the data to send, in place of the SGL's
	// (which then need not be registered): what a C program's
	// ibv_post_send hands over. Without it an inline request copies the
	// SGL's registered memory.
	Inline []byte
}

// RecvWR is a receive work request.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// PostSend posts send work requests; on error it returns the index of the
// first one it did not post.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != QPSRTS && qp.state != QPSErr && qp.state != QPSSQD {
		return 0, fmt.Errorf("%w: QP %d is %v, not RTS", ErrInvalid, qp.Num, qp.state)
	}
	for i, wr := range wrs {
		switch wr.Opcode {
		case WRRDMARead, WRSendWithInv:
			if qp.Type != QPTRC {
				return i, fmt.Errorf("%w: work request %d: opcode %d needs an RC QP", ErrInvalid, i, wr.Opcode)
			}
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
		case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
			if qp.Type != QPTRC {
				return i, fmt.Errorf("%w: work request %d: atomics need an RC QP", ErrInvalid, i)
			}
			if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 || wr.RemoteAddr%8 != 0 {
				return i, fmt.Errorf("%w: work request %d: an atomic takes one 8-byte SGE and an aligned remote address", ErrInvalid, i)
			}
		default:
			return i, fmt.Errorf("%w: work request %d: opcode %d not supported yet", ErrInvalid, i, wr.Opcode)
		}
		if qp.Type == QPTUD && (wr.Opcode != WRSend && wr.Opcode != WRSendWithImm || wr.AH == nil || len(wr.SGL) > 2) {
			return i, fmt.Errorf("%w: work request %d: UD sends SEND or SEND_WITH_IMM to an AH, from at most 2 SGEs", ErrInvalid, i)
		}
		if len(wr.SGL) > qp.maxSendSGE {
			return i, fmt.Errorf("%w: work request %d has %d SGEs, at most %d", ErrInvalid, i, len(wr.SGL), qp.maxSendSGE)
		}
		if qp.sqProducer-qp.sqDone.Load() >= qp.sqSize {
			qp.pd.dev.nic.Ring(datapath.Doorbell{QPN: qp.Num, Producer: qp.sqProducer})
			return i, fmt.Errorf("%w: send queue of QP %d holds %d work requests not yet completed", ErrQueueFull, qp.Num, qp.sqSize)
		}
		w := hostmem.SendWQE{WRID: wr.WRID, Opcode: wr.Opcode, Flags: wr.Flags, NumSGE: uint8(len(wr.SGL)),
			Imm: wr.Imm, RKey: wr.RKey, RemoteAddr: wr.RemoteAddr, Compare: wr.CompareAdd, SwapAdd: wr.Swap}
		if wr.Opcode == WRAtomicFetchAdd {
			w.Compare, w.SwapAdd = 0, wr.CompareAdd
		}
		if qp.Type == QPTUD {
			w.HasAV, w.DestMAC, w.DestGID, w.TClass = true, wr.AH.DestMAC, wr.AH.DestGID.As16(), wr.AH.TrafficClass
			w.DestQPN, w.QKey = wr.RemoteQPN, wr.RemoteQKey
		}
		if wr.Flags&SendInline != 0 {
			if err := qp.inline(&w, &wr); err != nil {
				if i > 0 {
					qp.pd.dev.nic.Ring(datapath.Doorbell{QPN: qp.Num, Producer: qp.sqProducer})
				}
				return i, fmt.Errorf("work request %d: %w", i, err)
			}
		}
		if wr.Flags&SendInline == 0 { // inline's copy put its own SGE, if any
			for j, s := range wr.SGL {
				w.SGE[j] = hostmem.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
			}
		}
		w.Encode(qp.sq[int(qp.sqProducer%qp.sqSize)*hostmem.SendWQESize:])
		qp.sqProducer++
	}
	qp.sqPosted.Store(qp.sqProducer)
	qp.pd.dev.nic.Ring(datapath.Doorbell{QPN: qp.Num, Producer: qp.sqProducer})
	return len(wrs), nil
}

// inline copies a work request's data at post time (IBV_SEND_INLINE):
// the buffers may be reused as soon as PostSend returns. Up to
// hostmem.MaxInline bytes go into the WQE; more, or any on a UD QP, into the
// QP's bounce slot for this send queue entry, sent from there as one SGE.
func (qp *QP) inline(w *hostmem.SendWQE, wr *SendWR) error {
	total := len(wr.Inline)
	if wr.Inline == nil {
		for _, s := range wr.SGL {
			total += int(s.Length)
		}
	}
	if total > qp.maxInline {
		return fmt.Errorf("%w: %d bytes inline, at most %d", ErrInvalid, total, qp.maxInline)
	}
	var dst []byte
	bounce := total > hostmem.MaxInline || qp.Type == QPTUD
	if bounce {
		slot := int(qp.sqProducer%qp.sqSize) * qp.maxInline
		dst = qp.bounce.Buf[slot : slot+total]
		w.Flags &^= SendInline
		w.NumSGE, w.InlineLen = 1, 0
		w.SGE = [hostmem.MaxSendSGE]hostmem.SGE{{Addr: qp.bounce.Addr + uint64(slot), Length: uint32(total), LKey: qp.bounce.LKey}}
		if total == 0 {
			w.NumSGE, w.SGE[0] = 0, hostmem.SGE{}
		}
	} else {
		w.InlineLen, w.NumSGE = uint32(total), 0
		w.SGE = [hostmem.MaxSendSGE]hostmem.SGE{}
		dst = w.Inline[:total]
	}
	if wr.Inline != nil {
		copy(dst, wr.Inline)
		return nil
	}
	off := 0
	for _, s := range wr.SGL {
		b, err := qp.pd.dev.mem.Slice(s.Addr, int(s.Length))
		if err != nil {
			return fmt.Errorf("%w: inline data outside registered memory", ErrInvalid)
		}
		off += copy(dst[off:], b)
	}
	return nil
}

// PostRecv posts receive work requests; on error it returns the index of
// the first one it did not post.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == QPSReset {
		return 0, fmt.Errorf("%w: QP %d is in RESET", ErrInvalid, qp.Num)
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("%w: QP %d receives from an SRQ: post there", ErrInvalid, qp.Num)
	}
	n, err := postRecv(qp.rq, qp.rqSize, &qp.rqProducer, &qp.rqDone, qp.maxRecvSGE, wrs)
	qp.pd.dev.nic.Ring(datapath.Doorbell{QPN: qp.Num, Producer: qp.rqProducer, Recv: true})
	return n, err
}

// postRecv writes receive WQEs into a ring.
func postRecv(ring []byte, size uint32, producer *uint32, done *atomic.Uint32, maxSGE int, wrs []RecvWR) (int, error) {
	for i, wr := range wrs {
		if len(wr.SGL) > maxSGE {
			return i, fmt.Errorf("%w: receive request %d has %d SGEs, at most %d", ErrInvalid, i, len(wr.SGL), maxSGE)
		}
		if *producer-done.Load() >= size {
			return i, fmt.Errorf("%w: receive queue holds %d requests not yet completed", ErrQueueFull, size)
		}
		w := hostmem.RecvWQE{WRID: wr.WRID, NumSGE: uint8(len(wr.SGL))}
		for j, s := range wr.SGL {
			w.SGE[j] = hostmem.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
		}
		w.Encode(ring[int(*producer%size)*hostmem.RecvWQESize:])
		*producer++
	}
	return len(wrs), nil
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd        *PD
	num       uint32
	base      uint64
	ring      []byte
	size      uint32
	maxSGE    int
	mu        sync.Mutex
	producer  uint32
	done      atomic.Uint32
	users     atomic.Int32 // QPs that receive from it
	destroyed bool         // under mu
}

// CreateSRQ creates a shared receive queue of at least maxWR entries.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	d := pd.dev
	if maxSGE > hostmem.MaxRecvSGE {
		return nil, fmt.Errorf("%w: at most %d receive SGEs", ErrInvalid, hostmem.MaxRecvSGE)
	}
	count := uint32(d.nic.Table(hostmem.SRQC).Count)
	d.mu.Lock()
	num := d.nextSRQ
	switch {
	case num < count:
		d.nextSRQ++
	case len(d.freeSRQs) > 0: // every number used once: the longest free
		num, d.freeSRQs = d.freeSRQs[0], d.freeSRQs[1:]
	}
	d.mu.Unlock()
	if num >= count {
		return nil, fmt.Errorf("%w: SRQ table full", ErrNoResources)
	}
	s := &SRQ{pd: pd, num: num, size: ringSize(max(maxWR, 1)), maxSGE: max(maxSGE, 1)}
	s.base = d.mem.Alloc(int(s.size) * hostmem.RecvWQESize)
	s.ring, _ = d.mem.Slice(s.base, int(s.size)*hostmem.RecvWQESize)
	e := hostmem.RingEntry{Valid: true, PD: pd.num, Size: s.size, Base: s.base}
	var b [64]byte
	e.Encode(b[:])
	if err := d.hostWrite(hostmem.SRQC, num, b[:]); err != nil {
		return nil, err
	}
	d.srqsInUse.Add(1)
	return s, nil
}

// Destroy destroys the SRQ, as ibv_destroy_srq does: refused (ErrBusy)
// while a QP receives from it. What is posted to it goes without
// completions, and its number goes back to the device for a later SRQ.
// The SRQ must not be used after.
func (s *SRQ) Destroy() error {
	d := s.pd.dev
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("%w: SRQ %d is destroyed", ErrInvalid, s.num)
	}
	if n := s.users.Load(); n > 0 {
		return fmt.Errorf("%w: SRQ %d is the receive queue of %d QPs", ErrBusy, s.num, n)
	}
	var b [64]byte
	(&hostmem.RingEntry{}).Encode(b[:])
	if err := d.hostWrite(hostmem.SRQC, s.num, b[:]); err != nil {
		return err
	}
	d.nic.ResetSRQ(s.num)
	d.mem.Unmap(s.base)
	s.destroyed = true
	d.srqsInUse.Add(-1)
	d.mu.Lock()
	d.freeSRQs = append(d.freeSRQs, s.num)
	d.mu.Unlock()
	return nil
}

// Num is the SRQ's number: its index in the NIC's SRQ context table.
func (s *SRQ) Num() uint32 { return s.num }

// PostRecv posts receive work requests to the SRQ.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return 0, fmt.Errorf("%w: SRQ %d is destroyed", ErrInvalid, s.num)
	}
	n, err := postRecv(s.ring, s.size, &s.producer, &s.done, s.maxSGE, wrs)
	s.pd.dev.nic.Ring(datapath.Doorbell{QPN: s.num, Producer: s.producer, SRQ: true})
	return n, err
}

// HasSRQ reports whether the QP receives from a shared receive queue.
func (qp *QP) HasSRQ() bool { return qp.srq != nil }
