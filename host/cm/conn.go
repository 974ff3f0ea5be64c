package cm

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// QPConfig is the RC QP a connection gets and what this side offers. The
// zero QPConfig is a QP in the agent's PD (Agent.PD) with a CQ of its own
// for sends and receives, 64 of each outstanding, one SGE each.
type QPConfig struct {
	PD             *verbs.PD   // nil: the agent's (Agent.PD)
	SendCQ, RecvCQ *verbs.CQ   // nil: one CQ of the connection's own, for both
	SRQ            *verbs.SRQ  // receives from a shared receive queue
	Cap            verbs.QPCap // zero fields: 64 WRs each way, 1 SGE
	// ResponderResources and InitiatorDepth: the READs and atomics this
	// side answers at once, and has out at once (0: 16 each).
	ResponderResources, InitiatorDepth uint8
	// TrafficClass is the connection's frames' traffic class, both ways
	// (rdma_cm's TOS, rdma_set_option(RDMA_OPTION_ID_TOS)): a client
	// sends it in its REQ's path and the server's QP takes the REQ's. The
	// IP header's DSCP is its upper six bits; the ECN bits are the NIC's.
	TrafficClass uint8
	// RetryCount is the retries after a local ACK timeout (0: 7), and
	// RNRRetryCount those after an RNR NAK the peer is asked to make (7:
	// without end).
	RetryCount, RNRRetryCount uint8
	// Private is sent with the REQ (at most MaxREQPrivate bytes) or the
	// REP (at most REPPrivate); the peer finds it in Conn.Private. A
	// listener's is the same for every client it accepts: a region it
	// offers (verbs.MR.Remote, encoded with MarshalBinary, 16 bytes) fits
	// either. The field has a fixed size on the wire: the peer's
	// Conn.Private is always that long (MaxREQPrivate bytes from a REQ,
	// REPPrivate from a REP), what was sent followed by zeros, as rdma_cm
	// hands it over.
	Private []byte
	// Prepare, if set, is called with each new QP, in INIT, before its
	// connection is set up: to post the receives the peer's first SENDs
	// will need, and to attach handlers (QP.AttachHandlers) that must see
	// the peer's first message.
	Prepare func(qp *verbs.QP) error
	// QP, if set, supplies each connection's QP instead of one made from
	// PD, SendCQ, RecvCQ, SRQ and Cap: an RC QP of the agent's device,
	// which is reset first. A failed attempt or the connection's end
	// leaves it in the error state, as it does a QP of the agent's own.
	QP func() (*verbs.QP, error)
	// ServiceWait is how long Dial asks again (every 100 ms) when the peer
	// answers that no one listens on the port (a REJ for an invalid
	// service ID) before it returns the rejection; 0: at once. A peer may
	// be between two listeners on one port, as perftest -R is between its
	// exchange and its test's connections, or about to listen.
	ServiceWait time.Duration
	// Existing, if set, is the connection's QP as it is: an RC QP of the
	// agent's device in RESET or INIT (with receives posted, as
	// librdmacm's programs post them before connecting), taken to RTS and
	// left to the caller at the end, in the error state.
	Existing *verbs.QP
}

func (q *QPConfig) defaults(a *Agent) {
	if q.PD == nil {
		q.PD = a.upd
	}
	if q.Cap.MaxSendWR == 0 {
		q.Cap.MaxSendWR = 64
	}
	if q.Cap.MaxRecvWR == 0 && q.SRQ == nil {
		q.Cap.MaxRecvWR = 64
	}
	q.Cap.MaxSendSGE, q.Cap.MaxRecvSGE = max(q.Cap.MaxSendSGE, 1), max(q.Cap.MaxRecvSGE, 1)
	if q.ResponderResources == 0 {
		q.ResponderResources = 16
	}
	if q.InitiatorDepth == 0 {
		q.InitiatorDepth = 16
	}
	if q.RetryCount == 0 {
		q.RetryCount = 7
	}
	if q.RNRRetryCount == 0 {
		q.RNRRetryCount = 7
	}
}

