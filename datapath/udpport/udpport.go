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
//
// Where the kernel has them (Linux 5.0 on), the port hands the kernel
// runs of frames in one message and takes them back the same way: UDP
// GSO on send (UDP_SEGMENT: consecutive frames of one flow and one size,
// the last possibly shorter, go as one message the kernel cuts into one
// datagram a frame, each still a whole RoCEv2 packet with its own BTH
// and ICRC) and UDP GRO on receive (UDP_GRO: datagrams of one flow the
// kernel coalesced arrive as one, cut back into frames here). The
// kernel's per-packet cost is then paid once a message. The kernel
// numbers the IPv4 IDs of a DF datagram's segments 0, 1, 2, ..., which
// the ICRC covers, so the frames of a message are given those IDs.
package udpport

import (
	"fmt"
	"net/netip"
	"os"
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
	// NoOffload sends every frame as a datagram of its own and receives
	// them one at a time: no UDP GSO or GRO (default: both, where the
	// kernel has them).
	NoOffload bool
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
	msgs    []message // a Send batch's messages
	gso     bool      // sending UDP GSO messages (until the kernel refuses one)
	gro     groRx     // coalesced datagrams received, being cut into frames (with UDP GRO)
	rxBufs  []uint32  // each receive slot's buffer, kept prepared across calls (rxHas)
	rxHas   []bool
	rxHeld  int            // slots holding a buffer
	pollfd  [2]unix.PollFd // the socket and the wake eventfd
	wakefd  int
	stats   datapath.PortStats
	closed  bool
}

var (
	_ datapath.Port            = (*Port)(nil)
	_ datapath.MulticastJoiner = (*Port)(nil)
)

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
	p.msgs = make([]message, cfg.Batch)
	if !cfg.NoOffload {
		p.gso = unix.SetsockoptInt(p.src[0], unix.SOL_UDP, unix.UDP_SEGMENT, 0) == nil // the kernel knows UDP_SEGMENT
		if unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil {
			p.gro = newGRORx(min(cfg.Batch, groSlots))
		}
	}
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

// JoinMulticast implements datapath.MulticastJoiner: the udp port takes
// no multicast (its socket is bound to the NIC's own address, which a
// datagram to a group does not reach); the xsk port does.
func (p *Port) JoinMulticast(group netip.Addr) error {
	return fmt.Errorf("udpport: multicast (%s) needs the xsk port: %w", group, unix.EOPNOTSUPP)
}

// LeaveMulticast implements datapath.MulticastJoiner.
func (p *Port) LeaveMulticast(netip.Addr) error { return nil }

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
	if p.gro.on() {
		return p.recvGRO(frames)
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
		tos, _ := p.rx.received(i)
		if p.deliver(&frames[n], h, p.hdrLen+dlen, p.rx.addr(i), tos, 0) {
			n++
		}
	}
	return n, nil
}

// deliver makes buffer h, holding a datagram after room for its headers
// (n bytes in all), a received frame: its headers written (writeHeaders),
// checked (a frame that is not RoCEv2 is counted and its buffer given
// back: false), counted.
func (p *Port) deliver(f *datapath.Frame, h uint32, n int, from netip.AddrPort, tos uint8, id uint16) bool {
	frame := p.pool.Buf(h)[:n]
	p.writeHeaders(frame, from, tos, id)
	if err := wire.Classify(frame); err != nil {
		p.stats.CountDrop(err)
		p.pool.Return(h)
		return false
	}
	*f = datapath.Frame{Data: frame, Handle: uint64(h), NoICRC: true}
	p.stats.RxFrames.Add(1)
	p.stats.RxBytes.Add(uint64(len(frame)))
	return true
}

// groSlots is how many coalesced datagrams a port with UDP GRO takes in
// one recvmmsg call, each into a buffer of groSlotLen bytes (what GRO
// coalesces at most).
const (
	groSlots   = 16
	groSlotLen = 1 << 16
)

