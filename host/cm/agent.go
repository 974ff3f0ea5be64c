package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// Config is an Agent's settings.
type Config struct {
	// Resolve finds a peer's (or its next hop's) Ethernet address.
	Resolve func(ctx context.Context, ip netip.Addr) (wire.MAC, error)
	// ResponseTimeout is the CM response timeout exponent this side
	// states and waits with: 4.096 us x 2^t (0: 18, about a second).
	ResponseTimeout uint8
	// MaxRetries is how many times a REQ, REP or DREQ is sent again
	// before the attempt fails (0: 15, rdma_cm's).
	MaxRetries int
	// Buffers is QP1's receive buffers (0: 64).
	Buffers int
}

// local is the agent's address for a connection to peer: the one its
// device's frames to peer leave from (datapath.NIC.Source; an IPv6 peer
// gets the device's IPv6 address of its scope, NICConfig.Addrs).
func (a *Agent) local(peer netip.Addr) netip.Addr { return a.dev.NIC().Source(peer) }

// Counters count what the agent saw and did: datagrams received on QP1
// and sent from it, messages sent again (REQ, REP, RTU, DREQ), datagrams
// dropped (malformed, not CM, for no connection) and REJs sent or
// received.
type Counters struct {
	Received, Sent, Resent, Dropped, Reject atomic.Uint64
	// HandshakesDropped counts passive handshakes ended to make room for
	// a newer REQ: a listener holds at most MaxPendingPerListener
	// unanswered ones, at most MaxPendingPerPeer from one address, the
	// oldest dropped first.
	HandshakesDropped atomic.Uint64
}

// Bounds on what unanswered passive handshakes hold, so that a flood of
// REQs from hosts that never answer (each taking a QP until its RTU)
// costs a bounded table for a bounded time, never the device: at most
// MaxPendingPerListener handshakes under way per listener and
// MaxPendingPerPeer per listener and peer address (a newer REQ drops the
// oldest), and a REQ's remote CM response timeout honoured up to
// MaxHonoredTimeout (4.096 us x 2^18: about 1.07 s between REPs).
const (
	MaxPendingPerListener = 64
	MaxPendingPerPeer     = 8
	MaxHonoredTimeout     = 18
)

// Agent is a device's communication manager: it owns QP1, answers and
// sends CM messages, and hands out connected RC QPs (Dial, Listener).
type Agent struct {
	dev       *verbs.Device
	cfg       Config
	pd        *verbs.PD // QP1's
	upd       *verbs.PD // connections' without a PD of their own
	cq        *verbs.CQ
	qp1       *verbs.QP
	mr        *verbs.MR
	buf       []byte // receive buffers, then send slots
	ip        netip.Addr
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu          sync.Mutex
	conns       map[uint32]*conn // by local communication ID
	passive     map[passiveKey]*conn
	listeners   map[uint16]*Listener
	udListeners map[uint16]*Listener     // rdma_cm's UDP port space
	sidr        map[uint32]chan *SIDRREP // resolutions waiting, by request ID
	closed      map[uint16]time.Time     // when each port's last listener closed
	freeSlots   []int
	slotFree    *sync.Cond

	Counters Counters
}

type passiveKey struct {
	peer   netip.Addr
	remote uint32 // the REQ's local communication ID
}

const (
	slotSize  = grhSize + MADSize
	grhSize   = 40
	sendSlots = 32
	recvFlag  = 1 << 32 // WR IDs of receives
)