// create makes (or takes) a connection's QP; the QP's CQs go into conn,
// and what it made there is conn's to release.
func (q *QPConfig) create(dev *verbs.Device, conn *Conn) (*verbs.QP, error) {
	if qp := q.Existing; qp != nil {
		if qp.Type != verbs.QPTRC {
			return nil, fmt.Errorf("cm: QP %d is %v, not RC", qp.Num, qp.Type)
		}
		if s := qp.State(); s != verbs.QPSReset && s != verbs.QPSInit {
			return nil, fmt.Errorf("%w: QP %d is %v: a connection takes a QP in RESET or INIT", verbs.ErrInvalid, qp.Num, s)
		}
		return qp, nil
	}
	if q.QP != nil {
		qp, err := q.QP()
		if err != nil {
			return nil, err
		}
		if qp.Type != verbs.QPTRC {
			return nil, fmt.Errorf("cm: QP %d is %v, not RC", qp.Num, qp.Type)
		}
		if qp.State() != verbs.QPSReset {
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
				return nil, err
			}
		}
		return qp, q.prepare(qp)
	}
	conn.PD, conn.SendCQ, conn.RecvCQ = q.PD, q.SendCQ, q.RecvCQ
	if q.SendCQ == nil || q.RecvCQ == nil {
		cq, err := dev.CreateCQ(q.Cap.MaxSendWR + q.Cap.MaxRecvWR)
		if err != nil {
			return nil, err
		}
		conn.madeCQ = cq
		conn.SendCQ, conn.RecvCQ = cmp.Or(q.SendCQ, cq), cmp.Or(q.RecvCQ, cq)
	}
	qp, err := q.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: conn.SendCQ, RecvCQ: conn.RecvCQ, SRQ: q.SRQ, Cap: q.Cap})
	if err != nil {
		conn.release()
		return nil, err
	}
	conn.madeQP = qp
	if err := q.prepare(qp); err != nil {
		conn.release()
		return nil, err
	}
	return qp, nil
}

// prepare takes a new QP to INIT and runs Prepare, if there is one.
func (q *QPConfig) prepare(qp *verbs.QP) error {
	if q.Prepare == nil {
		return nil
	}
	// Receives can be posted from INIT on.
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	if err := q.Prepare(qp); err != nil {
		qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
		return err
	}
	return nil
}

// serviceRetry is how often Dial asks again, for QPConfig.ServiceWait,
// when no one listens on the peer's port.
const serviceRetry = 100 * time.Millisecond

// relisten is how long after a listener closes a REQ to its port is left
// unanswered instead of rejected: the peer sends it again after its
// response timeout, and by then the port's next listener (perftest -R
// closes one listener and opens another) takes it.
const relisten = 2 * time.Second

// Errors of a connection attempt.
var (
	ErrRejected = errors.New("cm: connection rejected")
	ErrTimeout  = errors.New("cm: no answer")
	ErrClosed   = errors.New("cm: closed")
)

// RejectError is a REJ's reason.
type RejectError struct {
	Reason  uint16
	Private []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: connection rejected, reason %d", e.Reason)
}
func (e *RejectError) Unwrap() error { return ErrRejected }

// Conn is an established connection: its RC QP is in RTS, connected to
// the peer's.
type Conn struct {
	QP             *verbs.QP
	PD             *verbs.PD // the QP's (nil for a QP from QPConfig.QP)
	SendCQ, RecvCQ *verbs.CQ // the QP's (nil for a QP from QPConfig.QP)
	Peer           netip.Addr
	Private        []byte // what the peer sent with its REQ (without rdma_cm's header) or REP
	// What the peer's REQ or REP said of its QP: its number, the READs
	// and atomics it answers at once and has out at once, and whether it
	// receives from an SRQ.
	PeerQPN                                    uint32
	PeerResponderResources, PeerInitiatorDepth uint8
	PeerSRQ                                    bool
	c                                          *conn

	madeQP      *verbs.QP // what the agent made for the connection, and Close destroys
	madeCQ      *verbs.CQ
	releaseOnce sync.Once
}