// groRx holds the datagrams one recvmmsg call took with UDP GRO, each
// one or more frames' worth that Recv cuts into frames, as many as the
// caller and the buffer pool have room for; the rest wait for the next
// Recv.
type groRx struct {
	buf        []byte // slots of groSlotLen bytes
	slot       []groSlot
	next, have int // the slot being cut, and how many the last call filled
	dirty      int // slots from 0 the last call wrote to: to set up again
}

// groSlot is one received datagram being cut into frames.
type groSlot struct {
	off, end  int  // what is left of it in its buffer
	seg       int  // its segment size (each frame's; the last may be shorter)
	coalesced bool // more than one frame's worth
	from      netip.AddrPort
	tos       uint8
	id        uint16 // the IPv4 ID the next frame was sent with: its index in the sender's message
}

func newGRORx(n int) groRx {
	return groRx{buf: make([]byte, n*groSlotLen), slot: make([]groSlot, n), dirty: n}
}

func (g *groRx) on() bool { return len(g.slot) > 0 }

// recvGRO is Recv with UDP GRO: datagrams are received into the slots'
// buffers and copied out a frame at a time, each given its headers.
func (p *Port) recvGRO(frames []datapath.Frame) (int, error) {
	g := &p.gro
	n := 0
	for n < len(frames) {
		if g.next == g.have {
			// The slots the last call filled take a buffer again; the
			// others are still set up (recvmmsg wrote nothing to them).
			for i := range g.dirty {
				p.rx.setRecv(i, g.buf[i*groSlotLen:(i+1)*groSlotLen])
			}
			m, err := recvmmsg(p.fd, &p.rx, len(g.slot))
			g.dirty = m
			if err != nil {
				return n, fmt.Errorf("udpport: recvmmsg: %w", err)
			}
			g.next, g.have = 0, m
			if m == 0 {
				break
			}
			for i := range m {
				sl := &g.slot[i]
				tos, seg := p.rx.received(i)
				*sl = groSlot{off: i * groSlotLen, end: i*groSlotLen + int(p.rx.hdrs[i].Len), seg: seg, from: p.rx.addr(i), tos: tos}
				if p.rx.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
					p.stats.RxDropTooLong.Add(1)
					sl.off = sl.end
				}
				if sl.seg <= 0 || sl.seg >= sl.end-sl.off {
					sl.seg = sl.end - sl.off // one datagram, not coalesced
				} else {
					sl.coalesced = true
				}
			}
		}
		sl := &g.slot[g.next]
		if sl.off >= sl.end {
			g.next++
			continue
		}
		l := min(sl.seg, sl.end-sl.off)
		if p.hdrLen+l > p.cfg.MaxFrameLen {
			p.stats.RxDropTooLong.Add(1)
			sl.off += l
			sl.id++
			continue
		}
		h, ok := p.pool.Take()
		if !ok {
			break // the rest waits for buffers
		}
		copy(p.pool.Buf(h)[p.hdrLen:], g.buf[sl.off:sl.off+l])
		id := sl.id
		sl.off += l
		sl.id++
		if p.deliver(&frames[n], h, p.hdrLen+l, sl.from, sl.tos, id) {
			n++
			if sl.coalesced {
				p.stats.RxCoalesced.Add(1)
			}
		}
	}
	return n, nil
}

