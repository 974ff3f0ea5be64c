package datapath

// The receive path's handler stage: the packets of a QP with an execution
// context (package hpu) go to the HPU scheduler instead of being placed,
// and the responder acknowledges such a message only after its handlers,
// and the commands they issued, have finished.

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/hpu"
)

// Match selects the messages of a QP that go to its execution context;
// the others are placed as on any QP. The zero Match takes every SEND and
// WRITE.
type Match struct {
	// Ops are the kinds of message taken (MatchSend, MatchWrite; 0: both).
	Ops MatchOps
	// Tag, when not empty, must equal the first bytes of the message's
	// first packet's payload. The tag's bytes stay in the payload: the
	// handlers see the message whole, tag first.
	Tag []byte
	// WithImm takes only messages whose immediate data is Imm. The
	// decision is made at a message's first packet, so it holds for
	// single-packet messages (SEND_ONLY_WITH_IMMEDIATE,
	// RDMA_WRITE_ONLY_WITH_IMMEDIATE), the ones carrying the immediate
	// there.
	WithImm bool
	Imm     uint32
}

// MatchOps are kinds of message (a bit set).
type MatchOps uint8

const (
	MatchSend  MatchOps = 1 << iota // SEND, with or without immediate or invalidate
	MatchWrite                      // RDMA WRITE, with or without immediate
)

// matches reports whether the message whose first packet is p goes to the
// context.
func (m *Match) matches(p *wire.Packet) bool {
	ops := m.Ops
	if ops == 0 {
		ops = MatchSend | MatchWrite
	}
	switch {
	case p.Info.Flags&wire.OpSend != 0 && ops&MatchSend == 0,
		p.Info.Flags&wire.OpWrite != 0 && ops&MatchWrite == 0:
		return false
	}
	if len(m.Tag) > 0 && !bytes.HasPrefix(p.Payload(), m.Tag) {
		return false
	}
	if m.WithImm {
		h := p.ImmDt()
		return h != nil && h.Imm() == m.Imm
	}
	return true
}

// takesSends reports whether the match may take SENDs: the QP's
// receive queue then does not bound what the peer may send, and its ACKs
// carry no credit count.
func (m *Match) takesSends() bool { return m.Ops == 0 || m.Ops&MatchSend != 0 }

// hpuBinding is an execution context attached to a QP.
type hpuBinding struct {
	in    *hpu.Installed
	match Match
	tag   [64]byte // the match's tag, copied
}

type atomicBinding = atomic.Pointer[hpuBinding]

// hpuPendingMax is how many messages of one QP may wait for their
// handlers at once; a QP with that many takes no new message (it is not
// acknowledged, and the peer sends it again).
const hpuPendingMax = 64

// hpuPending is a message handed to handlers, whose last packet has come,
// waiting for its handlers to finish.
type hpuPending struct {
	msn         uint32
	first, last wire.PSN
	done        bool
	nak         uint8 // a handler's fault: the NAK code that fails the message (0: none)
}

// hpuRecv is a QP's responder state for messages going to handlers.
type hpuRecv struct {
	// What every packet reads first, in one cache line: on, left,
	// write and n are read for QPs without handlers too (their commands
	// wait in qpSend, where the requester reads them).
	on      bool // the message arriving goes to the QP's context
	write   bool
	ackDue  bool   // on the engine's list of QPs to acknowledge after this batch of events
	left    uint32 // a WRITE's bytes still to come
	off     uint32
	first   wire.PSN
	qpn     uint32
	head, n int
	index   int
	b       *hpuBinding // that context
	msg     hpu.Message
	pend    [hpuPendingMax]hpuPending
}

// hpuEvent is what HPU goroutines tell an engine: a message's handlers
// finished, or a command to send. (They place data themselves, through
// their clusters' memory paths: mempath.go.)
type hpuEvent struct {
	kind uint8
	qpn  uint32
	msn  uint32
	err  error
	cmd  int32
}

const (
	evDone uint8 = iota
	evCommand
)

// hpuCmd is a packet a handler sends (Task.Send, Task.Put): a NIC-owned
// buffer the requester sends from, and keeps until the packet is
// acknowledged.
type hpuCmd struct {
	qpn    uint32
	opcode ibv.WROpcode
	va     uint64
	rkey   uint32
	buf    []byte
	n      int
	next   int32 // slot+1 of the next command of the same QP, or 0
}

