// Package udpport is the kernel-UDP port: RoCEv2 over an ordinary UDP
// socket on port 4791 with batched recvmmsg/sendmmsg, for hosts where
// AF_XDP or root is not available. It presents the same frames as the other
// ports: received datagrams get an Ethernet, IP and UDP header written in
// front of them, in the same buffer.
//
// The kernel owns the real IP header, so the port makes what it sends match
// what the kernel will put on the wire (source address, IPv4 ID 0 as Linux
// uses for unconnected DF datagrams, the UDP source port of the socket it
// goes from) and fixes the ICRC when it had to change a field; on receive
// it cannot know the sender's IPv4 ID, so frames carry NoICRC and the
// engine skips the ICRC.
//
// Frames are received on port 4791 and sent from one of srcSockets
// sockets, each bound to a source port of its own, chosen by the frame's
// UDP source port (the QP's flow, as rxe and the xsk port give each QP
// pair its own): a QP's packets keep one source port, so that ECMP in a
// real network keeps them on one path, and different QPs spread over
// paths. Each datagram leaves with its frame's TOS (traffic class): the
// ECN field the NIC chose (datapath.NICConfig.ECN).
package udpport

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
)

// Config sets up a port.
type Config struct {
	Local       netip.Addr // address to bind; its family is the port's
	LocalMAC    wire.MAC   // destination MAC written into received frames
	Buffers     int        // frame buffers, shared by RX and TX (default 1024)
	Batch       int        // datagrams per system call at most (default 64)
	MaxFrameLen int        // default 9216
}

// Port is a datapath.Port over a UDP socket.
type Port struct {
	fd      int                // port 4791: receives, and sends nothing
	src     [srcSockets]int    // the sockets frames are sent from
	srcPort [srcSockets]uint16 // their source ports
	srcTOS  [srcSockets]int    // the TOS (traffic class) each sends with: the frames', as they change; -1 before the first
	cfg     Config
	hdrLen  int // Ethernet, IP and UDP header bytes written before a datagram
	pool    *datapath.Pool
	rx, tx  batch
	txSock  []uint8  // per frame of a Send batch: the socket it goes from
	txTOS   []uint8  // and its TOS
	rxBufs  []uint32 // each receive slot's buffer, kept prepared across calls (rxHas)
	rxHas   []bool
	rxHeld  int            // slots holding a buffer
	pollfd  [2]unix.PollFd // the socket and the wake eventfd
	wakefd  int
	stats   datapath.PortStats
	closed  bool
}

var _ datapath.Port = (*Port)(nil)

// srcSockets is how many source ports a port sends from.
const srcSockets = 8

// Open binds a UDP socket to cfg.Local port 4791 in the calling thread's
// network namespace.
func Open(cfg Config) (*Port, error) {
	if cfg.Buffers == 0 {
		cfg.Buffers = 1024
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
	}
	if cfg.MaxFrameLen == 0 {
		cfg.MaxFrameLen = 9216
	}
	if !cfg.Local.IsValid() {
		return nil, fmt.Errorf("udpport: no local address")
	}
	cfg.Local = cfg.Local.Unmap()
	family, hdrLen := unix.AF_INET, wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen
	if cfg.Local.Is6() {
		family, hdrLen = unix.AF_INET6, wire.EthernetLen+wire.IPv6Len+wire.UDPLen
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udpport: socket: %w", err)
	}
	p := &Port{fd: fd, cfg: cfg, hdrLen: hdrLen, wakefd: -1}
	for i := range p.src {
		p.src[i] = -1
	}
	if err := p.setup(family); err != nil {
		p.closeSockets()
		return nil, err
	}
	p.pool = datapath.NewPool(cfg.Buffers, cfg.MaxFrameLen)
	p.rx, p.tx = newBatch(cfg.Batch), newBatch(cfg.Batch)
	p.txSock = make([]uint8, cfg.Batch)
	p.txTOS = make([]uint8, cfg.Batch)
	for i := range p.srcTOS {
		p.srcTOS[i] = -1
	}
	p.rxBufs = make([]uint32, cfg.Batch)
	p.rxHas = make([]bool, cfg.Batch)
	if p.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("udpport: eventfd: %w", err)
	}
	p.pollfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	p.pollfd[1] = unix.PollFd{Fd: int32(p.wakefd), Events: unix.POLLIN}
	return p, nil
}

