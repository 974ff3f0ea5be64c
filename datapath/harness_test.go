package datapath

// The engine's own test harness: a NIC built on host tables without
// host/verbs, a port the test feeds with frames it encodes and whose sent
// frames it reads back, and a driven clock shared by the NIC and its DMA
// engine, so that a test decides when a context fetch or a host write
// completes and when a timer expires. The engines never run on their own
// goroutines: the test takes their turns (NIC.Progress) itself.

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// testPort is a Port the test drives: frames it queues with inject come
// out of Recv in order, and every frame the NIC sends is kept, copied.
type testPort struct {
	rx       [][]byte
	tx       [][]byte
	stats    PortStats
	capacity int   // what RecvCapacity says (0: the default)
	waits    int   // Wait calls: the engine slept on the port
	batches  []int // the frames of each Send call, in order
	// sendTakes is how long each Send call takes (a slow host's burst).
	sendTakes time.Duration
	// recvTakes is how long a Recv call that returns frames takes (the
	// engine's thread off the CPU between its turn's start and its
	// receive).
	recvTakes time.Duration

	// Received frames are lent until released: each has its own handle,
	// and a released frame's bytes are overwritten, as a port reusing
	// the buffer would, so that an engine that reads a frame after giving
	// it back reads garbage.
	lastRx     uint64
	lent       map[uint64]bool
	badRelease int // releases of frames not lent (twice, or never received)

	// txSlots, if set, models a port with that many transmit buffers of
	// its own (the xsk port's UMEM slots): Alloc lends them, named by
	// Handle, and fails when none is free; Send transmits the bytes of
	// the buffer each frame's Handle names (its descriptor), not what
	// Data points at, and clears the frames it took; a buffer comes
	// free again only at Flush (its completion).
	txSlots    int
	slotBuf    [][]byte
	slotFree   []int
	slotLent   map[uint64]bool
	inFlight   []int
	badSend    int // frames sent whose Handle names no buffer lent
	allocShort int // Alloc calls that found too few buffers free
}

func (p *testPort) Recv(frames []Frame) (int, error) {
	k := min(len(frames), len(p.rx))
	if k > 0 && p.recvTakes > 0 {
		time.Sleep(p.recvTakes)
	}
	if p.lent == nil {
		p.lent = make(map[uint64]bool)
	}
	for i := range k {
		p.lastRx++
		frames[i] = Frame{Data: p.rx[i], Handle: p.lastRx}
		p.lent[p.lastRx] = true
	}
	p.rx = p.rx[k:]
	return k, nil
}

func (p *testPort) Release(frames []Frame) {
	for _, f := range frames {
		if !p.lent[f.Handle] {
			p.badRelease++
			continue
		}
		delete(p.lent, f.Handle)
		for i := range f.Data {
			f.Data[i] = 0xee
		}
	}
}
func (p *testPort) Free(frames []Frame) {
	if p.txSlots == 0 {
		return
	}
	for i := range frames {
		if h := frames[i].Handle; p.slotLent[h] {
			delete(p.slotLent, h)
			p.slotFree = append(p.slotFree, int(h-1))
		}
		frames[i] = Frame{}
	}
}

func (p *testPort) Alloc(frames []Frame) int {
	if p.txSlots > 0 {
		return p.allocSlots(frames)
	}
	for i := range frames {
		frames[i] = Frame{Data: make([]byte, p.MaxFrameLen())}
	}
	return len(frames)
}

// allocSlots is Alloc with txSlots.
func (p *testPort) allocSlots(frames []Frame) int {
	if p.slotBuf == nil {
		p.slotLent = make(map[uint64]bool)
		for i := range p.txSlots {
			p.slotBuf = append(p.slotBuf, make([]byte, p.MaxFrameLen()))
			p.slotFree = append(p.slotFree, i)
		}
	}
	n := min(len(frames), len(p.slotFree))
	if n < len(frames) {
		p.allocShort++
	}
	for i := range n {
		slot := p.slotFree[len(p.slotFree)-1]
		p.slotFree = p.slotFree[:len(p.slotFree)-1]
		p.slotLent[uint64(slot+1)] = true
		frames[i] = Frame{Data: p.slotBuf[slot], Handle: uint64(slot + 1)}
	}
	return n
}