// hpuCommands is the number of handler command buffers of a NIC.
const hpuCommands = 256

// Errors of the handler stage.
var (
	ErrNoCommandSlot = errors.New("datapath: every handler command buffer is in use")
	ErrCommandSize   = errors.New("datapath: a handler's packet is longer than a command buffer")
	errHPUClosed     = errors.New("datapath: NIC closed")
)

// hpuState is the NIC's handler stage.
type hpuState struct {
	engine   *hpu.Engine
	bind     []atomicBinding // by QPN
	cmds     []hpuCmd
	cmdFree  chan int32
	cmdBytes int
	mu       sync.Mutex
	contexts map[*hpu.Installed]int // attached on this NIC: the QPs bound to each
}

// HPU returns the NIC's HPU engine (nil until a context is attached).
func (n *NIC) HPU() *hpu.Engine {
	if h := n.hpu.Load(); h != nil {
		return h.engine
	}
	return nil
}

// hpuStage returns the handler stage, starting it at first use with the
// sizes of NICConfig.HPU.
func (n *NIC) hpuStage() *hpuState {
	n.hpuMu.Lock()
	defer n.hpuMu.Unlock()
	if h := n.hpu.Load(); h != nil {
		return h
	}
	cfg := n.cfg.HPU
	e := hpu.New(cfg)
	cfg = e.Config()
	h := &hpuState{engine: e, bind: make([]atomicBinding, len(n.qps)), cmds: make([]hpuCmd, hpuCommands),
		cmdFree: make(chan int32, hpuCommands), cmdBytes: cfg.SlotSize, contexts: map[*hpu.Installed]int{}}
	backing := make([]byte, hpuCommands*cfg.SlotSize)
	for i := range h.cmds {
		h.cmds[i].buf = backing[i*cfg.SlotSize : (i+1)*cfg.SlotSize : (i+1)*cfg.SlotSize]
		h.cmdFree <- int32(i)
	}
	n.hpu.Store(h)
	return h
}

// AttachHPU installs an execution context on QP qpn: from now on the
// messages of the QP that m selects go to the context's handlers instead
// of being placed. The NIC fills what the context leaves empty: its
// network operations (Net: a SEND back on the message's QP, an RDMA WRITE
// to its peer) and its default processing (Default: a WRITE's data lands
// where its RETH says, as without a handler; a SEND's in the context's
// host region at its offset in the message). Context.Done is called for
// every message, on an HPU goroutine or, for a short context, on the
// engine that received it (helpHPU), before the NIC acknowledges it.
func (n *NIC) AttachHPU(qpn uint32, c hpu.Context, m Match) (*hpu.Installed, error) {
	if qpn < FirstQPN || qpn >= uint32(len(n.qps)) {
		return nil, fmt.Errorf("datapath: QP %d does not exist", qpn)
	}
	if len(m.Tag) > 64 {
		return nil, fmt.Errorf("datapath: a match tag of %d bytes, at most 64", len(m.Tag))
	}
	h := n.hpuStage()
	if c.Net == nil {
		c.Net = nicNet{n}
	}
	if c.Default == nil {
		c.Default = n.hpuDefault(&c)
	}
	user := c.Done
	c.Done = func(msg *hpu.Message, err error) {
		n.cfg.DMA.Quiesce() // what the handlers wrote is in host memory before anyone hears of it
		if user != nil {
			user(msg, err)
		}
		n.hpuEvent(msg.QPN, hpuEvent{kind: evDone, qpn: msg.QPN, msn: msg.MSN, err: err})
	}
	in, err := h.engine.Install(c)
	if err != nil {
		return nil, err
	}
	h.rebind(qpn, in, m)
	return in, nil
}