// Done is closed when the connection ends: this side closed it, or the
// peer did (its QP has then gone to the error state and flushed).
func (c *Conn) Done() <-chan struct{} { return c.c.closed }

// Close disconnects: a DREQ (sent again until a DREP or the retries run
// out; nothing if the peer has disconnected), then the QP goes to the
// error state and flushes; then the QP and the CQ the agent made for the
// connection are destroyed (a QP from QPConfig.QP and the CQs a QPConfig
// named stay the caller's). Wait for the completions you need before
// Close, as with ibv_destroy_qp.
func (c *Conn) Close() error {
	err := c.c.disconnect()
	c.release()
	return err
}

// release destroys what the agent made for the connection.
func (c *Conn) release() {
	c.releaseOnce.Do(func() {
		if c.madeQP != nil {
			c.madeQP.Destroy()
		}
		if c.madeCQ != nil {
			c.madeCQ.Destroy()
		}
	})
}

// conn is one connection's state in the agent.
type conn struct {
	a                 *Agent
	localID, remoteID uint32
	peer              netip.Addr
	tid               uint64
	events            chan Message // for a handshake or a Close waiting
	closed            chan struct{}
	closeOnce         sync.Once

	mu          sync.Mutex
	established bool
	qp          *verbs.QP
	remoteQPN   uint32
	rtu         *RTU
	key         passiveKey
}

func (a *Agent) newConn(peer netip.Addr) *conn {
	c := &conn{a: a, peer: peer, tid: rand.Uint64(), events: make(chan Message, 16), closed: make(chan struct{})}
	a.mu.Lock()
	c.localID = a.newLocalID()
	a.conns[c.localID] = c
	a.mu.Unlock()
	return c
}

// deliver hands a message to the connection: a handshake or a Close
// waiting for it, or, once established, the answer it calls for.
func (c *conn) deliver(m Message, tid uint64) {
	c.mu.Lock()
	est, rtu := c.established, c.rtu
	c.mu.Unlock()
	if est {
		switch m.(type) {
		case *DREQ:
			c.a.send(context.Background(), c.peer, &DREP{LocalCommID: c.localID, RemoteCommID: c.remoteID}, tid)
			c.end()
			return
		case *REP:
			if rtu != nil { // our RTU was lost: the passive side sent its REP again
				c.a.Counters.Resent.Add(1)
				c.a.send(context.Background(), c.peer, rtu, c.tid)
			}
			return
		case *DREP:
		default:
			return
		}
	}
	select {
	case c.events <- m:
	default:
		c.a.Counters.Dropped.Add(1)
	}
}

// end moves the QP to the error state (it flushes), forgets the
// connection and closes Done.
func (c *conn) end() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		qp := c.qp
		c.mu.Unlock()
		if qp != nil {
			qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
		}
		c.a.mu.Lock()
		delete(c.a.conns, c.localID)
		if c.a.passive[c.key] == c {
			delete(c.a.passive, c.key)
		}
		c.a.mu.Unlock()
		close(c.closed)
	})
}

func (c *conn) disconnect() error {
	select {
	case <-c.closed:
		return nil
	default:
	}
	c.mu.Lock()
	dreq := &DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	c.mu.Unlock()
	defer c.end()
	tid := rand.Uint64()
	for try := 0; try <= c.a.cfg.MaxRetries; try++ {
		if try > 0 {
			c.a.Counters.Resent.Add(1)
		}
		if err := c.a.send(context.Background(), c.peer, dreq, tid); err != nil {
			return err
		}
		t := time.NewTimer(timeout(c.a.cfg.ResponseTimeout))
		for {
			select {
			case ev := <-c.events:
				if _, ok := ev.(*DREP); !ok {
					continue
				}
				t.Stop()
				return nil
			case <-c.closed: // the peer's DREQ crossed ours
				t.Stop()
				return nil
			case <-t.C:
			}
			break
		}
	}
	return fmt.Errorf("%w: no DREP", ErrTimeout)
}