func (p *testPort) Send(frames []Frame) (int, error) {
	if p.sendTakes > 0 {
		time.Sleep(p.sendTakes)
	}
	p.batches = append(p.batches, len(frames))
	for i, f := range frames {
		if p.txSlots == 0 {
			p.tx = append(p.tx, append([]byte(nil), f.Data...))
			continue
		}
		if !p.slotLent[f.Handle] {
			p.badSend++
			continue
		}
		delete(p.slotLent, f.Handle)
		slot := int(f.Handle - 1)
		p.tx = append(p.tx, append([]byte(nil), p.slotBuf[slot][:len(f.Data)]...))
		p.inFlight = append(p.inFlight, slot)
		frames[i] = Frame{}
	}
	return len(frames), nil
}

func (p *testPort) Wait(time.Duration) error { p.waits++; return nil }
func (p *testPort) Wake()                    {}
func (p *testPort) Flush() { // the transmissions complete
	p.slotFree = append(p.slotFree, p.inFlight...)
	p.inFlight = p.inFlight[:0]
}
func (p *testPort) MaxFrameLen() int  { return 9018 }
func (p *testPort) RecvCapacity() int { return p.capacity }
func (p *testPort) Stats() *PortStats { return &p.stats }
func (p *testPort) Close() error      { return nil }

// harness is one NIC under test and the peer the test plays.
type harness struct {
	t      *testing.T
	clock  *hostmem.DrivenClock
	mem    *hostmem.Memory
	nic    *NIC
	port   *testPort
	reg    *hostmem.Registrar
	nextMR uint64

	mac, peerMAC wire.MAC
	ip, peerIP   netip.Addr
	tos          uint8 // the IPv4 TOS of the peer's frames (ECN in its low bits)
}

// pcieLatency is the harness's modelled host round trip: a context miss
// stays a miss until the test moves the clock on by this much.
const pcieLatency = 2 * time.Microsecond

// newHarness builds a NIC whose host memory lies pcieLatency away on a
// driven clock.
func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, &testPort{})
}

// newHarnessOn is newHarness on the port given (one that says its
// receive capacity, say), its NIC's configuration changed by set.
func newHarnessOn(t *testing.T, port *testPort, set ...func(*NICConfig)) *harness {
	t.Helper()
	h := &harness{t: t, clock: hostmem.NewDrivenClock(time.Unix(1_000_000, 0)), mem: hostmem.NewMemory(), port: port, nextMR: 1,
		mac: wire.MAC{2, 0, 0, 0, 0, 1}, peerMAC: wire.MAC{2, 0, 0, 0, 0, 2},
		ip: netip.MustParseAddr("10.9.0.1"), peerIP: netip.MustParseAddr("10.9.0.2")}
	dma := hostmem.NewDMA(h.mem, hostmem.PCIe{Latency: pcieLatency, Clock: h.clock}, 0)
	cfg := NICConfig{Ports: []Port{h.port}, MAC: h.mac, IP: h.ip, Memory: h.mem, DMA: dma,
		MaxQPs: 16, MaxCQs: 4, MaxSRQs: 4, MaxMRs: 16, MaxMTT: 1024, ReplayEntries: 1024, Poll: PollApp, Clock: h.clock,
		ACKHold: -1} // each turn's ACKs leave with it (holdACKs' own tests hold them)
	for _, f := range set {
		f(&cfg)
	}
	nic, err := NewNIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.nic = nic
	if h.reg, err = hostmem.NewRegistrar(h.mem, nic.Table(hostmem.MTT), 4096); err != nil {
		t.Fatal(err)
	}
	h.reg.WriteEntry = func(idx, iova uint64) error { return nic.Cache(hostmem.MTT).HostWrite(idx, []uint64{iova}) }
	t.Cleanup(func() { dma.Close(); h.mem.Close() })
	return h
}

// hostWrite writes a context entry as the host's commands do.
func (h *harness) hostWrite(t hostmem.ContextType, idx uint64, b []byte) {
	h.t.Helper()
	words := make([]uint64, len(b)/8)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	if err := h.nic.Cache(t).HostWrite(idx, words); err != nil {
		h.t.Fatal(err)
	}
}

// cq makes CQ cqn with a ring of size entries and returns the ring's
// address.
func (h *harness) cq(cqn uint32, size uint32) uint64 {
	base := h.mem.Alloc(int(size) * hostmem.CQESize)
	e := hostmem.RingEntry{Valid: true, Size: size, Base: base}
	var b [64]byte
	e.Encode(b[:])
	h.hostWrite(hostmem.CQC, uint64(cqn), b[:])
	return base
}

