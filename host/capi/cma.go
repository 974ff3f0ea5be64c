package main

/*
#define SRN_GO
#include "srn.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// librdmacm's ids and event channels over host/cm's agent: every
// asynchronous operation (address and route resolution, connect, accept,
// disconnect, a request to a listener, the peer's disconnect) ends in an
// event queued on the id's channel, whose pipe gets a byte per event.
//
//	rdma_resolve_addr ──► ADDR_RESOLVED | ADDR_ERROR
//	rdma_resolve_route ─► ROUTE_RESOLVED
//	rdma_connect ───────► ESTABLISHED | REJECTED | UNREACHABLE | CONNECT_ERROR
//	rdma_listen ────────► CONNECT_REQUEST (a new id) ──► rdma_accept ──► ESTABLISHED
//	rdma_disconnect, the peer's DREQ ──► DISCONNECTED

// librdmacm's numbers.
const (
	evAddrResolved   = 0
	evAddrError      = 1
	evRouteResolved  = 2
	evConnectRequest = 4
	evConnectError   = 6
	evUnreachable    = 7
	evRejected       = 8
	evEstablished    = 9
	evDisconnected   = 10
	evMulticastJoin  = 12

	psTCP = 0x0106
	psUDP = 0x0111
)

type cmChannel struct {
	fd int // the pipe's write end
	mu sync.Mutex
	q  []C.struct_srn_cm_event
}

func (ch *cmChannel) post(ev C.struct_srn_cm_event) {
	ch.mu.Lock()
	ch.q = append(ch.q, ev)
	ch.mu.Unlock()
	unix.Write(ch.fd, []byte{1})
}

type cmID struct {
	h        int32
	ps       int
	mu       sync.Mutex
	ch       *cmChannel
	cookie   uint64
	devs     []*device // the devices it holds a reference to (a wildcard listener: every one)
	dev      *device   // the device it is on
	src, dst netip.AddrPort
	ls       []*cm.Listener
	req      *cm.Request
	conn     *cm.Conn
	ended    bool          // DISCONNECTED reported
	closing  chan struct{} // closed when the disconnect (DREQ, DREP) is over
	ctx      context.Context
	cancel   context.CancelFunc
}

var (
	cmChannels table[cmChannel]
	cmIDs      table[cmID]
)

//export srn_cm_channel
func srn_cm_channel(fd C.int) C.int { return C.int(cmChannels.put(&cmChannel{fd: int(fd)})) }

//export srn_cm_close_channel
func srn_cm_close_channel(h C.int) C.int {
	if cmChannels.get(h) == nil {
		return -C.int(unix.EINVAL)
	}
	cmChannels.del(h)
	return 0
}

// srn_cm_get_event takes the channel's oldest event (-EAGAIN: none).
//
//export srn_cm_get_event
func srn_cm_get_event(h C.int, ev *C.struct_srn_cm_event) C.int {
	ch := cmChannels.get(h)
	if ch == nil {
		return -C.int(unix.EINVAL)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.q) == 0 {
		return -C.int(unix.EAGAIN)
	}
	*ev = ch.q[0]
	ch.q = ch.q[1:]
	return 0
}

//export srn_cm_create_id
func srn_cm_create_id(ch C.int, ps C.int, cookie C.uint64_t) C.int {
	c := cmChannels.get(ch)
	if c == nil || ps != psTCP && ps != psUDP {
		setLastError(fmt.Sprintf("port space %#x: softrnic has RDMA_PS_TCP and RDMA_PS_UDP", int(ps)))
		return -C.int(unix.EPROTONOSUPPORT)
	}
	ctx, cancel := context.WithCancel(context.Background())
	id := &cmID{ps: int(ps), ch: c, cookie: uint64(cookie), ctx: ctx, cancel: cancel}
	id.h = cmIDs.put(id)
	return C.int(id.h)
}

// srn_cm_migrate moves the id's later events to another channel.
//
//export srn_cm_migrate
func srn_cm_migrate(h C.int, ch C.int, cookie C.uint64_t) C.int {
	id, c := cmIDs.get(h), cmChannels.get(ch)
	if id == nil || c == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	id.ch, id.cookie = c, uint64(cookie)
	id.mu.Unlock()
	return 0
}

//export srn_cm_destroy_id
func srn_cm_destroy_id(h C.int) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	ls, conn, req, devs, closing := id.ls, id.conn, id.req, id.devs, id.closing
	id.ls, id.conn, id.req, id.devs, id.ended = nil, nil, nil, nil, true
	id.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	// A connection's end is over before its id goes: the DREQ sent (a
	// program that did not disconnect gets one sent now) and answered,
	// or its retries spent. The kernel's CM finishes it after the
	// process; here the NIC ends with the process, and a peer that never
	// got the DREQ would wait for it (perftest -R's client does).
	if conn != nil && closing == nil {
		closing = make(chan struct{})
		go func() {
			conn.Close()
			close(closing)
		}()
	}
	if closing != nil {
		select {
		case <-closing:
		case <-time.After(disconnectWait):
		}
	}
	id.cancel()
	if req != nil && conn == nil {
		req.Reject(nil)
	}
	cmIDs.del(h)
	for _, d := range devs {
		releaseDevice(d)
	}
	return 0
}

// event is an event of the id, its addresses and device filled in.
func (id *cmID) event(kind int, status int) C.struct_srn_cm_event {
	ev := C.struct_srn_cm_event{event: C.uint32_t(kind), status: C.int32_t(status), id: C.int32_t(id.h), listen_id: -1, cookie: C.uint64_t(id.cookie)}
	if id.dev != nil {
		copyCString(&ev.netdev[0], C.SRN_NAME_LEN, id.dev.nd.Name)
	}
	putAddr(&ev.src, id.src.Addr())
	putAddr(&ev.dst, id.dst.Addr())
	ev.src_port, ev.dst_port = C.uint16_t(id.src.Port()), C.uint16_t(id.dst.Port())
	return ev
}

func (id *cmID) post(ev C.struct_srn_cm_event) {
	id.mu.Lock()
	ch := id.ch
	id.mu.Unlock()
	ch.post(ev)
}

func putAddr(dst *[16]C.uint8_t, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	b := a.As16()
	for i := range b {
		dst[i] = C.uint8_t(b[i])
	}
}

func setPrivate(ev *C.struct_srn_cm_event, p []byte) {
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev.private_data[0])), C.SRN_CM_PRIVATE), p)
	ev.private_len = C.uint32_t(n)
}

func addrOf(b *C.uint8_t) netip.Addr {
	var a [16]byte
	copy(a[:], unsafe.Slice((*byte)(unsafe.Pointer(b)), 16))
	return netip.AddrFrom16(a).Unmap()
}

// acquireDevice opens (or takes another reference to) the device on a
// netdev, as ibv_open_device does.
func acquireDevice(name string) (*device, error) {
	devices.Lock()
	defer devices.Unlock()
	if devices.byName == nil {
		devices.byName = map[string]int32{}
	}
	if h, ok := devices.byName[name]; ok {
		d := devices.t.get(C.int(h))
		d.refs++
		return d, nil
	}
	d, err := openDevice(name)
	if err != nil {
		return nil, err
	}
	d.refs = 1
	d.h = devices.t.put(d)
	devices.byName[name] = d.h
	return d, nil
}

func releaseDevice(d *device) { srn_close(C.int(d.h)) }

// agent is the device's connection manager, started at its first use.
func (d *device) agent() (*cm.Agent, error) {
	d.cmMu.Lock()
	defer d.cmMu.Unlock()
	if d.cm != nil {
		return d.cm, nil
	}
	a, err := cm.NewAgent(d.dev, d.ip, cm.Config{Resolve: func(ctx context.Context, ip netip.Addr) (wire.MAC, error) {
		hop, err := d.nd.Resolve(ctx, ip)
		return hop.MAC, err
	}})
	if err != nil {
		return nil, err
	}
	d.cm = a
	return a, nil
}

// netdevFor finds the configured netdev that has address ip (or, with an
// invalid ip, reaches dst by the kernel's routes).
func netdevFor(ip, dst netip.Addr) (string, error) {
	names, err := netdevNames()
	if err != nil {
		return "", err
	}
	if ip.IsValid() && !ip.IsUnspecified() {
		for _, n := range names {
			ifi, err := net.InterfaceByName(n)
			if err != nil {
				continue
			}
			addrs, _ := ifi.Addrs()
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ip {
					return n, nil
				}
			}
		}
		return "", fmt.Errorf("%w: %s is no address of a softrnic netdev (%v)", unix.EADDRNOTAVAIL, ip, names)
	}
	if len(names) == 1 || !dst.IsValid() {
		if len(names) == 0 {
			return "", fmt.Errorf("%w: no netdev for softrnic (SOFTRNIC_NETDEV)", unix.ENODEV)
		}
		return names[0], nil
	}
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err == nil && len(routes) > 0 {
		if l, err := netlink.LinkByIndex(routes[0].LinkIndex); err == nil {
			for _, n := range names {
				if n == l.Attrs().Name {
					return n, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%w: no softrnic netdev (%v) routes to %s", unix.EHOSTUNREACH, names, dst)
}

// srn_cm_bind binds the id to a local address (all zero: any) and port,
// and writes the netdev it is on (empty for any).
//
//export srn_cm_bind
func srn_cm_bind(h C.int, addr *C.uint8_t, port C.uint16_t, netdevOut *C.char) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	ip := addrOf(addr)
	*netdevOut = 0
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.src.IsValid() && id.src.Port() != 0 || len(id.devs) > 0 {
		return -C.int(unix.EINVAL) // bound already
	}
	if !ip.IsUnspecified() {
		name, err := netdevFor(ip, netip.Addr{})
		if err != nil {
			return errno(err)
		}
		d, err := acquireDevice(name)
		if err != nil {
			return errno(err)
		}
		id.devs, id.dev = []*device{d}, d
		copyCString(netdevOut, C.SRN_NAME_LEN, name)
	}
	id.src = netip.AddrPortFrom(ip, uint16(port))
	return 0
}

// srn_cm_resolve_addr finds the device and route to dst (and src's
// device, if given): ADDR_RESOLVED, or ADDR_ERROR with -errno.
//
//export srn_cm_resolve_addr
func srn_cm_resolve_addr(h C.int, src, dst *C.uint8_t, port C.uint16_t, timeoutMS C.int) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	s, d := addrOf(src), addrOf(dst)
	if d.IsUnspecified() || !d.IsValid() || d.Is6() && d.IsMulticast() {
		setLastError(fmt.Sprintf("destination %s: softrnic's rdma_cm takes a unicast address or an IPv4 group", d))
		return -C.int(unix.EAFNOSUPPORT)
	}
	id.mu.Lock()
	bound := id.dev
	if !s.IsValid() || s.IsUnspecified() {
		s = id.src.Addr()
	}
	id.dst = netip.AddrPortFrom(d, uint16(port))
	id.mu.Unlock()
	tmo := time.Duration(timeoutMS) * time.Millisecond
	if tmo <= 0 {
		tmo = 2 * time.Second
	}
	go func() {
		fail := func(err error) {
			setLastError(err.Error())
			id.post(id.event(evAddrError, int(errno(err))))
		}
		dev := bound
		if dev == nil {
			name, err := netdevFor(s, d)
			if err != nil {
				fail(err)
				return
			}
			if dev, err = acquireDevice(name); err != nil {
				fail(err)
				return
			}
			id.mu.Lock()
			id.devs, id.dev = append(id.devs, dev), dev
			id.mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(id.ctx, tmo)
		defer cancel()
		if d.IsMulticast() {
			// A group to join (rdma_join_multicast): no neighbour to
			// ask; the datagrams go to the group's MAC.
		} else if _, err := dev.nd.Resolve(ctx, d); err != nil {
			fail(fmt.Errorf("%w: %s unreachable from %s: %v", unix.EHOSTUNREACH, d, dev.nd.Name, err))
			return
		}
		id.mu.Lock()
		if !id.src.Addr().IsValid() || id.src.Addr().IsUnspecified() {
			id.src = netip.AddrPortFrom(dev.dev.NIC().Source(d), id.src.Port())
		}
		id.mu.Unlock()
		id.post(id.event(evAddrResolved, 0))
	}()
	return 0
}

// srn_cm_join posts id's RDMA_CM_EVENT_MULTICAST_JOIN for the IPv4
// group (IPv4-mapped; rdma_join_multicast): its datagrams go to the
// multicast QPN with librdmacm's UDP Q_Key, and the C side attaches the
// id's QP. The id must have its device (bound, or its address resolved).
//
//export srn_cm_join
func srn_cm_join(h C.int, group *C.uint8_t) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	g := addrOf(group)
	if !g.Is4() || !g.IsMulticast() {
		setLastError(fmt.Sprintf("%s is not an IPv4 multicast address", g))
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	dev := id.dev
	id.mu.Unlock()
	if dev == nil {
		setLastError("rdma_join_multicast: the id has no device (bind or resolve an address first)")
		return -C.int(unix.EINVAL)
	}
	ev := id.event(evMulticastJoin, 0)
	putAddr(&ev.dst, g)
	ev.ud_qp_num, ev.ud_qkey = 0xFFFFFF, rdmaUDPQKey
	id.post(ev)
	return 0
}

// rdmaUDPQKey is the Q_Key librdmacm gives UD ids of the UDP port space
// (RDMA_UDP_QKEY), a multicast group's too.
const rdmaUDPQKey = 0x01234567

// srn_cm_resolve_route: on RoCE the route is the address's: at once.
//
//export srn_cm_resolve_route
func srn_cm_resolve_route(h C.int) C.int {
	id := cmIDs.get(h)
	if id == nil || id.dev == nil {
		return -C.int(unix.EINVAL)
	}
	id.post(id.event(evRouteResolved, 0))
	return 0
}

// srn_cm_listen takes the bound port's requests (on every device for a
// wildcard address): each becomes a new id and a CONNECT_REQUEST event.
//
//export srn_cm_listen
func srn_cm_listen(h C.int) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.src.Port() == 0 || len(id.ls) > 0 {
		setLastError("rdma_listen: bind the id to a port first")
		return -C.int(unix.EINVAL)
	}
	devs := id.devs
	if len(devs) == 0 { // a wildcard address: every device
		names, err := netdevNames()
		if err != nil {
			return errno(err)
		}
		for _, n := range names {
			d, err := acquireDevice(n)
			if err != nil {
				return errno(err)
			}
			devs = append(devs, d)
		}
		id.devs = devs
	}
	for _, d := range devs {
		a, err := d.agent()
		if err != nil {
			return errno(err)
		}
		addr := fmt.Sprintf(":%d", id.src.Port())
		var l *cm.Listener
		if id.ps == psUDP {
			l, err = a.ListenUD(addr)
		} else {
			l, err = a.ListenRequests(addr)
		}
		if err != nil {
			setLastError(err.Error())
			return -C.int(unix.EADDRINUSE)
		}
		id.ls = append(id.ls, l)
		go id.serveRequests(d, l)
	}
	return 0
}

// serveRequests turns a listener's requests into new ids and
// CONNECT_REQUEST events on the listener's channel.
func (id *cmID) serveRequests(d *device, l *cm.Listener) {
	for {
		r, err := l.Request(id.ctx)
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		id.mu.Lock()
		child := &cmID{ps: id.ps, ch: id.ch, dev: d, src: netip.AddrPortFrom(d.ip, r.Port), dst: netip.AddrPortFrom(r.Peer, r.SrcPort),
			req: r, ctx: ctx, cancel: cancel}
		lcookie := id.cookie
		id.mu.Unlock()
		devices.Lock()
		d.refs++ // the new id's
		devices.Unlock()
		child.devs = []*device{d}
		child.h = cmIDs.put(child)
		ev := child.event(evConnectRequest, 0)
		ev.listen_id, ev.listen_cookie = C.int32_t(id.h), C.uint64_t(lcookie)
		setPrivate(&ev, r.Private)
		ev.responder_resources, ev.initiator_depth = C.uint8_t(r.ResponderResources), C.uint8_t(r.InitiatorDepth)
		ev.retry_count, ev.rnr_retry_count, ev.qp_num = C.uint8_t(r.RetryCount), C.uint8_t(r.RNRRetryCount), C.uint32_t(r.PeerQPN)
		if r.SRQ {
			ev.srq = 1
		}
		id.post(ev)
	}
}

// qpFor finds the QP a connection runs on: the id's QP's handle, or the
// QP numbered qpn on the device (a program's own QP).
func qpFor(d *device, p *C.struct_srn_cm_param) *qp {
	if p.qp >= 0 {
		if q := qps.get(C.int(p.qp)); q != nil && q.dev == d {
			return q
		}
		return nil
	}
	qps.mu.RLock()
	defer qps.mu.RUnlock()
	for _, q := range qps.objs {
		if q != nil && q.dev == d && q.qp.Num == uint32(p.qp_num) {
			return q
		}
	}
	return nil
}

func privateOf(p *C.struct_srn_cm_param) []byte {
	if p.private_len == 0 || p.private_data == nil {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(p.private_data), int(p.private_len))...)
}

// srn_cm_connect connects the id's QP to the resolved peer (a UD id:
// resolves the peer's service): ESTABLISHED, REJECTED (status: the
// reason), UNREACHABLE or CONNECT_ERROR.
//
//export srn_cm_connect
func srn_cm_connect(h C.int, p *C.struct_srn_cm_param) C.int {
	id := cmIDs.get(h)
	if id == nil || id.dev == nil || !id.dst.IsValid() {
		setLastError("rdma_connect: resolve the address and route first")
		return -C.int(unix.EINVAL)
	}
	a, err := id.dev.agent()
	if err != nil {
		return errno(err)
	}
	private := privateOf(p)
	addr := id.dst.String()
	if id.ps == psUDP {
		go func() {
			peer, err := a.ResolveUD(id.ctx, addr, private)
			var rej *cm.RejectError
			if errors.As(err, &rej) { // as the kernel's CM reports a SIDR_REP that is not valid
				setLastError(err.Error())
				ev := id.event(evUnreachable, int(rej.Reason))
				setPrivate(&ev, rej.Private)
				id.post(ev)
				return
			}
			if err != nil {
				id.post(id.failure(err))
				return
			}
			ev := id.event(evEstablished, 0)
			setPrivate(&ev, peer.Private)
			ev.ud_qp_num, ev.ud_qkey = C.uint32_t(peer.QPN), C.uint32_t(peer.QKey)
			id.post(ev)
		}()
		return 0
	}
	q := qpFor(id.dev, p)
	if q == nil {
		setLastError("rdma_connect: no QP of this device for the connection (rdma_create_qp, or conn_param's qp_num)")
		return -C.int(unix.EINVAL)
	}
	// A port without a listener is asked again for a second before
	// REJECTED: perftest 4.5's -R client connects its test's QPs while a
	// slow server is between its two listeners, and its own retry of a
	// REJ destroys its ids twice.
	qc := cm.QPConfig{Existing: q.qp, Private: private, ResponderResources: uint8(p.responder_resources),
		InitiatorDepth: uint8(p.initiator_depth), RetryCount: uint8(p.retry_count), RNRRetryCount: uint8(p.rnr_retry_count),
		ServiceWait: time.Second, TrafficClass: uint8(p.tos)}
	go func() {
		conn, err := a.Dial(id.ctx, addr, qc)
		if err != nil {
			id.post(id.failure(err))
			return
		}
		id.established(conn, conn.Private)
	}()
	return 0
}

// failure is the event of a failed connect.
func (id *cmID) failure(err error) C.struct_srn_cm_event {
	setLastError(err.Error())
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		ev := id.event(evRejected, int(rej.Reason))
		setPrivate(&ev, rej.Private)
		return ev
	case errors.Is(err, cm.ErrTimeout):
		return id.event(evUnreachable, -int(unix.ETIMEDOUT))
	case errors.Is(err, context.Canceled):
		return id.event(evConnectError, -int(unix.ECANCELED))
	}
	return id.event(evConnectError, int(errno(err)))
}

// established reports a connection and, later, its end.
func (id *cmID) established(conn *cm.Conn, private []byte) {
	id.mu.Lock()
	id.conn = conn
	id.mu.Unlock()
	ev := id.event(evEstablished, 0)
	setPrivate(&ev, private)
	ev.responder_resources, ev.initiator_depth = C.uint8_t(conn.PeerResponderResources), C.uint8_t(conn.PeerInitiatorDepth)
	ev.qp_num = C.uint32_t(conn.PeerQPN)
	if conn.PeerSRQ {
		ev.srq = 1
	}
	id.post(ev)
	go func() {
		select {
		case <-conn.Done():
		case <-id.ctx.Done():
			return
		}
		id.disconnected()
	}()
}

// disconnected reports the connection's end, once.
func (id *cmID) disconnected() {
	id.mu.Lock()
	ended := id.ended
	id.ended = true
	id.mu.Unlock()
	if !ended {
		id.post(id.event(evDisconnected, 0))
	}
}

// srn_cm_accept accepts the id's request with its QP (RC: ESTABLISHED
// when the peer's RTU comes; UD: the SIDR_REP names the QP, and no event
// follows).
//
//export srn_cm_accept
func srn_cm_accept(h C.int, p *C.struct_srn_cm_param) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	r := id.req
	id.mu.Unlock()
	if r == nil {
		setLastError("rdma_accept: the id has no connection request")
		return -C.int(unix.EINVAL)
	}
	private := privateOf(p)
	if r.UD {
		qpn := uint32(p.qp_num)
		if q := qpFor(id.dev, p); q != nil {
			qpn = q.qp.Num
		}
		return errno(r.AcceptUD(qpn, uint32(p.qkey), private))
	}
	q := qpFor(id.dev, p)
	if q == nil {
		setLastError("rdma_accept: no QP of this device for the connection (rdma_create_qp, or conn_param's qp_num)")
		return -C.int(unix.EINVAL)
	}
	qc := cm.QPConfig{Existing: q.qp, Private: private, ResponderResources: uint8(p.responder_resources),
		InitiatorDepth: uint8(p.initiator_depth), RNRRetryCount: uint8(p.rnr_retry_count)}
	go func() {
		conn, err := r.Accept(id.ctx, qc)
		if err != nil {
			id.post(id.failure(err))
			return
		}
		id.established(conn, nil)
	}()
	return 0
}

//export srn_cm_reject
func srn_cm_reject(h C.int, private unsafe.Pointer, n C.int) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	r := id.req
	id.req = nil
	id.mu.Unlock()
	if r == nil {
		return -C.int(unix.EINVAL)
	}
	var p []byte
	if n > 0 && private != nil {
		p = append(p, unsafe.Slice((*byte)(private), int(n))...)
	}
	return errno(r.Reject(p))
}

// srn_cm_disconnect disconnects (DREQ, the QP to ERR): DISCONNECTED
// follows, once, whoever ended the connection.
//
//export srn_cm_disconnect
func srn_cm_disconnect(h C.int) C.int {
	id := cmIDs.get(h)
	if id == nil {
		return -C.int(unix.EINVAL)
	}
	id.mu.Lock()
	conn, first := id.conn, id.closing == nil
	if conn != nil && first {
		id.closing = make(chan struct{})
	}
	closing := id.closing
	id.mu.Unlock()
	if conn == nil {
		setLastError("rdma_disconnect: the id is not connected")
		return -C.int(unix.EINVAL)
	}
	if first { // a second rdma_disconnect finds the first under way
		go func() {
			conn.Close()
			close(closing)
			id.disconnected()
		}()
	}
	return 0
}

// disconnectWait bounds how long rdma_destroy_id waits for its
// connection's disconnect: a peer that answers does in a round trip; one
// that does not, the DREQ's retries give up on later.
const disconnectWait = 3 * time.Second