// guid is the CA GUID a device states: EUI-64 from its MAC.
func guid(mac wire.MAC) uint64 {
	var b [8]byte
	b[0], b[1], b[2] = mac[0]^2, mac[1], mac[2]
	b[3], b[4] = 0xff, 0xfe
	b[5], b[6], b[7] = mac[3], mac[4], mac[5]
	return binary.BigEndian.Uint64(b[:])
}

// connectQP takes qp to RTS towards the peer's QP: it sends from sqPSN
// and expects rqPSN first.
func (c *conn) connectQP(ctx context.Context, qp *verbs.QP, sqPSN, peerQPN, rqPSN uint32, mtu uint8, opts verbs.ConnectOptions) error {
	mac, err := c.a.cfg.Resolve(ctx, c.peer)
	if err != nil {
		return err
	}
	local := qp.Endpoint(sqPSN, nil)
	remote := verbs.Endpoint{Type: verbs.QPTRC, QPN: peerQPN, PSN: rqPSN, GID: c.peer, MAC: mac, MTU: int(mtu)}
	opts.Access = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	opts.MinRNRTimer = 12
	if err := qp.Connect(local, remote, &opts); err != nil {
		return err
	}
	c.mu.Lock()
	c.qp, c.remoteQPN = qp, peerQPN
	c.mu.Unlock()
	return nil
}

// Dial connects to the listener at addr, "host:port" as net.Dial takes
// it (an address or a name that has one; the port in rdma_cm's TCP
// port space): it creates an RC QP as qc says, sends a REQ (again each
// response timeout, as often as the agent's MaxRetries), and on the REP
// takes the QP to RTS and sends the RTU. It returns the connection, its
// QP in RTS; a REJ is a *RejectError, no answer ErrTimeout.
func (a *Agent) Dial(ctx context.Context, addr string, qc QPConfig) (*Conn, error) {
	ap, err := ResolveAddr(ctx, addr)
	if err != nil {
		return nil, err
	}
	return a.dial(ctx, ap, qc)
}

// ResolveAddr parses addr ("host:port", as Dial takes it) into the
// address and the port Dial connects to: a name is looked up once, its
// IPv4 address first.
func ResolveAddr(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("cm: %w", err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("cm: %q: the port is 1..65535", addr)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil || len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("cm: %q: %w", addr, cmp.Or(lerr, errors.New("no address")))
		}
		ip = ips[0]
		for _, a := range ips {
			if a.Unmap().Is4() {
				ip = a
				break
			}
		}
	}
	if ip = ip.Unmap(); ip.IsUnspecified() || ip.IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("cm: %q: want a peer's unicast address", addr)
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