// rebind binds QP qpn to in (nil: to none), and forgets a context no QP
// is bound to any more.
func (h *hpuState) rebind(qpn uint32, in *hpu.Installed, m Match) {
	var b *hpuBinding
	if in != nil {
		b = &hpuBinding{in: in, match: m}
		b.match.Tag = b.tag[:copy(b.tag[:], m.Tag)]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if in != nil {
		h.contexts[in]++
	}
	if old := h.bind[qpn].Swap(b); old != nil {
		if h.contexts[old.in]--; h.contexts[old.in] <= 0 {
			delete(h.contexts, old.in)
		}
	}
}

// ShareHPU attaches a context already installed (by AttachHPU on another
// QP of this NIC) to QP qpn as well: the QPs' messages share its handler
// memory, as the flows of one sPIN execution context do (an aggregation
// over several senders, say).
func (n *NIC) ShareHPU(qpn uint32, in *hpu.Installed, m Match) error {
	if qpn < FirstQPN || qpn >= uint32(len(n.qps)) {
		return fmt.Errorf("datapath: QP %d does not exist", qpn)
	}
	if len(m.Tag) > 64 {
		return fmt.Errorf("datapath: a match tag of %d bytes, at most 64", len(m.Tag))
	}
	h := n.hpu.Load()
	if h == nil || in == nil || !h.bound(in) {
		return errors.New("datapath: the context is not attached to a QP of this NIC")
	}
	h.rebind(qpn, in, m)
	return nil
}

// bound reports whether in is attached to a QP of this NIC.
func (h *hpuState) bound(in *hpu.Installed) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.contexts[in] > 0
}

// DetachHPU removes QP qpn's execution context: messages that start from
// now on are placed as on any QP (those under way finish with it).
func (n *NIC) DetachHPU(qpn uint32) {
	if h := n.hpu.Load(); h != nil && qpn < uint32(len(h.bind)) {
		h.rebind(qpn, nil, Match{})
	}
}

// binding returns QP qpn's execution context, or nil.
func (n *NIC) binding(qpn uint32) *hpuBinding {
	h := n.hpu.Load()
	if h == nil || qpn >= uint32(len(h.bind)) {
		return nil
	}
	return h.bind[qpn].Load()
}

// hpuEvent hands an event to the engine owning qpn and wakes it; it gives
// up when the NIC closes.
func (n *NIC) hpuEvent(qpn uint32, ev hpuEvent) bool {
	e := n.owner(qpn)
	select {
	case e.hpuEv <- ev:
		e.wake()
		return true
	case <-n.stop:
		return false
	}
}

// hpuDefault is a context's default processing: a WRITE's data lands at
// its RETH's address (placed by the QP's engine, with the key the
// message's first packet was checked with), a SEND's in the host region.
func (n *NIC) hpuDefault(c *hpu.Context) hpu.Default {
	region := c.Host
	return func(msg *hpu.Message, pkt *hpu.Packet) error {
		if pkt.Opcode&0x1f >= uint8(wire.RCRDMAWriteFirst) && pkt.Opcode&0x1f <= uint8(wire.RCRDMAWriteOnlyWithImmediate) {
			return n.withPath(func(m *memPath) error {
				return m.place(msg.QPN, msg.RKey, msg.VA+uint64(pkt.Offset), pkt.Payload)
			})
		}
		if region == nil {
			return errors.New("datapath: a SEND proceeded with no host region for its data")
		}
		if uint64(pkt.Offset)+uint64(len(pkt.Payload)) > region.Len() {
			return hpu.ErrOutsideRegion
		}
		return region.WriteAt(pkt.Payload, uint64(pkt.Offset))
	}
}

// nicNet are the network operations of a context on a live NIC: each
// packet is queued as a command on the message's QP, sent by its
// requester like a work request (and, on RC, kept until acknowledged).
type nicNet struct{ n *NIC }

func (t nicNet) Send(msg *hpu.Message, payload []byte) error {
	return t.n.hpuCommand(msg.QPN, ibv.WRSend, 0, 0, payload)
}

func (t nicNet) Put(msg *hpu.Message, remoteVA uint64, rkey uint32, payload []byte) error {
	return t.n.hpuCommand(msg.QPN, ibv.WRRDMAWrite, remoteVA, rkey, payload)
}