// writeHeaders writes the Ethernet, IP and UDP headers of a received
// datagram in front of it, as far as the socket can know them: its
// source, the TOS (traffic class) it came with, and the IPv4 ID it most
// likely had (its index in a coalesced datagram, as a sending port
// numbers the frames of a GSO message).
func (p *Port) writeHeaders(frame []byte, from netip.AddrPort, tos uint8, id uint16) {
	eth := wire.Ethernet(frame)
	eth.SetDst(p.cfg.LocalMAC)
	eth.SetSrc(wire.MAC{})
	var udpOff int
	if p.cfg.Local.Is4() {
		eth.SetEtherType(wire.EtherTypeIPv4)
		f := wire.IPv4Fields{TOS: tos, ID: id, Flags: wire.IPv4FlagDF, TTL: 64, Src: from.Addr().Unmap(), Dst: p.cfg.Local}
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
// frame's destination address, port 4791: consecutive frames of one flow
// and one size in one UDP GSO message where the kernel takes them. It
// stops early, without error, when the socket's buffer is full; a frame
// that is not a RoCEv2 frame ends the batch with an error.
func (p *Port) Send(frames []datapath.Frame) (int, error) {
	if p.closed {
		return 0, datapath.ErrClosed
	}
	k, msgs, badFrame := p.plan(frames)
	// Runs of messages from one socket, in order: a QP's frames keep theirs.
	var err error
	sent, m := 0, 0
	for m < msgs {
		run := m + 1
		for run < msgs && p.msgs[run].sock == p.msgs[m].sock && p.msgs[run].tos == p.msgs[m].tos {
			run++
		}
		p.setTOS(int(p.msgs[m].sock), p.msgs[m].tos)
		n, serr := sendmmsg(p.src[p.msgs[m].sock], &p.tx, m, run-m)
		for _, msg := range p.msgs[m : m+n] {
			sent += msg.frames
			if msg.frames > 1 {
				p.stats.TxSegmented.Add(uint64(msg.frames))
			}
		}
		m += n
		if serr != nil && p.gso && (serr == unix.EIO || serr == unix.EINVAL) && p.msgs[m].frames > 1 {
			// The route's device cannot take a GSO message (no checksum
			// offload, a tunnel): one datagram a frame from now on; the
			// caller sends the rest again.
			p.gso = false
			p.stats.TxOffloadOff.Add(1)
			break
		}
		if serr != nil {
			err = fmt.Errorf("udpport: sendmmsg: %w", serr)
			break
		}
		if m < run {
			break // the socket's buffer is full: the rest waits
		}
	}
	if err == nil && sent == k {
		err = badFrame // reported once every frame before it has gone
	}
	for i := range frames[:sent] {
		p.stats.TxFrames.Add(1)
		p.stats.TxBytes.Add(uint64(len(frames[i].Data)))
	}
	p.pool.Put(frames[:sent])
	return sent, err
}

// message is one message of a Send batch: frames frames from frames[first]
// on, one datagram each, from socket sock with TOS tos.
type message struct {
	first, frames int
	seg, bytes    int // the first frame's UDP payload, and all of theirs
	sock, tos     uint8
	dst           netip.Addr
	short         bool // its last frame is shorter than seg: no more may join
}

// plan lays a Send batch's frames out in messages (p.msgs, p.tx), making
// each frame's headers what the kernel will send (normalize). It returns
// how many frames are planned, in how many messages, and the error of a
// frame that is not a RoCEv2 frame (which ends the batch).
func (p *Port) plan(frames []datapath.Frame) (k, msgs int, err error) {
	k = min(len(frames), p.cfg.Batch)
	maxBytes := maxGSOBytes4
	if p.cfg.Local.Is6() {
		maxBytes = maxGSOBytes6
	}
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
		sock := uint8(p.sockFor(pkt.UDP().SrcPort()))
		tos := tosOf(&pkt)
		var dst netip.Addr
		if ip := pkt.IPv4Header(); ip != nil {
			dst = ip.Dst()
		} else {
			dst = pkt.IPv6Header().Dst()
		}
		payload := pkt.Frame[pkt.BTHOff:]
		var id uint16
		if last := msgs - 1; p.gso && last >= 0 && p.msgs[last].joins(sock, tos, dst, len(payload), maxBytes) {
			msg := &p.msgs[last]
			id = uint16(msg.frames)
			msg.frames++
			msg.bytes += len(payload)
			msg.short = len(payload) < msg.seg
		} else {
			p.msgs[msgs] = message{first: i, frames: 1, seg: len(payload), bytes: len(payload), sock: sock, tos: tos, dst: dst}
			msgs++
		}
		p.normalize(&pkt, p.srcPort[sock], id)
		p.tx.setIov(i, payload)
	}
	for m, msg := range p.msgs[:msgs] {
		p.tx.setSend(m, msg.first, msg.frames, msg.seg)
		p.tx.setAddr(m, netip.AddrPortFrom(msg.dst, wire.RoCEv2Port))
	}
	return k, msgs, err
}

// joins reports whether a frame of n payload bytes, from socket sock with
// TOS tos to dst, may join the message as its next segment.
func (m *message) joins(sock, tos uint8, dst netip.Addr, n, maxBytes int) bool {
	return m.sock == sock && m.tos == tos && m.dst == dst && !m.short && n <= m.seg &&
		m.frames < maxSegments && m.bytes+n <= maxBytes
}

// The kernel's limits on a UDP GSO message: segments (UDP_MAX_SEGMENTS:
// 64 in older kernels, 128 in newer ones) and bytes (an IP datagram's).
const (
	maxSegments  = 64
	maxGSOBytes4 = 65535 - wire.IPv4MinLen - wire.UDPLen
	maxGSOBytes6 = 65535 - wire.UDPLen
)

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
// Send will put on the wire (normalize, with the IPv4 IDs of the GSO
// messages they will go in), so that a capture records that. Send does it
// again, finding nothing to change, unless the batch goes in parts.
func (p *Port) Rewrite(frames []datapath.Frame) {
	for len(frames) > 0 {
		k, _, _ := p.plan(frames)
		if k == 0 {
			k = 1 // not a RoCEv2 frame: Send refuses it
		}
		frames = frames[k:]
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
// (source address, IPv4 ID id: 0 for a datagram of its own, the index of
// a GSO message's segment; source port srcPort; the TOS is the frame's,
// setTOS), carrying a change into the ICRC.
func (p *Port) normalize(pkt *wire.Packet, srcPort uint16, id uint16) {
	old := pkt.CopyHeaders()
	changed := false
	if ip := pkt.IPv4Header(); ip != nil {
		if ip.ID() != id || ip.Src() != p.cfg.Local {
			ip.SetID(id)
			ip.SetSrc(p.cfg.Local)
			ip.SetChecksum(ip.ComputeChecksum())
			changed = true
		}
	} else {
		ip := pkt.IPv6Header()
		if ip.Src() != p.cfg.Local {
			ip.SetSrc(p.cfg.Local)
			changed = true
		}
	}
	if u := pkt.UDP(); u.SrcPort() != srcPort {
		u.SetSrcPort(srcPort)
		changed = true
	}
	switch {
	case !changed:
	case pkt.ICRCOff-pkt.UDPOff < carryICRCFrom:
		pkt.SetICRC()
	default:
		pkt.UpdateICRCFrom(&old) // the headers' change alone: the payload is not read again
	}
}

// carryICRCFrom is the packet length (UDP header to ICRC) from which
// carrying a header change into the ICRC costs less than computing it
// again (wire's BenchmarkHeaderChangeICRC: the same at about 512 bytes).
const carryICRCFrom = 512

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

// PollFile returns a duplicate of the receiving socket's descriptor as a
// File the Go runtime's poller watches: a goroutine that waits for
// datagrams on it (SyscallConn().Read) is parked, where Wait holds its
// thread, and with it a P, in a system call (the runtime's monitor takes
// such a P back after 10 ms and polls every 20 us for a while after,
// each wake-up a preemption of a spinning thread on a machine whose cores
// spinning threads hold). The caller closes it.
func (p *Port) PollFile() (*os.File, error) {
	fd, err := unix.Dup(p.fd)
	if err != nil {
		return nil, fmt.Errorf("udpport: dup: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil { // shared with p.fd's description: already so
		unix.Close(fd)
		return nil, fmt.Errorf("udpport: %w", err)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "udpport"), nil
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
