package datapath

// The transmit stage: frames are addressed to a QP's peer, encoded into
// the port's buffers and sent in batches.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
)

// gidAddr is the IP address of a GID (unmapped for IPv4).
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// sources are the NIC's own addresses by the kind of destination a frame
// goes to: IPv4, IPv6 global, IPv6 link-local (NICConfig.IP and Addrs).
type sources struct {
	ip4, ip6, ip6LL netip.Addr
}

// newSources picks ip for its kind, and for each other kind the first of
// addrs of that kind; a kind with none falls back to ip.
func newSources(ip netip.Addr, addrs []netip.Addr) sources {
	var s sources
	slot := func(a netip.Addr) *netip.Addr {
		switch {
		case a.Is4():
			return &s.ip4
		case a.IsLinkLocalUnicast():
			return &s.ip6LL
		}
		return &s.ip6
	}
	for _, a := range append([]netip.Addr{ip}, addrs...) {
		if a = a.Unmap(); a.IsValid() && !slot(a).IsValid() {
			*slot(a) = a
		}
	}
	for _, p := range []*netip.Addr{&s.ip4, &s.ip6, &s.ip6LL} {
		if !p.IsValid() {
			*p = ip
		}
	}
	return s
}

// forDst returns the address a frame to dst leaves from.
func (s *sources) forDst(dst netip.Addr) netip.Addr {
	switch {
	case dst.Is4():
		return s.ip4
	case dst.IsLinkLocalUnicast():
		return s.ip6LL
	}
	return s.ip6
}

// ECN is the ECN field a NIC's packets carry.
type ECN uint8

const (
	// ECNAuto marks packets ECN-capable (ECT(0)), as RoCEv2 NICs mark
	// them, while the NIC's RC senders react to CNPs (congestion control
	// on), so that an ECN switch marks them instead of dropping them; with
	// NICConfig.NoCongestionControl a mark would slow no one, and packets
	// go Not-ECT.
	ECNAuto ECN = iota
	ECNOff      // Not-ECT, as rxe sends
	ECNECT0     // ECT(0) always
	ECNECT1     // ECT(1) always (L4S)
)

// ParseECN reads an ECN choice by name: auto, off, ect0 or ect1.
func ParseECN(s string) (ECN, error) {
	for i, n := range ecnNames {
		if s == n {
			return ECN(i), nil
		}
	}
	return 0, fmt.Errorf("datapath: ECN %q: want auto, off, ect0 or ect1", s)
}

var ecnNames = [...]string{"auto", "off", "ect0", "ect1"}

func (c ECN) String() string {
	if int(c) < len(ecnNames) {
		return ecnNames[c]
	}
	return fmt.Sprintf("ECN(%d)", uint8(c))
}

// field is the IP header's ECN bits for the choice, on a NIC with or
// without congestion control.
func (c ECN) field(noCC bool) uint8 {
	switch {
	case c == ECNECT0 || c == ECNAuto && !noCC:
		return wire.ECT0
	case c == ECNECT1:
		return wire.ECT1
	}
	return 0
}

// frameTo fills the addressing of a frame for a QP's peer, its ECN field
// the NIC's choice (NICConfig.ECN); rxe ignores the field, which the ICRC
// masks.
func (e *engine) frameTo(f *wire.FrameFields, q *hostmem.QPCEntry, op wire.Opcode, psn wire.PSN) {
	*f = wire.FrameFields{}
	f.Ethernet = wire.EthernetFields{Dst: wire.MAC(q.DestMAC), Src: e.cfg.MAC}
	dst := gidAddr(q.DestGID)
	if dst.Is4() {
		f.IP4 = wire.IPv4Fields{TOS: dscp(q.TClass) | e.ecn, Flags: wire.IPv4FlagDF, TTL: 64, Src: e.nic.src.ip4, Dst: dst}
	} else {
		f.IPv6 = true
		f.IP6 = wire.IPv6Fields{TrafficClass: dscp(q.TClass) | e.ecn, HopLimit: 64, Src: e.nic.src.forDst(dst), Dst: dst}
	}
	f.UDP = wire.UDPFields{SrcPort: q.SrcPort, DstPort: wire.RoCEv2Port}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: q.DestQPN, PSN: psn & wire.PSNMask}
}

// dscp is the DSCP bits of a traffic class, where the frame's ECN field
// is the NIC's to set.
func dscp(tclass uint8) uint8 { return tclass &^ 3 }