func (n *NIC) hpuCommand(qpn uint32, op ibv.WROpcode, va uint64, rkey uint32, payload []byte) error {
	h := n.hpu.Load()
	if len(payload) > h.cmdBytes {
		return ErrCommandSize
	}
	var s int32
	select {
	case s = <-h.cmdFree:
	default:
		n.counters.HPUCommandsRefused.Add(1)
		return ErrNoCommandSlot
	}
	c := &h.cmds[s]
	c.qpn, c.opcode, c.va, c.rkey, c.next = qpn, op, va, rkey, 0
	c.n = copy(c.buf, payload)
	if !n.hpuEvent(qpn, hpuEvent{kind: evCommand, qpn: qpn, cmd: s}) {
		h.cmdFree <- s
		return errHPUClosed
	}
	return nil
}

// releaseCmd gives a command buffer back (slot+1).
func (n *NIC) releaseCmd(c int32) {
	h := n.hpu.Load()
	h.cmdFree <- c - 1
}

// hpuEventsDue serves the events HPU goroutines sent so far.
func (e *engine) hpuEventsDue() bool {
	for served := false; ; served = true {
		select {
		case ev := <-e.hpuEv:
			// Each event is a unit of work: its QP's context (and a
			// placement's memory) resolved without waiting; one that
			// misses waits, held in order behind its QP's others.
			e.begin()
			if e.hpuHeldQP[ev.qpn] > 0 || e.hpuMiss(&ev) {
				e.holdHPU(ev)
				continue
			}
			e.hpuEvent(&ev)
		default:
			if len(e.hpuAcks) > 0 {
				e.hpuAcknowledge()
			}
			return served
		}
	}
}

// hpuEvent handles an event from the HPUs whose contexts are resolved.
func (e *engine) hpuEvent(ev *hpuEvent) {
	switch ev.kind {
	case evDone:
		e.hpuDone(ev.qpn, ev.msn, ev.err)
	case evCommand:
		e.hpuQueueCmd(ev.qpn, ev.cmd)
	}
}

// hpuHeldMax is how many events from the HPUs can wait for their
// contexts at once; beyond that an event waits for them (ctx_waits).
const hpuHeldMax = 256

// hpuMiss looks up, without waiting, the context an event needs: its
// QP's. On a miss it records the ticket (hpuWait) and reports true.
func (e *engine) hpuMiss(ev *hpuEvent) bool {
	return e.probe(hostmem.QPC, uint64(ev.qpn), hpuWait)
}

// holdHPU keeps an event until its contexts come. With the queue full,
// the held events and then this one are handled now, in order, waiting
// for their contexts (counted).
func (e *engine) holdHPU(ev hpuEvent) {
	if e.hpuHeldN == hpuHeldMax {
		e.counters.CtxWaits.Add(1)
		e.flushHPU(true)
		e.begin()
		e.hpuEvent(&ev)
		return
	}
	e.hpuHeld[(e.hpuHeldHead+e.hpuHeldN)%hpuHeldMax] = ev
	e.hpuHeldN++
	e.hpuHeldQP[ev.qpn]++
}

// flushHPU handles the held events, in order, whose contexts have come,
// stopping at the first that misses again (a new ticket); with wait,
// every one, waiting for the contexts.
func (e *engine) flushHPU(wait bool) {
	for e.hpuHeldN > 0 {
		ev := e.hpuHeld[e.hpuHeldHead]
		e.begin()
		if !wait && e.hpuMiss(&ev) {
			break
		}
		e.hpuHeld[e.hpuHeldHead] = hpuEvent{}
		e.hpuHeldHead = (e.hpuHeldHead + 1) % hpuHeldMax
		e.hpuHeldN--
		e.hpuHeldQP[ev.qpn]--
		e.hpuEvent(&ev)
	}
	if len(e.hpuAcks) > 0 {
		e.hpuAcknowledge()
	}
}

// hpuQueueCmd puts a handler's packet on its QP's list of commands and
// lets the requester send it.
func (e *engine) hpuQueueCmd(qpn uint32, s int32) {
	r := &e.qps[qpn]
	var q hostmem.QPCEntry
	if !e.qpc(qpn, &q) || q.State != ibv.QPSRTS || r.errored || q.Type == ibv.QPTUD {
		e.counters.HPUCommandsRefused.Add(1)
		e.nic.releaseCmd(s + 1)
		return
	}
	h := e.nic.hpu.Load()
	if r.cmdTail != 0 {
		h.cmds[r.cmdTail-1].next = s + 1
	} else {
		r.cmdHead = s + 1
	}
	r.cmdTail = s + 1
	e.counters.HPUCommands.Add(1)
	e.request(qpn)
}