// cqes reads the CQEs the NIC has written to a ring of size entries,
// from the first, up to the first it has not written.
func (h *harness) cqes(base uint64, size uint32) []hostmem.CQE {
	var out []hostmem.CQE
	for i := range size {
		b, err := h.mem.Slice(base+uint64(i)*hostmem.CQESize, hostmem.CQESize)
		if err != nil {
			h.t.Fatal(err)
		}
		var c hostmem.CQE
		c.Decode(b)
		if c.Owner != 1 {
			break
		}
		out = append(out, c)
	}
	return out
}

// rcQP makes QP qpn an RC QP in RTS, its peer's QP peerQPN, expecting
// psn first, its CQ cqn, and a receive queue of rq entries.
func (h *harness) rcQP(qpn, peerQPN uint32, psn wire.PSN, cqn uint32, rq uint32) hostmem.QPCEntry {
	q := hostmem.QPCEntry{Valid: true, Type: ibv.QPTRC, State: ibv.QPSRTS, MTU: 3, // 1024
		Access: ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic, PD: 1, SendCQ: cqn, RecvCQ: cqn,
		DestQPN: peerQPN, SQSize: 16, RQSize: rq, SQPSN: uint32(psn), RQPSN: uint32(psn), Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 16, MaxDestRdAtomic: 16, SrcPort: wire.SourcePort(qpn, peerQPN), DestMAC: h.peerMAC,
		DestGID: h.peerIP.As16()}
	q.SQBase = h.mem.Alloc(int(q.SQSize) * hostmem.SendWQESize)
	if rq > 0 {
		q.RQBase = h.mem.Alloc(int(rq) * hostmem.RecvWQESize)
	}
	h.rcQPAt(qpn, q)
	if err := h.nic.owner(qpn).openQP(qpn, &h.nic.qps[qpn], 64, &q); err != nil {
		h.t.Fatal(err)
	}
	return q
}

// rcQPAt writes a QP's context as given and starts it afresh.
func (h *harness) rcQPAt(qpn uint32, q hostmem.QPCEntry) {
	var b [128]byte
	q.Encode(b[:])
	h.hostWrite(hostmem.QPC, uint64(qpn), b[:])
	h.nic.qps[qpn].rcvStarted = false
}

// mr registers buf in PD 1 with the access given and returns its R_Key
// and address.
func (h *harness) mr(buf []byte, access ibv.Access) (rkey uint32, va uint64) {
	h.t.Helper()
	m, err := h.reg.Register(buf)
	if err != nil {
		h.t.Fatal(err)
	}
	idx := h.nextMR
	h.nextMR++
	e := hostmem.MPTEntry{Valid: true, Key: 0x5a, Access: access, PD: 1, VA: m.IOVA, Length: uint64(len(buf)), FirstMTT: m.FirstMTT, PageShift: 12}
	var b [64]byte
	e.Encode(b[:])
	h.hostWrite(hostmem.MPT, idx, b[:])
	return uint32(idx)<<8 | 0x5a, m.IOVA
}

// request is a request the peer sends: the fields the test gives; the
// harness fills in the addressing.
func (h *harness) request(f wire.FrameFields) {
	h.t.Helper()
	h.requestFrom(h.peerIP, f)
}

// requestFrom is request from another source address.
func (h *harness) requestFrom(src netip.Addr, f wire.FrameFields) {
	h.t.Helper()
	f.Ethernet = wire.EthernetFields{Dst: h.mac, Src: h.peerMAC}
	f.IP4 = wire.IPv4Fields{TOS: h.tos, Flags: wire.IPv4FlagDF, TTL: 64, Src: src, Dst: h.ip}
	f.UDP = wire.UDPFields{SrcPort: 0xc000, DstPort: wire.RoCEv2Port}
	f.BTH.PKey = wire.DefaultPKey
	buf := make([]byte, 9018)
	k, err := wire.Encode(buf, &f)
	if err != nil {
		h.t.Fatal(err)
	}
	h.port.rx = append(h.port.rx, buf[:k])
}

// write is a WRITE_ONLY from the peer asking for an ACK.
func (h *harness) write(qpn uint32, psn wire.PSN, rkey uint32, va uint64, data []byte) {
	h.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, DestQP: qpn, AckReq: true, PSN: psn},
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: uint32(len(data))}, Payload: data})
}