func (p *Port) setup(family int) error {
	// Each datagram's TOS (traffic class) comes with it, so that the
	// frame the NIC sees carries the ECN field the network set (a CE
	// mark asks for a CNP).
	if family == unix.AF_INET {
		unix.SetsockoptInt(p.fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	} else {
		unix.SetsockoptInt(p.fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
	}
	if err := p.bind(p.fd, family, wire.RoCEv2Port); err != nil {
		return err
	}
	for i := range p.src {
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
		if err != nil {
			return fmt.Errorf("udpport: socket: %w", err)
		}
		p.src[i] = fd
		if err := p.bind(fd, family, 0); err != nil {
			return err
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return fmt.Errorf("udpport: getsockname: %w", err)
		}
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			p.srcPort[i] = uint16(a.Port)
		case *unix.SockaddrInet6:
			p.srcPort[i] = uint16(a.Port)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) // it receives nothing RoCEv2 peers send
	}
	return nil
}

// bind sets a socket up (DF, buffers) and binds it to the local
// address and port (0: an ephemeral one). Its TOS follows the frames it
// sends (setTOS).
func (p *Port) bind(fd, family, port int) error {
	// DF on every datagram: RoCEv2 is never fragmented, and Linux then sends
	// unconnected datagrams with IPv4 ID 0, which the ICRC covers.
	if family == unix.AF_INET {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("udpport: DF: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("udpport: DF: %w", err)
		}
	}
	for _, opt := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		// Beyond net.core.[rw]mem_max where allowed (CAP_NET_ADMIN), else
		// as far as it goes: best effort.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[0], 4<<20) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[1], 4<<20)
		}
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: port, Addr: p.cfg.Local.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: port, Addr: p.cfg.Local.As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("udpport: bind %v port %d: %w", p.cfg.Local, port, err)
	}
	return nil
}

// closeSockets closes every socket the port opened.
func (p *Port) closeSockets() error {
	for _, fd := range p.src {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return unix.Close(p.fd)
}

// Flush implements datapath.Port: Send writes at once, nothing waits.
func (p *Port) Flush() {}

// RecvCapacity implements datapath.RecvCapacitor: the frames the
// receiving socket's buffer holds, each taken as twice the largest frame
// (what the kernel charges a datagram is its buffer's size, about twice
// its length), at least 64.
func (p *Port) RecvCapacity() int {
	n, err := unix.GetsockoptInt(p.fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return 64
	}
	return max(64, n/(2*p.cfg.MaxFrameLen))
}

// MaxFrameLen implements datapath.Port.
func (p *Port) MaxFrameLen() int { return p.cfg.MaxFrameLen }

// Recv implements datapath.Port.
func (p *Port) Recv(frames []datapath.Frame) (int, error) {
	if p.closed {
		return 0, datapath.ErrClosed
	}
	// Each slot keeps its buffer, set up for recvmmsg, until a datagram
	// fills it: a poll that finds nothing costs the system call alone.
	k := 0
	for k < min(len(frames), p.cfg.Batch) {
		if !p.rxHas[k] {
			h, ok := p.pool.Take()
			if !ok {
				break
			}
			p.rxBufs[k], p.rxHas[k] = h, true
			p.rxHeld++
			p.rx.setRecv(k, p.pool.Buf(h)[p.hdrLen:])
		}
		k++
	}
	m, err := 0, error(nil)
	if k > 0 {
		m, err = recvmmsg(p.fd, &p.rx, k)
	}
	if err != nil {
		return 0, fmt.Errorf("udpport: recvmmsg: %w", err)
	}
	for i := range m { // filled: their buffers leave the slots
		p.rxHas[i] = false
	}
	p.rxHeld -= m
	n := 0
	for i := range m {
		h := p.rxBufs[i]
		dlen := int(p.rx.hdrs[i].Len)
		if p.rx.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			p.stats.RxDropTooLong.Add(1)
			p.pool.Return(h)
			continue
		}
		frame := p.pool.Buf(h)[:p.hdrLen+dlen]
		p.writeHeaders(frame, p.rx.addr(i), p.rx.tos(i))
		if err := wire.Classify(frame); err != nil {
			p.stats.CountDrop(err)
			p.pool.Return(h)
			continue
		}
		frames[n] = datapath.Frame{Data: frame, Handle: uint64(h), NoICRC: true}
		n++
		p.stats.RxFrames.Add(1)
		p.stats.RxBytes.Add(uint64(len(frame)))
	}
	return n, nil
}