// takeCmd moves the QP's next handler command into the in-flight list.
func (e *engine) takeCmd(r *qpRun, mtu int) bool {
	if r.cmdHead == 0 {
		return false
	}
	h := e.nic.hpu.Load()
	c := &h.cmds[r.cmdHead-1]
	in := inflight{cmd: r.cmdHead, length: uint32(c.n)}
	in.wqe = hostmem.SendWQE{Opcode: c.opcode, RemoteAddr: c.va, RKey: c.rkey}
	if r.cmdHead = c.next; r.cmdHead == 0 {
		r.cmdTail = 0
	}
	in.packets = max(1, (c.n+mtu-1)/mtu)
	e.track(r, in)
	return true
}

// cmdPayload is a handler command's data.
func (e *engine) cmdPayload(c int32) []byte {
	h := e.nic.hpu.Load()
	cmd := &h.cmds[c-1]
	return cmd.buf[:cmd.n]
}

// dropCmds gives back the commands a failed QP had not sent.
func (e *engine) dropCmds(r *qpRun) {
	for r.cmdHead != 0 {
		h := e.nic.hpu.Load()
		c := r.cmdHead
		r.cmdHead = h.cmds[c-1].next
		e.nic.releaseCmd(c)
	}
	r.cmdTail = 0
}

