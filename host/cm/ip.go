package cm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// rdma_cm's port spaces: the service ID of a connection to an IP port is
// the "RDMA IP CM service" 0x0000000001 PP NNNN (IBTA annex A11), PP the
// port space's low byte and NNNN the port.
const (
	PortSpaceTCP = 0x0106 // RDMA_PS_TCP: reliable connections (rping, perftest -R)
	PortSpaceUDP = 0x0111 // RDMA_PS_UDP
	PortSpaceIB  = 0x013f // RDMA_PS_IB
)

// ServiceID is the service ID of port in port space ps.
func ServiceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an RDMA IP CM service
// ID, ok false for a service ID of another kind.
func SplitServiceID(id uint64) (ps, port uint16, ok bool) {
	if id>>24 != 1 {
		return 0, 0, false
	}
	return uint16(id >> 16), uint16(id), true
}

// IPHeaderSize is the size of rdma_cm's header at the start of a REQ's
// private data; what the application passes follows it.
const IPHeaderSize = 36

// MaxREQPrivate is the private data an application may send with an
// rdma_cm connection request: the REQ's room less rdma_cm's header.
const MaxREQPrivate = REQPrivate - IPHeaderSize

// IPHeader is rdma_cm's header in a REQ's private data: the IP
// addresses and the active side's port, which the passive side matches
// to a listener (the destination port is in the service ID).
type IPHeader struct {
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6
}

// Put writes the header at the start of private (at least IPHeaderSize
// bytes): version 0, the IP version in the high nibble, the port, then
// each address in 16 bytes (an IPv4 address in the last four).
func (h IPHeader) Put(private []byte) error {
	if len(private) < IPHeaderSize {
		return fmt.Errorf("cm: %d bytes of private data: the rdma_cm header needs %d", len(private), IPHeaderSize)
	}
	if !h.Src.IsValid() || !h.Dst.IsValid() || h.Src.Is4() != h.Dst.Is4() {
		return fmt.Errorf("cm: rdma_cm header with addresses %v and %v", h.Src, h.Dst)
	}
	clear(private[:IPHeaderSize])
	private[0] = 0
	if h.Src.Is4() {
		private[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(private[16:20], s[:])
		copy(private[32:36], d[:])
	} else {
		private[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(private[4:20], s[:])
		copy(private[20:36], d[:])
	}
	binary.BigEndian.PutUint16(private[2:], h.SrcPort)
	return nil
}

// ParseIPHeader reads rdma_cm's header from a REQ's private data.
func ParseIPHeader(private []byte) (IPHeader, error) {
	if len(private) < IPHeaderSize {
		return IPHeader{}, fmt.Errorf("%w: %d bytes of private data, no rdma_cm header", ErrMAD, len(private))
	}
	if private[0] != 0 {
		return IPHeader{}, fmt.Errorf("%w: rdma_cm header version %d", ErrMAD, private[0])
	}
	h := IPHeader{SrcPort: binary.BigEndian.Uint16(private[2:])}
	switch private[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(private[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(private[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(private[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(private[20:36]))
	default:
		return IPHeader{}, fmt.Errorf("%w: rdma_cm header for IP version %d", ErrMAD, private[1]>>4)
	}
	return h, nil
}