func (a *Agent) dial(ctx context.Context, addr netip.AddrPort, qc QPConfig) (*Conn, error) {
	qc.defaults(a)
	if len(qc.Private) > MaxREQPrivate {
		return nil, fmt.Errorf("cm: %d bytes of private data, a REQ carries %d", len(qc.Private), MaxREQPrivate)
	}
	peer := addr.Addr().Unmap()
	conn := &Conn{Peer: peer}
	qp, err := qc.create(a.dev, conn)
	if err != nil {
		return nil, err
	}
	conn.QP = qp
	c := a.newConn(peer)
	c.mu.Lock()
	c.qp = qp
	c.mu.Unlock()
	fail := func(err error) (*Conn, error) {
		c.end()
		conn.release()
		return nil, err
	}
	psn := verbs.RandomPSN()
	mtu := uint8(a.dev.ActiveMTU())
	private := make([]byte, IPHeaderSize+len(qc.Private))
	if err := (IPHeader{SrcPort: uint16(rand.IntN(0x8000) + 0x8000), Src: a.local(peer), Dst: peer}).Put(private); err != nil {
		return fail(err)
	}
	copy(private[IPHeaderSize:], qc.Private)
	req := &REQ{LocalCommID: c.localID, ServiceID: ServiceID(PortSpaceTCP, addr.Port()), LocalCAGUID: guid(qp.Endpoint(0, nil).MAC),
		LocalQPN: qp.Num, ResponderResources: qc.ResponderResources, InitiatorDepth: qc.InitiatorDepth,
		RemoteCMResponseTimeout: a.cfg.ResponseTimeout, TransportType: TransportRC, StartingPSN: psn,
		LocalCMResponseTimeout: a.cfg.ResponseTimeout, RetryCount: qc.RetryCount, PKey: 0xffff, PathMTU: mtu,
		RNRRetryCount: qc.RNRRetryCount, MaxCMRetries: uint8(min(15, a.cfg.MaxRetries)), SRQ: qc.SRQ != nil,
		Primary: Path{LocalGID: a.local(peer).As16(), RemoteGID: peer.As16(), HopLimit: 64, LocalACKTimeout: 14, TrafficClass: qc.TrafficClass},
		Private: private}
	start := time.Now()
	for try := 0; try <= a.cfg.MaxRetries; try++ {
		if try > 0 {
			a.Counters.Resent.Add(1)
		}
		if err := a.send(ctx, peer, req, c.tid); err != nil {
			return fail(err)
		}
		deadline := time.NewTimer(timeout(a.cfg.ResponseTimeout))
	wait:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				return fail(ctx.Err())
			case <-a.done:
				return fail(ErrClosed)
			case <-deadline.C:
				break wait
			case ev := <-c.events:
				switch m := ev.(type) {
				case *REJ:
					deadline.Stop()
					if m.Reason == RejInvalidServiceID && time.Since(start) < qc.ServiceWait {
						// No listener yet: programs listen again on a port
						// between two phases (perftest -R), and a slow peer's
						// next listener may be a moment away. Ask again.
						select {
						case <-time.After(serviceRetry):
						case <-ctx.Done():
							return fail(ctx.Err())
						}
						try--
						break wait
					}
					a.Counters.Reject.Add(1)
					return fail(&RejectError{Reason: m.Reason, Private: m.Private})
				case *MRA: // the peer needs longer: wait for it
					deadline.Reset(timeout(m.ServiceTimeout) + timeout(a.cfg.ResponseTimeout))
				case *REP:
					deadline.Stop()
					c.mu.Lock()
					c.remoteID = m.LocalCommID
					c.mu.Unlock()
					opts := verbs.ConnectOptions{Timeout: 14, RetryCnt: qc.RetryCount, RNRRetry: m.RNRRetryCount, PeerRNRRetry: qc.RNRRetryCount, IdleProbe: true,
						MaxRdAtomic: min(qc.InitiatorDepth, m.ResponderResources), MaxDestRdAtomic: qc.ResponderResources, TrafficClass: qc.TrafficClass}
					// The REQ's starting PSN is the one the passive side sends
					// from, the REP's the one this side sends from (as Linux's
					// CM sets its QPs).
					if err := c.connectQP(ctx, qp, m.StartingPSN, m.LocalQPN, psn, mtu, opts); err != nil {
						a.send(ctx, peer, &REJ{LocalCommID: c.localID, RemoteCommID: m.LocalCommID, MessageRejected: MsgREP, Reason: RejNoResources}, c.tid)
						return fail(err)
					}
					rtu := &RTU{LocalCommID: c.localID, RemoteCommID: m.LocalCommID}
					c.mu.Lock()
					c.rtu, c.established = rtu, true
					c.mu.Unlock()
					if err := a.send(ctx, peer, rtu, c.tid); err != nil {
						return fail(err)
					}
					conn.Private, conn.c = m.Private, c
					conn.PeerQPN, conn.PeerResponderResources, conn.PeerInitiatorDepth, conn.PeerSRQ = m.LocalQPN, m.ResponderResources, m.InitiatorDepth, m.SRQ
					return conn, nil
				}
			}
		}
	}
	a.send(ctx, peer, &REJ{LocalCommID: c.localID, MessageRejected: MsgREQ, Reason: RejTimeout}, c.tid)
	return fail(fmt.Errorf("%w: no REP from %v after %d REQs", ErrTimeout, addr, a.cfg.MaxRetries+1))
}

