package cm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// A listener from ListenRequests or ListenUD hands each connection
// request to its owner, who accepts or rejects it: librdmacm's model,
// where a CONNECT_REQUEST event is answered by rdma_accept or
// rdma_reject.
//
//	REQ ──► Listener.Request ──► Request.Accept(qc) ──► REP ... RTU ──► *Conn
//	                         └─► Request.Reject(private) ──► REJ
//	SIDR_REQ ──► Listener.Request ──► Request.AcceptUD(qpn, qkey, private) ──► SIDR_REP
//
// A request no one answers within the peer's CM response timeout and its
// retries is dropped; the peer gives up on it.

// Request is a connection request waiting for its listener's owner.
type Request struct {
	Peer    netip.Addr
	Port    uint16 // the listener's
	SrcPort uint16 // the peer's port in rdma_cm's IP header
	Private []byte // the peer's private data (without rdma_cm's IP header)
	// UD: a service ID resolution (SIDR_REQ) for a UD QP; the fields
	// below are a REQ's.
	UD bool
	// What the peer's QP offers and asks.
	PeerQPN                            uint32
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	SRQ                                bool

	a    *Agent
	c    *conn // RC
	req  *REQ
	sidr *SIDRREQ
	tid  uint64
}

// ListenRequests starts taking connection requests to addr (as Listen
// takes it), each handed to the caller (Listener.Request) to accept or
// reject.
func (a *Agent) ListenRequests(addr string) (*Listener, error) {
	port, err := a.listenPort(addr)
	if err != nil {
		return nil, err
	}
	return a.register(&Listener{a: a, port: port, requests: make(chan *Request, 64), done: make(chan struct{})})
}

// ListenUD starts taking service ID resolutions (SIDR_REQ) for addr's
// port in rdma_cm's UDP port space, each handed to the caller
// (Listener.Request) to answer with a UD QP (Request.AcceptUD) or reject.
func (a *Agent) ListenUD(addr string) (*Listener, error) {
	port, err := a.listenPort(addr)
	if err != nil {
		return nil, err
	}
	return a.register(&Listener{a: a, port: port, ud: true, requests: make(chan *Request, 64), done: make(chan struct{})})
}

// Request returns the next connection request.
func (l *Listener) Request(ctx context.Context) (*Request, error) {
	if l.requests == nil {
		return nil, fmt.Errorf("cm: this listener accepts by itself (Accept); ListenRequests hands requests out")
	}
	select {
	case r := <-l.requests:
		return r, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// offer hands a request to the listener's owner; a full queue rejects it.
func (l *Listener) offer(r *Request) {
	select {
	case l.requests <- r:
	default:
		r.Reject(nil)
	}
}

// Accept accepts an RC request with the QP qc says (qc.Existing: the
// caller's QP, in RESET or INIT) and qc.Private in the REP: the QP goes
// to RTS, the REP is sent (again on each response timeout) until the
// RTU, and the established connection returned. A REJ from the peer is a
// *RejectError.
func (r *Request) Accept(ctx context.Context, qc QPConfig) (*Conn, error) {
	if r.UD {
		return nil, fmt.Errorf("cm: a UD request is answered with AcceptUD")
	}
	qc.defaults(r.a)
	if len(qc.Private) > REPPrivate {
		return nil, fmt.Errorf("cm: %d bytes of private data, a REP carries %d", len(qc.Private), REPPrivate)
	}
	return r.a.handshake(ctx, qc, r.c, r.req)
}

// AcceptUD answers a UD request: the peer's datagrams for the service go
// to QP qpn with Q_Key qkey.
func (r *Request) AcceptUD(qpn, qkey uint32, private []byte) error {
	if !r.UD {
		return fmt.Errorf("cm: an RC request is answered with Accept")
	}
	if len(private) > SIDRREPPrivate {
		return fmt.Errorf("cm: %d bytes of private data, a SIDR_REP carries %d", len(private), SIDRREPPrivate)
	}
	return r.a.send(context.Background(), r.Peer, &SIDRREP{RequestID: r.sidr.RequestID, Status: SIDRValid, QPN: qpn,
		ServiceID: r.sidr.ServiceID, QKey: qkey, Private: private}, r.tid)
}

// Reject refuses the request, with private data for the peer (rdma_cm's
// consumer-defined reason).
func (r *Request) Reject(private []byte) error {
	r.a.Counters.Reject.Add(1)
	if r.UD {
		if len(private) > SIDRREPPrivate {
			private = private[:SIDRREPPrivate]
		}
		return r.a.send(context.Background(), r.Peer, &SIDRREP{RequestID: r.sidr.RequestID, Status: SIDRReject,
			ServiceID: r.sidr.ServiceID, Private: private}, r.tid)
	}
	if len(private) > REJPrivate {
		private = private[:REJPrivate]
	}
	err := r.a.send(context.Background(), r.Peer, &REJ{LocalCommID: r.c.localID, RemoteCommID: r.req.LocalCommID,
		MessageRejected: MsgREQ, Reason: RejConsumer, Private: private}, r.tid)
	r.c.end()
	return err
}

// listenPort parses a listen address (":port" or "host:port", the host
// this device's address or 0.0.0.0).
func (a *Agent) listenPort(addr string) (uint16, error) {
	ap, err := parseListenAddr(addr)
	if err != nil {
		return 0, err
	}
	if ip := ap.Addr().Unmap(); ip.IsValid() && !ip.IsUnspecified() && ip != a.ip && !a.dev.NIC().HasAddr(ip) {
		return 0, fmt.Errorf("cm: %q: listen on one of this device's addresses (%v or another of its GIDs'), 0.0.0.0 or none", addr, a.ip)
	}
	return ap.Port(), nil
}

// UDPeer is what a service ID resolution found: the remote UD QP serving
// the service and its Q_Key.
type UDPeer struct {
	Peer    netip.Addr
	QPN     uint32
	QKey    uint32
	Private []byte // the SIDR_REP's
}

// ResolveUD asks the host at addr ("host:port") which UD QP serves the
// port in rdma_cm's UDP port space (a SIDR_REQ, sent again on each
// response timeout), with private data for the service. A refusal is a
// *RejectError (its Reason the SIDR_REP's status).
func (a *Agent) ResolveUD(ctx context.Context, addr string, private []byte) (UDPeer, error) {
	ap, err := ResolveAddr(ctx, addr)
	if err != nil {
		return UDPeer{}, err
	}
	if len(private) > SIDRREQPrivate-IPHeaderSize {
		return UDPeer{}, fmt.Errorf("cm: %d bytes of private data, a SIDR_REQ carries %d", len(private), SIDRREQPrivate-IPHeaderSize)
	}
	peer := ap.Addr()
	priv := make([]byte, IPHeaderSize+len(private))
	if err := (IPHeader{SrcPort: uint16(rand.IntN(0x8000) + 0x8000), Src: a.local(peer), Dst: peer}).Put(priv); err != nil {
		return UDPeer{}, err
	}
	copy(priv[IPHeaderSize:], private)
	ch := make(chan *SIDRREP, 4)
	a.mu.Lock()
	id := a.newLocalID()
	a.sidr[id] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.sidr, id)
		a.mu.Unlock()
	}()
	req := &SIDRREQ{RequestID: id, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, ap.Port()), Private: priv}
	tid := rand.Uint64()
	for try := 0; try <= a.cfg.MaxRetries; try++ {
		if try > 0 {
			a.Counters.Resent.Add(1)
		}
		if err := a.send(ctx, peer, req, tid); err != nil {
			return UDPeer{}, err
		}
		t := time.NewTimer(timeout(a.cfg.ResponseTimeout))
		select {
		case <-ctx.Done():
			t.Stop()
			return UDPeer{}, ctx.Err()
		case <-a.done:
			t.Stop()
			return UDPeer{}, ErrClosed
		case rep := <-ch:
			t.Stop()
			if rep.Status != SIDRValid {
				a.Counters.Reject.Add(1)
				return UDPeer{}, &RejectError{Reason: uint16(rep.Status), Private: rep.Private}
			}
			return UDPeer{Peer: peer, QPN: rep.QPN, QKey: rep.QKey, Private: rep.Private}, nil
		case <-t.C:
		}
	}
	return UDPeer{}, fmt.Errorf("%w: no SIDR_REP from %v after %d SIDR_REQs", ErrTimeout, addr, a.cfg.MaxRetries+1)
}

