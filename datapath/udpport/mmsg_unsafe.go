package udpport

// Every unsafe use and raw syscall of the package lives in this file: the
// batched recvmmsg/sendmmsg calls and the message headers they take.

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batch is the scratch space of one recvmmsg or sendmmsg call, allocated
// once per port.
type batch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for IPv4 too
	ctrl  []byte                  // each message's control messages (ctrlLen bytes): its TOS on receive
}

// ctrlLen holds a received datagram's TOS (IP_TOS, one byte) or traffic
// class (IPV6_TCLASS, an int), with room for one more control message.
var ctrlLen = 2 * unix.CmsgSpace(4)

func newBatch(n int) batch {
	b := batch{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n),
		ctrl: make([]byte, n*ctrlLen)} // used on receive only (setRecv): a send has no control messages
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.Iovlen = 1
		b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	return b
}

// tos returns the TOS or traffic class received message i came with (0
// if the kernel gave none).
func (b *batch) tos(i int) uint8 {
	return cmsgTOS(b.ctrl[i*ctrlLen : i*ctrlLen+int(b.hdrs[i].Hdr.Controllen)])
}

// cmsgTOS finds IP_TOS or IPV6_TCLASS in control messages, without
// allocating (unix.ParseSocketControlMessage would).
func cmsgTOS(c []byte) uint8 {
	hl := unix.CmsgLen(0)
	for len(c) >= hl {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		n := int(h.Len)
		if n < hl || n > len(c) {
			return 0
		}
		data := c[hl:n]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			return data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			return uint8(*(*int32)(unsafe.Pointer(&data[0])))
		}
		next := unix.CmsgSpace(n - hl)
		if next > len(c) {
			return 0
		}
		c = c[next:]
	}
	return 0
}

// set points message i at buf, addressed to (or receiving from) a.
func (b *batch) set(i int, buf []byte) {
	b.iovs[i].Base = &buf[0]
	b.iovs[i].SetLen(len(buf))
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

// recvmmsg receives up to n messages without blocking.
func recvmmsg(fd int, b *batch, n int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
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
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[from])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.ENOBUFS {
		return 0, nil
	}
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