// send encodes one frame into a transmit buffer and queues it; frames go
// out in batches (flushTX), one system call for many.
func (e *engine) send(f *wire.FrameFields) {
	e.commit(e.txBuffer(), f)
}

// txBuffer takes the next transmit buffer (flushing the batch if it is
// full); commit encodes a frame into it and queues it. Between the two
// the requester may gather a packet's payload straight into the buffer,
// at wire.PayloadOffset (sendPacket). The buffer is e.tx[e.txN]: when the
// port has none free, the batch is sent and the port flushed, which
// empties the batch, and the buffer then taken is the new batch's first.
func (e *engine) txBuffer() []byte {
	for {
		if e.txN == len(e.tx) {
			e.flushTX()
		}
		fr := e.tx[e.txN : e.txN+1]
		if e.port.Alloc(fr) > 0 {
			return fr[0].Data
		}
		e.flushTX()
		e.port.Flush()
		if e.dma.stagedN > 0 { // staged frames hold buffers: let them go
			e.pollDMA()
			e.sendStaged()
			e.flushTX()
		}
	}
}

// commit encodes f into the buffer txBuffer took and queues it; a buffer
// it cannot encode goes back to the port. A frame whose payload is being
// read, or that comes after such frames, is staged instead: it goes when
// the reads before it are done (dmastage.go).
func (e *engine) commit(buf []byte, f *wire.FrameFields) {
	d := &e.dma
	if d.staging == nil && d.stagedN == stagedMax {
		e.waitStagedRoom()
	}
	if d.staging == nil && d.stagedN > 0 {
		e.stage(0) // no reads: it waits only for the frames before it
	}
	if s := d.staging; s != nil {
		s.f, s.built = *f, true
		d.staging = nil
		return
	}
	e.commitNow(buf, f)
}

// commitNow encodes f into buf, the buffer at e.tx[e.txN], and queues it.
func (e *engine) commitNow(buf []byte, f *wire.FrameFields) {
	fr := e.tx[e.txN : e.txN+1]
	k, err := wire.Encode(buf, f)
	if err != nil {
		e.port.Free(fr)
		e.counters.SendErr.Add(1)
		return
	}
	fr[0].Data = buf[:k]
	e.txN++
}

// release gives back a buffer txBuffer took that will not be sent.
func (e *engine) releaseTX() {
	e.port.Free(e.tx[e.txN : e.txN+1])
}

// flushTX sends the queued frames, waiting while the port's ring is full.
func (e *engine) flushTX() {
	e.ackHoldFlushed()
	e.postHoldFlushed()
	sent := 0
	for sent < e.txN {
		k, err := e.port.Send(e.tx[sent:e.txN])
		sent += k
		if err != nil {
			e.counters.SendErr.Add(uint64(e.txN - sent))
			e.port.Free(e.tx[sent:e.txN])
			break
		}
		if k == 0 {
			e.port.Flush()
		}
	}
	e.counters.SentPkts.Add(uint64(min(sent, e.txN)))
	e.txN = 0
	e.completeSents()
	e.clockMoved()
}

// A responder's ACK and its application's answer to the request leave in
// one batch. In a ping-pong over an RC QP (perftest's write_lat and
// send_lat, an RPC) the application that polls its NIC sees a request
// placed by the turn that also queued the request's ACK, and posts its
// answer at once: sent at the end of that turn, the ACK is a system call
// (on a veth, the peer's whole receive path) between the request and the
// answer, on each side, in every round trip. An application's turn
// (PollApp) whose only frames are ACKs therefore holds them for its next
// turns (its polls, its posts: send_lat posts a receive before its
// answer), until a turn queues another frame (the answer, which then
// goes in the same batch, behind the ACKs: the order on the wire is
// unchanged) or NICConfig.ACKHold (DefaultACKHold) has passed on the
// engine's clock. The engine's goroutine never
// holds. An application that stops polling after a hold (it computes,
// then sleeps without a release) leaves its ACKs for its next verb call
// or the goroutine's lease, at most appLease: a hold that ended without
// an answer (ACKHold passed, with or without turns) pauses holding for
// ackHoldPause chances, twice as many after each such hold in a row up
// to ackHoldPauseMax, and as few again after a hold that saw its
// answer: a ping-pong preempted now and then keeps holding, while a
// program that does not answer at once (a stream's receiver) soon holds
// one chance in a thousand.
const (
	DefaultACKHold  = 10 * time.Microsecond
	ackHoldPause    = 8
	ackHoldPauseMax = 1024
)