// NewAgent starts the communication manager of dev, whose GID address
// is ip: it creates QP1 and serves it until Close.
func NewAgent(dev *verbs.Device, ip netip.Addr, cfg Config) (*Agent, error) {
	if cfg.Resolve == nil {
		return nil, errors.New("cm: Config.Resolve is required")
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 18
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = 64
	}
	a := &Agent{dev: dev, cfg: cfg, ip: ip.Unmap(), done: make(chan struct{}),
		conns: map[uint32]*conn{}, passive: map[passiveKey]*conn{}, listeners: map[uint16]*Listener{},
		udListeners: map[uint16]*Listener{}, sidr: map[uint32]chan *SIDRREP{}, closed: map[uint16]time.Time{}}
	a.slotFree = sync.NewCond(&a.mu)
	var err error
	if a.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if a.upd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if a.cq, err = dev.CreateCQ(2 * (cfg.Buffers + sendSlots)); err != nil {
		return nil, err
	}
	if a.qp1, err = a.pd.CreateGSI(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: sendSlots, MaxRecvWR: cfg.Buffers, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err := verbs.ReadyUD(a.qp1, GSIQKey); err != nil {
		return nil, err
	}
	a.buf = make([]byte, (cfg.Buffers+sendSlots)*slotSize)
	if a.mr, err = a.pd.RegMR(a.buf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range cfg.Buffers {
		if err := a.postRecv(i); err != nil {
			return nil, err
		}
	}
	for i := range sendSlots {
		a.freeSlots = append(a.freeSlots, cfg.Buffers+i)
	}
	a.wg.Add(1)
	go a.serve()
	return a, nil
}

// Device is the device whose QP1 the agent serves.
func (a *Agent) Device() *verbs.Device { return a.dev }

// PD is the protection domain of the connections whose QPConfig names
// none: register the memory their QPs reach in it.
func (a *Agent) PD() *verbs.PD { return a.upd }

// Close stops the agent: QP1 goes to the error state; connections it
// made stay as they are. Closing again does nothing.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		close(a.done)
		// Wake the handshakes waiting for a send slot before waiting for
		// them: with the agent's goroutine gone no completion frees one,
		// and a handshake still waiting held Close for ever (a flood of
		// forged REQs had taken every slot with their REPs).
		a.mu.Lock()
		a.slotFree.Broadcast()
		a.mu.Unlock()
		a.wg.Wait()
		err = a.qp1.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	})
	return err
}

func (a *Agent) slot(i int) []byte { return a.buf[i*slotSize : (i+1)*slotSize] }

func (a *Agent) postRecv(i int) error {
	_, err := a.qp1.PostRecv([]verbs.RecvWR{{WRID: recvFlag | uint64(i),
		SGL: []verbs.SGE{{Addr: a.mr.Addr + uint64(i*slotSize), Length: slotSize, LKey: a.mr.LKey}}}})
	return err
}

// timeout is how long a message waits for its answer: 4.096 us x 2^t.
func timeout(t uint8) time.Duration { return time.Duration(4096<<min(t, 31)) * time.Nanosecond }

// send sends a CM message to the GSI of the peer at ip.
func (a *Agent) send(ctx context.Context, ip netip.Addr, m Message, tid uint64) error {
	mad, err := Encode(m, tid)
	if err != nil {
		return err
	}
	mac, err := a.cfg.Resolve(ctx, ip)
	if err != nil {
		return fmt.Errorf("cm: resolving %v: %w", ip, err)
	}
	a.mu.Lock()
	for len(a.freeSlots) == 0 {
		select {
		case <-a.done:
			a.mu.Unlock()
			return errors.New("cm: the agent is closed")
		default:
		}
		a.slotFree.Wait()
	}
	i := a.freeSlots[len(a.freeSlots)-1]
	a.freeSlots = a.freeSlots[:len(a.freeSlots)-1]
	a.mu.Unlock()
	copy(a.slot(i), mad)
	ah := &verbs.AH{DestMAC: mac, DestGID: ip}
	_, err = a.qp1.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr + uint64(i*slotSize), Length: MADSize, LKey: a.mr.LKey}},
		AH:  ah, RemoteQPN: GSIQPN, RemoteQKey: GSIQKey}})
	if err != nil {
		a.release(i)
		return err
	}
	a.Counters.Sent.Add(1)
	return nil
}

func (a *Agent) release(i int) {
	a.mu.Lock()
	a.freeSlots = append(a.freeSlots, i)
	a.slotFree.Signal()
	a.mu.Unlock()
}