// writeHeaders writes the Ethernet, IP and UDP headers of a received
// datagram in front of it, as far as the socket can know them: its
// source, and the TOS (traffic class) it came with.
func (p *Port) writeHeaders(frame []byte, from netip.AddrPort, tos uint8) {
	eth := wire.Ethernet(frame)
	eth.SetDst(p.cfg.LocalMAC)
	eth.SetSrc(wire.MAC{})
	var udpOff int
	if p.cfg.Local.Is4() {
		eth.SetEtherType(wire.EtherTypeIPv4)
		f := wire.IPv4Fields{TOS: tos, Flags: wire.IPv4FlagDF, TTL: 64, Src: from.Addr().Unmap(), Dst: p.cfg.Local}
		f.Encode(frame[wire.EthernetLen:], len(frame)-wire.EthernetLen)
		udpOff = wire.EthernetLen + wire.IPv4MinLen
	} else {
		eth.SetEtherType(wire.EtherTypeIPv6)
		f := wire.IPv6Fields{TrafficClass: tos, HopLimit: 64, Src: from.Addr(), Dst: p.cfg.Local}
		f.Encode(frame[wire.EthernetLen:], len(frame)-wire.EthernetLen-wire.IPv6Len)
		udpOff = wire.EthernetLen + wire.IPv6Len
	}
	u := wire.UDP(frame[udpOff:])
	u.SetSrcPort(from.Port())
	u.SetDstPort(wire.RoCEv2Port)
	u.SetLength(uint16(len(frame) - udpOff))
	u.SetChecksum(0)
}

// Release implements datapath.Port.
func (p *Port) Release(frames []datapath.Frame) { p.pool.Put(frames) }

// Free implements datapath.Port.
func (p *Port) Free(frames []datapath.Frame) { p.pool.Put(frames) }

// Alloc implements datapath.Port.
func (p *Port) Alloc(frames []datapath.Frame) int { return p.pool.Get(frames) }

// Send implements datapath.Port. Each frame's UDP payload is sent to the
// frame's destination address, port 4791. It stops early, without error,
// when the socket's buffer is full; a frame that is not a RoCEv2 frame
// ends the batch with an error.
func (p *Port) Send(frames []datapath.Frame) (int, error) {
	if p.closed {
		return 0, datapath.ErrClosed
	}
	k := min(len(frames), p.cfg.Batch)
	var err error
	sock := p.txSock // each frame's source socket
	tos := p.txTOS   // and its TOS
	for i := range k {
		var pkt wire.Packet
		if perr := wire.ParseNoICRC(frames[i].Data, &pkt); perr != nil || pkt.IPv6 != p.cfg.Local.Is6() {
			if len(frames[i].Data) > p.cfg.MaxFrameLen {
				p.stats.TxDropTooLong.Add(1)
			}
			err = fmt.Errorf("udpport: frame %d: %v", i, perr)
			k = i
			break
		}
		sock[i] = uint8(p.sockFor(pkt.UDP().SrcPort()))
		tos[i] = tosOf(&pkt)
		p.tx.set(i, pkt.Frame[pkt.BTHOff:])
		p.tx.setAddr(i, netip.AddrPortFrom(p.normalize(&pkt, p.srcPort[sock[i]]), wire.RoCEv2Port))
	}
	// Runs of frames from one socket, in order: a QP's frames keep theirs.
	sent := 0
	for sent < k {
		run := sent + 1
		for run < k && sock[run] == sock[sent] && tos[run] == tos[sent] {
			run++
		}
		p.setTOS(int(sock[sent]), tos[sent])
		n, serr := sendmmsg(p.src[sock[sent]], &p.tx, sent, run-sent)
		sent += n
		if serr != nil && err == nil {
			err = fmt.Errorf("udpport: sendmmsg: %w", serr)
		}
		if n < run-(sent-n) || serr != nil {
			break // the socket's buffer is full: the rest waits
		}
	}
	for i := range frames[:sent] {
		p.stats.TxFrames.Add(1)
		p.stats.TxBytes.Add(uint64(len(frames[i].Data)))
	}
	p.pool.Put(frames[:sent])
	return sent, err
}