// ackHold is an engine's ACKs held for its application's answer.
type ackHold struct {
	acks  int       // of the frames queued (e.tx[:txN]), the positive ACKs
	held  bool      // the frames queued are held
	at    time.Time // since when
	pause backoff   // chances to hold skipped after holds that saw no answer
}

// backoff counts chances to skip after a miss: lo after the first miss,
// twice as many after each miss in a row, up to hi; a hit brings the
// next pause back to lo. Holds pause so (ACKs, posts), and trust is
// withdrawn so (posts).
type backoff struct {
	left int // chances still to skip
	next int // the pause the next miss sets (0: lo)
}

// skip reports whether this chance is skipped, counting it.
func (b *backoff) skip() bool {
	if b.left > 0 {
		b.left--
		return true
	}
	return false
}

// miss starts a pause, twice the last one in a row, within [lo, hi].
func (b *backoff) miss(lo, hi int) {
	b.left = max(b.next, lo)
	b.next = min(2*b.left, hi)
}

// hit brings the next pause back to lo.
func (b *backoff) hit(lo int) { b.next = lo }

// holdACKs reports whether the frames a turn queued wait for a later
// turn: an application's turn whose only frames are ACKs, held for less
// than NICConfig.ACKHold.
func (e *engine) holdACKs() bool {
	h := &e.ackHold
	if !e.byApp || e.txN == 0 || h.acks != e.txN || e.cfg.ACKHold < 0 {
		return false
	}
	if h.held {
		return e.clock().Sub(h.at) < e.cfg.ACKHold // flushTX pauses holding if not
	}
	if h.pause.skip() {
		return false
	}
	h.held, h.at = true, e.clock()
	e.counters.AckHolds.Add(1)
	return true
}

// sendHeld sends the frames a hold keeps (ACKs, posts'), where no later
// turn will (NIC.SendHeld, NIC.Close, a poll about to sleep, a post
// hold's timer); e.mu is held.
func (e *engine) sendHeld() {
	if e.ackHold.held || e.postHold.held {
		e.flushTX()
	}
}

// sendHeldByApp is sendHeld in a call of the application's
// (NIC.SendHeld, NIC.Release): a hold it ends is not late.
func (e *engine) sendHeldByApp() {
	e.byApp = true
	e.sendHeld()
	e.byApp = false
}

// A program that posts work requests one at a time in a loop (perftest's
// bandwidth tests, most programs that stream) would make one system call
// per post with PollApp: each post's turn sends its frames at once, and
// on AF_XDP in copy mode that call is most of a small message's cost (a
// veth runs the peer's receive path in it too). A post's turn that comes
// within postBurst of the last post's, with no other turn between (no
// poll), therefore holds its frames for the application's next call: the
// next post's turn adds its own and holds them all, until postHoldMax
// frames are queued or NICConfig.PostHold has passed since the first;
// a poll, or any turn but a post's, sends them. A program that posts
// twice and then waits on memory without a call gets them sent by the
// engine's goroutine, whose lease a hold cuts to PostHold (lease.armShort:
// a post holds only while the goroutine waits on the lease, not when it
// sleeps on its port or backs off on one CPU);
// such a hold pauses holding for postHoldPause chances, twice as many
// after each such hold in a row up to postHoldPauseMax. A program that
// posts one request at a time and waits for the answer in between (a
// latency test) never holds: it polls between its posts, or its posts
// are a round trip apart. Only RC's frames wait: a UC or UD post's turn
// sends what is queued at once, as before. Their loss is final, and a
// sender sped up by holds outran its receiver (perftest's ib_send_bw -c
// UD -s 64, 450K datagrams a second against 170K, lost some in one run
// of three or four, and its server waited for them for ever).
//
// Arming the lease's timer and arming it back costs two system calls a
// hold, nearly what the hold saves (a VM's timer calls are dear:
// ib_write_bw -s 64 made 154-176K messages a second with them, 214-294K
// without). So once postTrust holds in a row have been ended by the
// program's own calls, a hold arms nothing: the lease as it stands
// (appLease after the program's last poll at most) bounds it. A trusted
// hold that the goroutine had to send after all withdraws trust for
// postDistrust holds, twice as many after each such hold, up to
// postDistrustMax: a program that streams posts and then waits on its
// memory pays that wait once, then seldom.
const (
	DefaultPostHold  = 30 * time.Microsecond
	postBurst        = 10 * time.Microsecond
	postHoldMax      = 32 // the kernel's transmit budget for one call in copy mode
	postHoldPause    = 8
	postHoldPauseMax = 1024
	postTrust        = 16
	postDistrust     = 1024
	postDistrustMax  = 1 << 20
)

