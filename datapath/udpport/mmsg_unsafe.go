package udpport

// Every unsafe use and raw syscall of the package lives in this file: the
// batched recvmmsg/sendmmsg calls and the message headers they take.

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batch is the scratch space of one recvmmsg or sendmmsg call, allocated
// once per port. On send, message m may carry several frames, one iovec
// each, from iovs[iov(m)] on: a UDP GSO message.
type batch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for IPv4 too
	ctrl  []byte                  // each message's control messages (ctrlLen bytes): its TOS and GRO segment size on receive, its GSO segment size on send
}

// ctrlLen holds a received datagram's TOS (IP_TOS, one byte) or traffic
// class (IPV6_TCLASS, an int) and its GRO segment size (UDP_GRO, an int),
// or a sent one's GSO segment size (UDP_SEGMENT, a uint16).
var ctrlLen = 2 * unix.CmsgSpace(4)

func newBatch(n int) batch {
	b := batch{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n),
		ctrl: make([]byte, n*ctrlLen)}
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.Iovlen = 1
		b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	return b
}

// received returns the TOS or traffic class received message i came with
// (0 if the kernel gave none) and its GRO segment size (0: not coalesced).
func (b *batch) received(i int) (tos uint8, seg int) {
	return cmsgFields(b.ctrl[i*ctrlLen : i*ctrlLen+int(b.hdrs[i].Hdr.Controllen)])
}

// cmsgTOS finds IP_TOS or IPV6_TCLASS in control messages.
func cmsgTOS(c []byte) uint8 {
	tos, _ := cmsgFields(c)
	return tos
}

// cmsgFields finds IP_TOS or IPV6_TCLASS and UDP_GRO in control messages,
// without allocating (unix.ParseSocketControlMessage would).
func cmsgFields(c []byte) (tos uint8, seg int) {
	hl := unix.CmsgLen(0)
	for len(c) >= hl {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		n := int(h.Len)
		if n < hl || n > len(c) {
			return tos, seg
		}
		data := c[hl:n]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			seg = int(int32(binary.NativeEndian.Uint32(data)))
		}
		next := unix.CmsgSpace(n - hl)
		if next > len(c) {
			return tos, seg
		}
		c = c[next:]
	}
	return tos, seg
}

// set points message i at buf, addressed to (or receiving from) a.
func (b *batch) set(i int, buf []byte) {
	b.iovs[i].Base = &buf[0]
	b.iovs[i].SetLen(len(buf))
	b.hdrs[i].Hdr.Iov = &b.iovs[i]
	b.hdrs[i].Hdr.Iovlen = 1
	b.hdrs[i].Hdr.Namelen = uint32(unsafe.Sizeof(b.names[i]))
	b.hdrs[i].Hdr.Flags = 0
	b.hdrs[i].Len = 0
}

// setRecv points message i at buf to receive a datagram, with room for
// its control messages.
func (b *batch) setRecv(i int, buf []byte) {
	b.set(i, buf)
	b.hdrs[i].Hdr.Control = &b.ctrl[i*ctrlLen]
	b.hdrs[i].Hdr.SetControllen(ctrlLen)
}

// setIov points iovec i at buf.
func (b *batch) setIov(i int, buf []byte) {
	b.iovs[i].Base = &buf[0]
	b.iovs[i].SetLen(len(buf))
}

// setSend makes message m the n iovecs from iov on; with more than one,
// a UDP GSO message the kernel cuts into datagrams of seg bytes (the last
// may be shorter).
func (b *batch) setSend(m, iov, n, seg int) {
	h := &b.hdrs[m]
	h.Hdr.Iov = &b.iovs[iov]
	h.Hdr.SetIovlen(n)
	h.Hdr.Flags = 0
	h.Len = 0
	if n == 1 {
		h.Hdr.Control = nil
		h.Hdr.SetControllen(0)
		return
	}
	c := b.ctrl[m*ctrlLen:]
	ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	ch.Level, ch.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	ch.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(seg)
	h.Hdr.Control = &c[0]
	h.Hdr.SetControllen(unix.CmsgSpace(2))
}

// setAddr writes the destination of message i.
func (b *batch) setAddr(i int, a netip.AddrPort) {
	n := &b.names[i]
	if a.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(n))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr().As4()}
		putPort(&sa.Port, a.Port())
		b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		return
	}
	*n = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr().As16()}
	putPort(&n.Port, a.Port())
	b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
}

// addr returns the source of received message i.
func (b *batch) addr(i int) netip.AddrPort {
	n := &b.names[i]
	if n.Family == unix.AF_INET {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(n))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), getPort(&sa.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(n.Addr), getPort(&n.Port))
}

// putPort and getPort handle the network-order port of a sockaddr.
func putPort(p *uint16, v uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(v>>8), byte(v)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// recvmmsg receives up to n messages without blocking. It and sendmmsg
// are raw system calls, which the Go runtime does not see: they never
// block, and a polling engine makes them without being rescheduled; the
// runtime's monitor would take the P of such a goroutine found in a call
// it sees, and poll every 20 us for milliseconds after (see xsk's kick).
func recvmmsg(fd int, b *batch, n int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		return 0, nil
	}
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// sendmmsg sends up to n messages without blocking.
func sendmmsg(fd int, b *batch, from, n int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[from])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.ENOBUFS {
		return 0, nil
	}
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