// turns takes the engines' turns until they have no work: frames, DMA
// and context fetches whose time has come. The clock stands meanwhile, so
// a stage that waited for a fetch would wait for ever: that fails the
// test.
func (h *harness) turns() {
	h.t.Helper()
	done := make(chan bool)
	go func() {
		for range 64 {
			if !h.nic.Progress() && len(h.port.rx) == 0 {
				done <- true
				return
			}
		}
		done <- false
	}()
	select {
	case idle := <-done:
		if !idle {
			h.t.Fatal("the engine never went idle")
		}
	case <-time.After(10 * time.Second):
		h.t.Fatal("a turn waited for a host fetch with the clock standing: a blocking lookup")
	}
}

// after moves the clock on by d and takes the turns that brings.
func (h *harness) after(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.turns()
}

// sent returns the frames the NIC sent since the last call, parsed.
func (h *harness) sent() []wire.Packet {
	h.t.Helper()
	var out []wire.Packet
	for _, f := range h.port.tx {
		var p wire.Packet
		if err := wire.Parse(f, &p); err != nil {
			h.t.Fatalf("the NIC sent a frame it cannot parse: %v", err)
		}
		out = append(out, p)
	}
	h.port.tx = h.port.tx[:0]
	return out
}

// reply is what a test checks of one packet the NIC sent.
type reply struct {
	qpn    uint32
	op     wire.Opcode
	psn    wire.PSN
	nak    bool
	rnr    bool
	code   uint8 // a NAK's code, an RNR NAK's timer
	atomic uint64
}

// replies returns the packets sent since the last call, as replies.
func (h *harness) replies() []reply {
	var out []reply
	for _, p := range h.sent() {
		r := reply{qpn: p.BTH().DestQP(), op: p.Opcode, psn: p.BTH().PSN()}
		if a := p.AETH(); a != nil {
			s := a.Syndrome()
			if r.nak, r.rnr = s.IsNAK(), s.IsRNRNAK(); r.nak || r.rnr {
				r.code = s.Value() // an ACK's value is its credits: not compared
			}
		}
		if a := p.AtomicAckETH(); a != nil {
			r.atomic = a.OrigData()
		}
		out = append(out, r)
	}
	return out
}

// mem reads n bytes at va.
func (h *harness) read(va uint64, n int) []byte {
	h.t.Helper()
	b, err := h.mem.Slice(va, n)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// post writes a send WQE at index idx of a QP's send queue and rings its
// doorbell with producer idx+1.
func (h *harness) post(qpn uint32, q *hostmem.QPCEntry, idx uint32, w hostmem.SendWQE) {
	h.t.Helper()
	h.writeWQE(q, idx, w)
	h.nic.Ring(Doorbell{QPN: qpn, Producer: idx + 1})
}

// writeWQE writes a send WQE at index idx of a QP's send queue, ringing
// no doorbell.
func (h *harness) writeWQE(q *hostmem.QPCEntry, idx uint32, w hostmem.SendWQE) {
	h.t.Helper()
	b, err := h.mem.Slice(q.SQBase+uint64(idx%q.SQSize)*hostmem.SendWQESize, hostmem.SendWQESize)
	if err != nil {
		h.t.Fatal(err)
	}
	w.Encode(b)
}

// inlineWrite is a signaled RDMA WRITE of data, inline, to the peer's
// remote address and key.
func inlineWrite(wrid uint64, data string, raddr uint64, rkey uint32) hostmem.SendWQE {
	w := hostmem.SendWQE{WRID: wrid, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled | ibv.SendInline, RemoteAddr: raddr, RKey: rkey, InlineLen: uint32(len(data))}
	copy(w.Inline[:], data)
	return w
}

// ack is the peer's ACK of psn on the NIC's QP qpn.
func (h *harness) ack(qpn uint32, psn wire.PSN, msn uint32) {
	h.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, DestQP: qpn, PSN: psn},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: msn}})
}

// postRecv writes a receive WQE at index idx of a QP's receive queue and
// rings its doorbell.
func (h *harness) postRecv(qpn uint32, q *hostmem.QPCEntry, idx uint32, w hostmem.RecvWQE) {
	h.t.Helper()
	b, err := h.mem.Slice(q.RQBase+uint64(idx%q.RQSize)*hostmem.RecvWQESize, hostmem.RecvWQESize)
	if err != nil {
		h.t.Fatal(err)
	}
	w.Encode(b)
	h.nic.Ring(Doorbell{QPN: qpn, Producer: idx + 1, Recv: true})
}