// postHold is the state of holdPosts.
type postHold struct {
	held     bool
	armed    bool    // the lease's timer was armed short for the hold
	trusted  bool    // the hold began without arming it (trust)
	at       int64   // nanotime the hold began
	lastPost int64   // nanotime the last post's turn ended, 0 after any other turn
	pause    backoff // chances to hold skipped after holds no call ended
	trust    int     // holds in a row the program's calls ended (up to postTrust)
	distrust backoff // holds to arm before trust may build again, after trusted holds no call ended
}

// holdPosts reports whether the frames a post's turn queued wait for the
// application's next call (see postHold).
func (e *engine) holdPosts() bool {
	h := &e.postHold
	unreliable := e.unreliablePost
	e.unreliablePost = false
	if !e.byPost {
		h.lastPost = 0
		return false
	}
	now := nanotime()
	last := h.lastPost
	h.lastPost = now
	if e.txN == 0 || e.txN >= postHoldMax || e.cfg.PostHold < 0 || unreliable {
		return false
	}
	if h.held {
		return now-h.at < int64(e.cfg.PostHold)
	}
	// Only while the goroutine waits on the lease: asleep on its port, it
	// would not see the lease's timer.
	l := e.lease.Load()
	if last == 0 || now-last > int64(postBurst) || l == nil || !e.leased.Load() {
		return false
	}
	if h.pause.skip() {
		return false
	}
	h.held, h.at = true, now
	e.postHeld.Store(true)
	h.trusted = h.trust >= postTrust
	if h.armed = !h.trusted; h.armed {
		l.armShort(e.cfg.PostHold, now)
	} else {
		e.counters.PostHoldsTrusted.Add(1)
	}
	e.counters.PostHolds.Add(1)
	return true
}

// postHoldFlushed notes that the queued frames leave: a hold ends, and
// one that no call of the application's ended (the engine's goroutine
// sends them) pauses holding; one that a call ended gives the goroutine
// its whole lease back.
func (e *engine) postHoldFlushed() {
	h := &e.postHold
	if !h.held {
		return
	}
	h.held = false
	e.postHeld.Store(false)
	if !e.byApp {
		h.pause.miss(postHoldPause, postHoldPauseMax)
		e.counters.PostHoldsLate.Add(1)
		if h.trusted { // and no call came: trust goes for a while
			e.counters.PostHoldsTrustedLate.Add(1)
			h.distrust.miss(postDistrust, postDistrustMax)
		}
		h.trust = 0
		return
	}
	h.pause.hit(postHoldPause)
	if !h.distrust.skip() && h.trust < postTrust {
		h.trust++
	}
	if l := e.lease.Load(); l != nil && h.armed {
		now := nanotime()
		l.arm(appLease, now)
	}
}

// postHeldDue is the goroutine's look at a hold when the lease's timer has
// run out (e.mu held): a hold younger than NICConfig.PostHold (a trusted
// one, begun just before a whole lease ran out) gets the rest of its time,
// the timer armed for it; an older one is sent: no call of the program's
// came for it.
func (e *engine) postHeldDue() {
	h := &e.postHold
	if !h.held {
		return
	}
	now := nanotime()
	if age := now - h.at; age < int64(e.cfg.PostHold) {
		if l := e.lease.Load(); l != nil {
			h.armed = true
			l.armShort(e.cfg.PostHold-time.Duration(age), now)
			return
		}
	}
	e.sendHeld()
}

// ackHoldFlushed notes that the queued frames leave: a hold ends, and one
// that saw no answer (ACKs only, or after NICConfig.ACKHold) pauses
// holding.
func (e *engine) ackHoldFlushed() {
	h := &e.ackHold
	if h.held {
		h.held = false
		if h.acks == e.txN || e.clock().Sub(h.at) >= e.cfg.ACKHold {
			h.pause.miss(ackHoldPause, ackHoldPauseMax)
			e.counters.AckHoldsLate.Add(1)
		} else {
			h.pause.hit(ackHoldPause)
		}
	}
	h.acks = 0
}