// toHandlers hands a SEND or WRITE packet of a QP with an execution
// context to the HPU scheduler, if its message is one the context takes.
// handled says whether it did (if not, the packet is placed as usual);
// accepted whether the packet was taken (it advances the expected PSN).
// A packet the scheduler has no room for is not taken: the peer sends it
// again (an RNR NAK tells it when nothing is waiting for handlers; with
// messages waiting, a NAK would acknowledge them, so it times out).
func (e *engine) toHandlers(qpn uint32, q *hostmem.QPCEntry, r *qpRun, b *hpuBinding, p *wire.Packet, psn wire.PSN, first, last bool) (handled, accepted bool) {
	s := &r.hpu
	payload := p.Payload()
	if first {
		e.hpuAbort(qpn, r) // a UC message that broke off
		s.on = b != nil && b.match.matches(p)
		if !s.on {
			return false, false
		}
		s.b = b
		msg := hpu.Message{QPN: qpn, MSN: r.rcv.MSN() + 1, Flow: q.DestQPN}
		s.write = p.Info.Flags&wire.OpWrite != 0
		if s.write {
			h := p.RETH()
			m := h.DMALen()
			// As without a handler: a WRITE's length must fit its packets
			// and its key must allow the whole range (else the usual path
			// refuses it with its NAK).
			if m > maxMessage || last && m != uint32(len(payload)) || !last && m <= uint32(len(payload)) ||
				m > 0 && !e.allowed(h.RKey(), q.PD, h.VA(), uint64(m), ibv.AccessRemoteWrite) {
				s.on = false
				return false, false
			}
			msg.Length, msg.VA, msg.RKey, s.left = m, h.VA(), h.RKey(), m
		} else if last {
			msg.Length = uint32(len(payload))
		}
		if s.n == hpuPendingMax {
			e.counters.HPURefused.Add(1)
			e.refuse(q, r, psn)
			s.on = false
			return true, false
		}
		s.msg, s.first, s.index, s.off = msg, psn, 0, 0
	} else if !s.on {
		return false, false
	}
	b = s.b
	if s.write && (uint32(len(payload)) > s.left || last && uint32(len(payload)) != s.left) {
		// More or less than the RETH announced: the message fails.
		e.hpuAbortMessage(b.in, qpn, s.msg.MSN, errors.New("datapath: WRITE longer or shorter than its RETH"))
		s.on = false
		e.counters.RcvdLengthErr.Add(1)
		e.reply(q, r, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
		return true, false
	}
	pkt := hpu.Packet{Payload: payload, Offset: s.off, Index: s.index, Opcode: uint8(p.Opcode), PSN: uint32(psn), First: first, Last: last}
	if h := p.ImmDt(); h != nil {
		pkt.Imm = h.Imm()
	}
	if e.hpuHelper == nil {
		e.hpuHelper = e.nic.hpu.Load().engine.NewHelper()
	}
	if err := e.hpuHelper.Submit(b.in, s.msg, pkt); err != nil {
		e.counters.HPURefused.Add(1)
		if first {
			s.on = false
		}
		if q.Type == ibv.QPTUC { // unreliable: the message is lost
			e.hpuAbortMessage(b.in, qpn, s.msg.MSN, err)
			s.on, r.ucDrop = false, true
			return true, false
		}
		e.refuse(q, r, psn)
		return true, false
	}
	e.counters.HPUPackets.Add(1)
	e.hpuHelp = e.hpuHelper.Pending() > 0 || e.hpuHelper.Held() > 0 // run or published after the receive batch
	s.index++
	s.off += uint32(len(payload))
	s.left -= min(s.left, uint32(len(payload)))
	if last {
		s.on = false
		if q.Type == ibv.QPTRC {
			s.pend[(s.head+s.n)%hpuPendingMax] = hpuPending{msn: s.msg.MSN, first: s.first, last: psn}
			s.n++
		}
	}
	return true, true
}

// The handler tasks an engine runs in a turn at most (helpHPU): their
// number, and the time they may take (a handler that runs long holds
// the engine's other work that long; what is left goes to the HPUs).
const (
	hpuHelpMax    = 64
	hpuHelpBudget = 20 * time.Microsecond
)

// helpHPU runs the handler tasks the engine kept (hpu.Helper: those of
// short contexts) on its own goroutine, and then the events they made
// (the messages done are acknowledged in this turn's transmission). The
// engine does not wait for an HPU goroutine to get a processor: on a
// host whose cores the NIC's engines hold, that wait is most of a
// message's time in its handlers. It reports whether it ran any.
func (e *engine) helpHPU() bool {
	ran := e.hpuHelper.Run(hpuHelpMax, hpuHelpBudget)
	e.hpuHelp = e.hpuHelper.Pending() > 0
	if ran > 0 && len(e.hpuEv) > 0 {
		e.hpuEventsDue()
	}
	return ran > 0
}

// refuse answers a packet the handlers cannot take now: an RNR NAK when
// no message waits for its handlers (a NAK acknowledges what came before
// it), else nothing.
func (e *engine) refuse(q *hostmem.QPCEntry, r *qpRun, psn wire.PSN) {
	if q.Type == ibv.QPTRC && r.hpu.n == 0 {
		e.ack(q, r, psn, wire.RNRNAKSyndrome(q.MinRNRTimer))
	}
}

// hpuDone is a message's handlers having finished: the messages before it
// that have finished too are acknowledged, in order; a fault fails the
// message with a NAK (the requester completes it with an error) and moves
// the QP to the error state.
func (e *engine) hpuDone(qpn, msn uint32, err error) {
	r := &e.qps[qpn]
	s := &r.hpu
	found := false
	for i := range s.n {
		p := &s.pend[(s.head+i)%hpuPendingMax]
		if p.msn == msn && !p.done {
			p.done, found = true, true
			if err != nil {
				p.nak = wire.NAKRemoteOperationalErr
				if errors.Is(err, hpu.ErrOutsideRegion) {
					p.nak = wire.NAKRemoteAccessError
				}
			}
			break
		}
	}
	if !found {
		return // a message of a QP reset since, or a UC one
	}
	var q hostmem.QPCEntry
	if !e.qpc(qpn, &q) {
		return
	}
	popped := false
	for s.n > 0 && s.pend[s.head].done {
		popped = true
		p := s.pend[s.head]
		s.head = (s.head + 1) % hpuPendingMax
		s.n--
		if p.nak != 0 {
			e.counters.HPUFaults.Add(1)
			s.n = 0
			syn := p.nak
			// At its last PSN: its earlier packets may have been
			// acknowledged already (an ACK inside a message completes
			// nothing).
			e.ack(&q, r, p.last, wire.NAKSyndrome(syn))
			e.fail(qpn, &q, r, ibv.WCWRFlushErr)
			e.recvBellsDue()
			e.flushRecv(qpn, &q, r)
			return
		}
	}
	if popped && !s.ackDue { // one ACK for every message done in this batch of events
		s.ackDue = true
		e.hpuAcks = append(e.hpuAcks, qpn)
	}
}

// hpuAcknowledge sends the ACKs the messages done in a batch of events
// made due.
func (e *engine) hpuAcknowledge() {
	kept := e.hpuAcks[:0]
	for _, qpn := range e.hpuAcks {
		r := &e.qps[qpn]
		if !r.hpu.ackDue {
			continue // reset meanwhile
		}
		e.begin()
		if e.probe(hostmem.QPC, uint64(qpn), hpuWait) {
			kept = append(kept, qpn) // its context misses: the ACK goes when it comes
			continue
		}
		r.hpu.ackDue = false
		var q hostmem.QPCEntry
		if e.qpc(qpn, &q) && !r.errored {
			e.acknowledge(&q, r)
		}
	}
	e.hpuAcks = kept
}

// ackCap limits an acknowledgement while messages wait for their
// handlers: nothing from the oldest one's last packet on is acknowledged.
// It returns the PSN to acknowledge, the MSN to carry, and false for a NAK
// that would acknowledge a waiting message (not sent).
func (r *qpRun) ackCap(psn wire.PSN, s wire.Syndrome) (wire.PSN, uint32, bool) {
	msn := r.rcv.MSN()
	if r.hpu.n == 0 {
		return psn, msn, true
	}
	limit := r.hpu.pend[r.hpu.head].last
	if psn.Before(limit) {
		return psn, msn - uint32(r.hpu.n), true
	}
	if !s.IsACK() || limit == r.rcvFirst {
		// A NAK would acknowledge the waiting message; an ACK before the
		// QP's first request would acknowledge a PSN never sent.
		return psn, msn, false
	}
	return limit.Sub(1), msn - uint32(r.hpu.n), true
}

// The seam on the responder: what the responder's checks ask of the
// handler stage, besides handing it a message (engine.handlers).

// handlersWriteLeft is the bytes still to come of a WRITE an execution
// context's handlers take, if one is under way.
func (r *qpRun) handlersWriteLeft() (uint32, bool) {
	return r.hpu.left, r.hpu.on && r.hpu.write
}

// handlersPending reports whether messages wait for their handlers
// (nothing may acknowledge them before: no READ or atomic response).
func (r *qpRun) handlersPending() bool { return r.hpu.n > 0 }

// handlersTakeSends reports whether the QP's handlers take its SENDs
// (without receive WQEs: its ACKs carry no credits).
func (e *engine) handlersTakeSends(r *qpRun) bool {
	b := e.nic.binding(r.hpu.qpn)
	return b != nil && b.match.takesSends()
}

// handlersBreak ends the message its handlers have under way: it broke
// off (a refused packet, a UC loss).
func (e *engine) handlersBreak(qpn uint32, r *qpRun) {
	if r.hpu.on {
		e.hpuAbort(qpn, r)
	}
}

// hpuAbort ends the message of a QP under way with its handlers, whose
// last packet will not come.
func (e *engine) hpuAbort(qpn uint32, r *qpRun) {
	if r.hpu.on && r.hpu.b != nil {
		e.hpuAbortMessage(r.hpu.b.in, qpn, r.hpu.msg.MSN, errMessageBroken)
		e.counters.HPUAborted.Add(1)
	}
	r.hpu.on = false
}

// hpuAbortMessage ends a message under way with its handlers, through
// the engine's Helper, which keeps the index of the messages it submitted
// (hpu.Submitter).
func (e *engine) hpuAbortMessage(in *hpu.Installed, qpn, msn uint32, err error) {
	if e.hpuHelper != nil {
		e.hpuHelper.Abort(in, qpn, msn, err)
		return
	}
	e.nic.hpu.Load().engine.Abort(in, qpn, msn, err)
}

var errMessageBroken = errors.New("datapath: the message broke off (its QP was reset or failed, or UC lost a packet)")

// hpuReset ends what a QP had under way with its handlers (a reset, an
// error): its message, its messages waiting, its commands.
func (e *engine) hpuReset(qpn uint32, r *qpRun) {
	if e.nic.hpu.Load() == nil {
		return
	}
	e.hpuAbort(qpn, r)
	if r.cmdHead != 0 {
		e.dropCmds(r)
	}
	r.hpu.n = 0
}
