// Package netdev reads what the NIC needs to know about its network device,
// as rdma_rxe does: its MAC and IP addresses, the GID table built from them,
// the path MTU, and for a destination the route and the next hop's MAC,
// resolving a missing neighbour rather than failing.
package netdev

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath/wire"
)

// GID is a 128-bit global identifier in the form of an IPv6 address; an
// IPv4 address appears IPv4-mapped (::ffff:a.b.c.d), which on RoCEv2 means
// IPv4 framing.
type GID [16]byte

// GIDFromAddr returns the GID of an address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an address, unmapped for IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4 reports whether the GID is IPv4-mapped.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

func (g GID) String() string { return netip.AddrFrom16(g).String() }

// PathMTU returns the largest IB MTU a netdev MTU carries, as rxe computes
// it (room for 80 bytes of headers), or 0 if not even 256 fits.
func PathMTU(netdevMTU int) int { return wire.IBMTU(netdevMTU) }

// MTUEnum returns the ibv_mtu number of an IB MTU (1 for 256 … 5 for 4096),
// or 0 if it is not one.
func MTUEnum(ibMTU int) int { return wire.MTUEnum(ibMTU) }

// MTUFromEnum returns the IB MTU of an ibv_mtu number, or 0.
func MTUFromEnum(e int) int { return wire.MTUFromEnum(e) }

// Device is a network device as the NIC sees it.
type Device struct {
	Name  string
	Index int
	MAC   wire.MAC
	MTU   int   // netdev MTU
	GIDs  []GID // index 0: link-local from the MAC; then IPv4-mapped, then other IPv6 addresses
	nl    *netlink.Handle
	// anyLink: a device without an Ethernet address (loopback) is taken,
	// for the kernel UDP port, which sends no Ethernet frames (OpenUDP).
	anyLink bool
}

// Open reads the named device in the calling thread's network namespace.
// The Device keeps a netlink handle there, so its methods work from any
// goroutine.
func Open(name string) (*Device, error) { return open(name, false) }

func open(name string, anyLink bool) (*Device, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netdev: netlink: %w", err)
	}
	d := &Device{Name: name, nl: h, anyLink: anyLink}
	if err := d.Refresh(); err != nil {
		h.Close()
		return nil, err
	}
	return d, nil
}

// OpenUDP is Open for a NIC on the kernel UDP port only, which sends
// datagrams through the kernel and no Ethernet frames: it also takes a
// device without an Ethernet address, such as the loopback device (its
// MAC is zero, its GID table its IP addresses, with no link-local GID).
func OpenUDP(name string) (*Device, error) { return open(name, true) }

// Ethernet reports whether the device has an Ethernet address: the xsk
// port needs one.
func (d *Device) Ethernet() bool { return d.MAC != (wire.MAC{}) }

// Addrs returns the addresses of the GIDs, in the table's order: a NIC
// on the device sends from and takes frames to each of them
// (datapath.NICConfig.Addrs).
func (d *Device) Addrs() []netip.Addr {
	a := make([]netip.Addr, len(d.GIDs))
	for i, g := range d.GIDs {
		a[i] = g.Addr()
	}
	return a
}

// FirstIPv4 returns the address of the first IPv4 GID, the one perftest and
// softrnic's commands pick by default, or the first GID's when the device
// has no IPv4 address.
func (d *Device) FirstIPv4() (netip.Addr, error) {
	for _, g := range d.GIDs {
		if a := g.Addr(); a.Is4() {
			return a, nil
		}
	}
	g, err := d.GID(0)
	return g.Addr(), err
}

// Close releases the netlink handle.
func (d *Device) Close() { d.nl.Close() }

// ErrNotEthernet is returned for a device without an Ethernet address,
// such as the loopback device.
var ErrNotEthernet = errors.New("the device has no Ethernet address")