// Listener takes connection requests to one port (rdma_cm's TCP port
// space).
type Listener struct {
	a        *Agent
	port     uint16
	ud       bool // rdma_cm's UDP port space (ListenUD)
	qc       QPConfig
	accepted chan *Conn
	requests chan *Request // ListenRequests, ListenUD: handed to the owner
	done     chan struct{}
	once     sync.Once

	mu      sync.Mutex
	pending []*pendingHandshake // passive handshakes under way, oldest first
}

// pendingHandshake is a passive handshake under way on a listener.
type pendingHandshake struct {
	peer   netip.Addr
	cancel context.CancelFunc
}

// admit makes room for a new passive handshake from peer (dropping the
// oldest of the peer's, or of the listener's, beyond the bounds) and
// returns its context and the function that ends its place.
func (l *Listener) admit(peer netip.Addr) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &pendingHandshake{peer: peer, cancel: cancel}
	l.mu.Lock()
	fromPeer := 0
	for _, p := range l.pending {
		if p.peer == peer {
			fromPeer++
		}
	}
	drop := func(i int) {
		l.pending[i].cancel()
		l.pending = append(l.pending[:i], l.pending[i+1:]...)
		l.a.Counters.HandshakesDropped.Add(1)
	}
	if fromPeer >= MaxPendingPerPeer {
		for i, p := range l.pending {
			if p.peer == peer {
				drop(i)
				break
			}
		}
	}
	if len(l.pending) >= MaxPendingPerListener {
		drop(0)
	}
	l.pending = append(l.pending, h)
	l.mu.Unlock()
	return ctx, func() {
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, p := range l.pending {
			if p == h {
				l.pending = append(l.pending[:i], l.pending[i+1:]...)
				return
			}
		}
	}
}

// Listen starts taking connection requests to addr, ":port" or
// "host:port" as net.Listen takes it (the host, if any, this device's
// address or 0.0.0.0; the port in rdma_cm's TCP port space); each gets
// an RC QP as qc says, and qc.Private goes back with the REP.
func (a *Agent) Listen(addr string, qc QPConfig) (*Listener, error) {
	port, err := a.listenPort(addr)
	if err != nil {
		return nil, err
	}
	return a.listen(port, qc)
}

func (a *Agent) listen(port uint16, qc QPConfig) (*Listener, error) {
	qc.defaults(a)
	if len(qc.Private) > REPPrivate {
		return nil, fmt.Errorf("cm: %d bytes of private data, a REP carries %d", len(qc.Private), REPPrivate)
	}
	return a.register(&Listener{a: a, port: port, qc: qc, accepted: make(chan *Conn, 16), done: make(chan struct{})})
}

// register takes a listener, made whole, into its port space's table:
// from then on the port's requests are its.
func (a *Agent) register(l *Listener) (*Listener, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	table, space := a.listeners, "port"
	if l.ud {
		table, space = a.udListeners, "UDP port"
	}
	if table[l.port] != nil {
		return nil, fmt.Errorf("cm: %s %d has a listener", space, l.port)
	}
	table[l.port] = l
	return l, nil
}