// sockFor is the socket a frame with UDP source port port goes from: the
// one bound to it (a frame rewritten already), or one chosen by the port
// (the QP's flow).
func (p *Port) sockFor(port uint16) int {
	for i, sp := range p.srcPort {
		if sp == port {
			return i
		}
	}
	return int(port % srcSockets)
}

// Rewrite implements capture.Rewriter: each frame's headers become what
// Send will put on the wire (normalize), so that a capture records that.
// Send does it again, finding nothing to change.
func (p *Port) Rewrite(frames []datapath.Frame) {
	for i := range frames {
		var pkt wire.Packet
		if wire.ParseNoICRC(frames[i].Data, &pkt) == nil && pkt.IPv6 == p.cfg.Local.Is6() {
			p.normalize(&pkt, p.srcPort[p.sockFor(pkt.UDP().SrcPort())])
		}
	}
}

// tosOf is a frame's IPv4 TOS or IPv6 traffic class: the socket sends
// with it (setTOS), so the wire carries the ECN field the NIC chose.
func tosOf(pkt *wire.Packet) uint8 {
	if ip := pkt.IPv4Header(); ip != nil {
		return ip.TOS()
	}
	return pkt.IPv6Header().TrafficClass()
}

// setTOS makes source socket i send with TOS tos (best effort).
func (p *Port) setTOS(i int, tos uint8) {
	if p.srcTOS[i] == int(tos) {
		return
	}
	p.srcTOS[i] = int(tos)
	if p.cfg.Local.Is6() {
		unix.SetsockoptInt(p.src[i], unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int(tos))
	} else {
		unix.SetsockoptInt(p.src[i], unix.IPPROTO_IP, unix.IP_TOS, int(tos))
	}
}

// normalize makes the packet's IP and UDP headers what the kernel will send
// (source address, IPv4 ID 0, source port srcPort; the TOS is the frame's,
// setTOS), fixing the ICRC if a field changed, and returns the destination
// address.
func (p *Port) normalize(pkt *wire.Packet, srcPort uint16) netip.Addr {
	changed := false
	var dst netip.Addr
	if ip := pkt.IPv4Header(); ip != nil {
		dst = ip.Dst()
		if ip.ID() != 0 || ip.Src() != p.cfg.Local {
			ip.SetID(0)
			ip.SetSrc(p.cfg.Local)
			ip.SetChecksum(ip.ComputeChecksum())
			changed = true
		}
	} else {
		ip := pkt.IPv6Header()
		dst = ip.Dst()
		if ip.Src() != p.cfg.Local {
			ip.SetSrc(p.cfg.Local)
			changed = true
		}
	}
	if u := pkt.UDP(); u.SrcPort() != srcPort {
		u.SetSrcPort(srcPort)
		changed = true
	}
	if changed {
		pkt.SetICRC()
	}
	return dst
}

// Wait implements datapath.Port.
func (p *Port) Wait(timeout time.Duration) error {
	if p.closed {
		return datapath.ErrClosed
	}
	ts := unix.NsecToTimespec(int64(timeout)) // ppoll: microsecond timeouts, unlike poll
	_, err := unix.Ppoll(p.pollfd[:], &ts, nil)
	if p.pollfd[1].Revents&unix.POLLIN != 0 {
		var b [8]byte
		unix.Read(p.wakefd, b[:])
	}
	if err == unix.EINTR {
		return nil
	}
	return err
}

// Wake implements datapath.Port.
func (p *Port) Wake() {
	one := [8]byte{1}
	unix.Write(p.wakefd, one[:])
}

// Stats implements datapath.Port.
func (p *Port) Stats() *datapath.PortStats { return &p.stats }

// Outstanding returns how many buffers are lent out.
func (p *Port) Outstanding() int { return p.pool.Lent() - p.rxHeld }

// Close implements datapath.Port.
func (p *Port) Close() error {
	if p.closed {
		return datapath.ErrClosed
	}
	p.closed = true
	unix.Close(p.wakefd)
	return p.closeSockets()
}