// receiveSIDRREQ hands a SIDR_REQ to its UD listener, or answers that
// the service is not there.
func (a *Agent) receiveSIDRREQ(peer netip.Addr, tid uint64, m *SIDRREQ) {
	ps, port, ok := SplitServiceID(m.ServiceID)
	a.mu.Lock()
	l := a.udListeners[port]
	a.mu.Unlock()
	h, err := ParseIPHeader(m.Private)
	if !ok || ps != PortSpaceUDP || l == nil || err != nil {
		a.Counters.Reject.Add(1)
		a.send(context.Background(), peer, &SIDRREP{RequestID: m.RequestID, Status: SIDRNoService, ServiceID: m.ServiceID}, tid)
		return
	}
	l.offer(&Request{Peer: peer, Port: port, SrcPort: h.SrcPort, Private: append([]byte(nil), m.Private[IPHeaderSize:]...), UD: true,
		a: a, sidr: m, tid: tid})
}

// receiveSIDRREP hands a SIDR_REP to the resolution waiting for it.
func (a *Agent) receiveSIDRREP(m *SIDRREP) {
	a.mu.Lock()
	ch := a.sidr[m.RequestID]
	a.mu.Unlock()
	if ch == nil {
		a.Counters.Dropped.Add(1)
		return
	}
	select {
	case ch <- m:
	default:
	}
}

// requestOf is the Request a REQ to a ListenRequests listener becomes.
func (a *Agent) requestOf(peer netip.Addr, port uint16, c *conn, req *REQ, tid uint64) *Request {
	r := &Request{Peer: peer, Port: port, PeerQPN: req.LocalQPN, ResponderResources: req.ResponderResources,
		InitiatorDepth: req.InitiatorDepth, RetryCount: req.RetryCount, RNRRetryCount: req.RNRRetryCount, SRQ: req.SRQ,
		a: a, c: c, req: req, tid: tid}
	if h, err := ParseIPHeader(req.Private); err == nil {
		r.SrcPort = h.SrcPort
		r.Private = append([]byte(nil), req.Private[IPHeaderSize:]...)
	}
	return r
}

// parseListenAddr parses ":port" or "host:port" (an IP address).
func parseListenAddr(addr string) (netip.AddrPort, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("cm: %w", err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("cm: %q: the port is 1..65535", addr)
	}
	var ip netip.Addr
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("cm: %q: %w", addr, err)
		}
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}