// Addr is the address the listener takes requests to.
func (l *Listener) Addr() netip.AddrPort { return netip.AddrPortFrom(l.a.ip, l.port) }

// Accept returns the next established connection.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.accepted:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops taking requests to the port; later ones are rejected.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.a.mu.Lock()
		if l.ud {
			delete(l.a.udListeners, l.port)
		} else {
			delete(l.a.listeners, l.port)
			l.a.closed[l.port] = time.Now()
		}
		l.a.mu.Unlock()
		close(l.done)
		for l.requests != nil { // the requests no one took are refused
			select {
			case r := <-l.requests:
				r.Reject(nil)
				continue
			default:
			}
			break
		}
	})
	return nil
}

// closedRecently reports whether a listener on port closed less than
// relisten ago.
func (a *Agent) closedRecently(port uint16) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.closed[port]
	if ok && time.Since(t) >= relisten {
		delete(a.closed, port)
		return false
	}
	return ok
}

// receiveREQ takes a REQ: a repeat goes to its handshake; a new one to
// its listener, or back as a REJ when there is none.
func (a *Agent) receiveREQ(peer netip.Addr, tid uint64, req *REQ) {
	key := passiveKey{peer, req.LocalCommID}
	a.mu.Lock()
	if c := a.passive[key]; c != nil {
		a.mu.Unlock()
		c.deliver(req, tid)
		return
	}
	ps, port, ok := SplitServiceID(req.ServiceID)
	l := a.listeners[port]
	a.mu.Unlock()
	if req.TransportType != TransportRC {
		// Listeners here hand out RC QPs only.
		a.Counters.Reject.Add(1)
		a.send(context.Background(), peer, &REJ{RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ, Reason: RejInvalidTransportType}, tid)
		return
	}
	if ok && ps == PortSpaceTCP && l == nil && a.closedRecently(port) {
		a.Counters.Dropped.Add(1) // answered when it comes again, by the port's next listener
		return
	}
	if !ok || ps != PortSpaceTCP || l == nil {
		a.Counters.Reject.Add(1)
		a.send(context.Background(), peer, &REJ{RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ, Reason: RejInvalidServiceID}, tid)
		return
	}
	c := a.newConn(peer)
	c.remoteID, c.tid, c.key = req.LocalCommID, tid, key
	a.mu.Lock()
	a.passive[key] = c
	a.mu.Unlock()
	if l.requests != nil {
		l.offer(a.requestOf(peer, port, c, req, tid))
		return
	}
	ctx, end := l.admit(peer)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.accept(ctx, end, l, c, req)
	}()
}

// accept is the passive side of one handshake for a listener that
// accepts every request: the handshake (its place among the listener's
// pending ones ended by end), then the connection to Accept.
func (a *Agent) accept(ctx context.Context, end func(), l *Listener, c *conn, req *REQ) {
	conn, err := a.handshake(ctx, l.qc, c, req)
	end()
	if err != nil {
		return
	}
	select {
	case l.accepted <- conn:
	case <-l.done:
		conn.Close()
	}
}

// repWait is how long the passive side waits for the RTU after its
// try'th REP (from 0): a quarter of the response timeout full, then half,
// then all of it. A REP or RTU lost on a lossy path costs a quarter of it
// (the peer's CM answers a REP it has taken already with its RTU again),
// while a slow peer still has the whole timeout from the third REP on.
func repWait(try int, full time.Duration) time.Duration { return full >> (2 - min(try, 2)) }