// Refresh rereads the device's MAC, MTU and addresses.
func (d *Device) Refresh() error {
	l, err := d.nl.LinkByName(d.Name)
	if err != nil {
		return fmt.Errorf("netdev: %s: %w", d.Name, err)
	}
	a := l.Attrs()
	d.Index, d.MTU = a.Index, a.MTU
	var gids []GID
	switch {
	case len(a.HardwareAddr) == 6:
		d.MAC = wire.MAC(a.HardwareAddr)
		gids = append(gids, linkLocalGID(d.MAC))
	case !d.anyLink:
		return fmt.Errorf("netdev: %s: %w: RoCEv2 travels in Ethernet frames (use a NIC or a veth, not %s)", d.Name, ErrNotEthernet, a.EncapType)
	}
	addrs, err := d.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("netdev: %s addresses: %w", d.Name, err)
	}
	for _, v4 := range []bool{true, false} {
		for _, ad := range addrs {
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok || ip.Unmap().Is4() != v4 || ip.IsLinkLocalUnicast() {
				continue
			}
			gids = append(gids, GIDFromAddr(ip.Unmap()))
		}
	}
	d.GIDs = gids
	return nil
}

// linkLocalGID is the default GID: fe80:: with the EUI-64 of the MAC.
func linkLocalGID(m wire.MAC) GID {
	return GID{0xfe, 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]}
}

// ErrNoGID is returned for a GID index beyond the table.
var ErrNoGID = errors.New("netdev: no GID at that index")

// GID returns the GID at an index of the table.
func (d *Device) GID(index int) (GID, error) {
	if index < 0 || index >= len(d.GIDs) {
		return GID{}, fmt.Errorf("%w %d (%s has %d)", ErrNoGID, index, d.Name, len(d.GIDs))
	}
	return d.GIDs[index], nil
}

// PathMTU returns the device's path MTU (see PathMTU).
func (d *Device) PathMTU() int { return PathMTU(d.MTU) }

// NextHop is how to reach a destination: through which source address and
// to which MAC.
type NextHop struct {
	Src     netip.Addr // the source address the route gives
	Gateway netip.Addr // the gateway, or the destination itself on a local subnet
	MAC     wire.MAC   // the MAC of Gateway
}

// ErrUnreachable is returned when the route or the neighbour cannot be
// found.
var ErrUnreachable = errors.New("netdev: destination unreachable")

// Resolve finds the route to dst through the device and the MAC of its next
// hop, asking the kernel to resolve the neighbour (ARP or neighbour
// discovery) when it is not known yet, until ctx ends.
func (d *Device) Resolve(ctx context.Context, dst netip.Addr) (NextHop, error) {
	dst = dst.Unmap()
	routes, err := d.nl.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return NextHop{}, fmt.Errorf("%w: no route to %v: %v", ErrUnreachable, dst, err)
	}
	r := routes[0]
	if r.LinkIndex != d.Index {
		return NextHop{}, fmt.Errorf("%w: the route to %v leaves through ifindex %d, not %s", ErrUnreachable, dst, r.LinkIndex, d.Name)
	}
	hop := NextHop{Gateway: dst}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		hop.Gateway = gw.Unmap()
	}
	if src, ok := netip.AddrFromSlice(r.Src); ok {
		hop.Src = src.Unmap()
	}
	family := netlink.FAMILY_V4
	if hop.Gateway.Is6() {
		family = netlink.FAMILY_V6
	}
	for asked := false; ; {
		if mac, ok := d.neighbour(hop.Gateway, family); ok {
			hop.MAC = mac
			return hop, nil
		}
		if !asked {
			// NTF_USE makes the kernel treat the entry as used by a
			// packet: it creates it and starts resolution.
			err := d.nl.NeighSet(&netlink.Neigh{LinkIndex: d.Index, Family: family, IP: hop.Gateway.AsSlice(), State: netlink.NUD_NONE, Flags: unix.NTF_USE})
			if err != nil {
				return NextHop{}, fmt.Errorf("netdev: resolve %v: %w", hop.Gateway, err)
			}
			asked = true
		}
		select {
		case <-ctx.Done():
			return NextHop{}, fmt.Errorf("%w: no neighbour answers for %v: %v", ErrUnreachable, hop.Gateway, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// neighbour returns the MAC of a resolved neighbour.
func (d *Device) neighbour(ip netip.Addr, family int) (wire.MAC, bool) {
	neighs, err := d.nl.NeighList(d.Index, family)
	if err != nil {
		return wire.MAC{}, false
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
			return wire.MAC(n.HardwareAddr), true
		}
	}
	return wire.MAC{}, false
}