// Snapshot returns the counters' values.
func (c *Counters) Snapshot() (received, sent, resent, dropped, rejected uint64) {
	return c.Received.Load(), c.Sent.Load(), c.Resent.Load(), c.Dropped.Load(), c.Reject.Load()
}

// serve polls QP1's completions: sends give their slot back, receives
// are dispatched and their buffer posted again.
func (a *Agent) serve() {
	defer a.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-a.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	wc := make([]verbs.WC, 32)
	for {
		// The agent's goroutine never drives the NIC: that is the
		// application's polling, or the engines' own goroutines.
		n := a.cq.PollNoDrive(wc)
		if n == 0 {
			if err := a.cq.Sleep(ctx); err != nil {
				return
			}
			continue
		}
		for _, w := range wc[:n] {
			if w.WRID&recvFlag == 0 {
				a.release(int(w.WRID))
				continue
			}
			i := int(w.WRID &^ recvFlag)
			if w.Status == verbs.WCSuccess {
				a.receive(a.slot(i)[:min(int(w.ByteLen), slotSize)])
			}
			if w.Status != verbs.WCWRFlushErr {
				a.postRecv(i)
			}
		}
	}
}

// receive takes one datagram: the GRH (its IPv4 or IPv6 header says who
// sent it) and the MAD.
func (a *Agent) receive(dgram []byte) {
	a.Counters.Received.Add(1)
	if len(dgram) < grhSize+MADSize {
		a.Counters.Dropped.Add(1)
		return
	}
	peer := grhSource(dgram[:grhSize])
	h, m, err := Decode(dgram[grhSize : grhSize+MADSize])
	if err != nil || !peer.IsValid() {
		a.Counters.Dropped.Add(1)
		return
	}
	switch m := m.(type) {
	case *REQ:
		a.receiveREQ(peer, h.TID, m)
		return
	case *SIDRREQ:
		a.receiveSIDRREQ(peer, h.TID, m)
		return
	case *SIDRREP:
		a.receiveSIDRREP(m)
		return
	}
	var id uint32
	switch m := m.(type) {
	case *REP:
		id = m.RemoteCommID
	case *RTU:
		id = m.RemoteCommID
	case *REJ:
		id = m.RemoteCommID
	case *MRA:
		id = m.RemoteCommID
	case *DREQ:
		id = m.RemoteCommID
	case *DREP:
		id = m.RemoteCommID
	}
	a.mu.Lock()
	c := a.conns[id]
	if rej, ok := m.(*REJ); ok && (c == nil || c.peer != peer) {
		// A peer that gave up on its REQ (a REJ for a timeout, sent
		// when it destroys an ID still waiting for our REP) does not
		// know our ID: the REJ names the connection by the peer's own.
		c = a.passive[passiveKey{peer, rej.LocalCommID}]
	}
	a.mu.Unlock()
	if c == nil || c.peer != peer {
		if dreq, ok := m.(*DREQ); ok {
			// A DREQ for a connection this side has already closed (its
			// DREP was lost): answer it again.
			a.send(context.Background(), peer, &DREP{LocalCommID: dreq.RemoteCommID, RemoteCommID: dreq.LocalCommID}, h.TID)
			return
		}
		a.Counters.Dropped.Add(1)
		return
	}
	c.deliver(m, h.TID)
}

// grhSource is the sender's address from the 40-byte GRH a UD receive
// starts with: an IPv4 header in its last 20 bytes, else an IPv6 header.
func grhSource(grh []byte) netip.Addr {
	if grh[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(grh[32:36]))
	}
	if grh[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(grh[8:24])).Unmap()
	}
	return netip.Addr{}
}

// newLocalID returns an unused local communication ID.
func (a *Agent) newLocalID() uint32 {
	for {
		id := rand.Uint32()
		if _, used := a.conns[id]; id != 0 && !used {
			return id
		}
	}
}