// handshake is the passive side of one handshake: the QP to RTS, the REP
// (again after a quarter of the response timeout, a half, then each
// timeout, and at once for a repeated REQ: repWait) until the RTU. A
// failure has been answered (a REJ) and ended the attempt.
func (a *Agent) handshake(ctx context.Context, qc QPConfig, c *conn, req *REQ) (*Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reject := func(reason uint16, err error) (*Conn, error) {
		a.Counters.Reject.Add(1)
		a.send(ctx, c.peer, &REJ{LocalCommID: c.localID, RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ, Reason: reason}, c.tid)
		c.end()
		return nil, err
	}
	if _, err := ParseIPHeader(req.Private); err != nil {
		return reject(RejConsumer, err)
	}
	conn := &Conn{Peer: c.peer}
	qp, err := qc.create(a.dev, conn)
	if err != nil {
		return reject(RejNoResources, err)
	}
	conn.QP = qp
	accepted := false
	defer func() {
		if !accepted {
			conn.release()
		}
	}()
	psn := verbs.RandomPSN()
	mtu := min(req.PathMTU, uint8(a.dev.ActiveMTU()))
	ackTimeout := req.Primary.LocalACKTimeout
	if ackTimeout == 0 {
		ackTimeout = 14
	}
	opts := verbs.ConnectOptions{Timeout: ackTimeout, RetryCnt: req.RetryCount, RNRRetry: req.RNRRetryCount, PeerRNRRetry: qc.RNRRetryCount, IdleProbe: true,
		MaxRdAtomic: min(qc.InitiatorDepth, req.ResponderResources), MaxDestRdAtomic: qc.ResponderResources, TrafficClass: req.Primary.TrafficClass}
	// This side sends from the REQ's starting PSN and expects the REP's
	// (as Linux's CM sets its QPs: each message's starting PSN is the
	// one its sender expects first).
	if err := c.connectQP(ctx, qp, req.StartingPSN, req.LocalQPN, psn, mtu, opts); err != nil {
		qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
		return reject(RejNoResources, err)
	}
	rep := &REP{LocalCommID: c.localID, RemoteCommID: req.LocalCommID, LocalQPN: qp.Num, StartingPSN: psn,
		ResponderResources: qc.ResponderResources, InitiatorDepth: qc.InitiatorDepth, TargetACKDelay: 15,
		RNRRetryCount: qc.RNRRetryCount, SRQ: qc.SRQ != nil || qc.Existing != nil && qc.Existing.HasSRQ(), LocalCAGUID: guid(qp.Endpoint(0, nil).MAC), Private: qc.Private}
	private := append([]byte(nil), req.Private[IPHeaderSize:]...)
	for try := 0; try <= a.cfg.MaxRetries; try++ {
		if try > 0 {
			a.Counters.Resent.Add(1)
		}
		if err := a.send(ctx, c.peer, rep, c.tid); err != nil {
			c.end()
			return nil, err
		}
		deadline := time.NewTimer(repWait(try, timeout(min(req.RemoteCMResponseTimeout, MaxHonoredTimeout))))
	wait:
		for {
			select {
			case <-a.done:
				deadline.Stop()
				c.end()
				return nil, ErrClosed
			case <-ctx.Done():
				deadline.Stop()
				return reject(RejTimeout, ctx.Err())
			case <-deadline.C:
				break wait
			case ev := <-c.events:
				switch m := ev.(type) {
				case *REQ: // our REP was lost
					a.Counters.Resent.Add(1)
					a.send(ctx, c.peer, rep, c.tid)
				case *REJ:
					deadline.Stop()
					c.end()
					a.Counters.Reject.Add(1)
					return nil, &RejectError{Reason: m.Reason, Private: m.Private}
				case *RTU:
					deadline.Stop()
					c.mu.Lock()
					c.established = true
					c.mu.Unlock()
					conn.Private, conn.c = private, c
					conn.PeerQPN, conn.PeerResponderResources, conn.PeerInitiatorDepth, conn.PeerSRQ = req.LocalQPN, req.ResponderResources, req.InitiatorDepth, req.SRQ
					accepted = true
					return conn, nil
				}
			}
		}
	}
	return reject(RejTimeout, fmt.Errorf("%w: no RTU from %v after %d REPs", ErrTimeout, c.peer, a.cfg.MaxRetries+1))
}
