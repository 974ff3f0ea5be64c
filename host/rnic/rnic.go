// Package rnic opens a softrnic RDMA device on a Linux network device in
// one call: the netdev, the port through which frames reach it (AF_XDP
// sockets on every queue, or a kernel UDP socket), the NIC and its verbs
// device, and the connection manager on QP1, closed again in one call.
//
//	dev, err := rnic.Open("veth0", rnic.Config{})
//	defer dev.Close()
//	conn, err := dev.CM.Dial(ctx, "10.47.0.1:7471", cm.QPConfig{})
//
// Open on the kernel UDP port (Config.Port "udp") needs no privileges and
// runs on any device with an IP address, the loopback device included;
// the xsk port needs root (CAP_NET_ADMIN, CAP_BPF, CAP_IPC_LOCK) and an
// Ethernet device. The NIC runs inside the calling process: one device per
// netdev and port at a time (the xsk port's XDP program, the UDP socket on
// port 4791 of the address).
package rnic

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/verbs"
)

// Config says how Open sets up a device. The zero Config is the xsk port
// where the process may open it (else the kernel UDP port), at the
// netdev's first IPv4 address, its engines sleeping when idle.
type Config struct {
	// Port is how frames reach the network: "xsk" (AF_XDP sockets on
	// every queue of the netdev, root only), "udp" (a kernel UDP socket,
	// no privileges) or "" (xsk where permitted, else udp).
	Port string
	// Addr is the address the NIC answers at: one of the netdev's (a GID
	// of its table). Zero: its first IPv4 address, else its first GID's.
	// On the udp port any local address will do (127.0.0.2 on the
	// loopback device).
	Addr netip.Addr
	// Poll, ECN, MaxQPs and the other fields of verbs.DeviceConfig that
	// concern the NIC rather than its port; Ports, MAC, IP, MTU and
	// KernelRx are set by Open.
	Device verbs.DeviceConfig
	// CM configures the connection manager; a nil Resolve finds the next
	// hop's MAC through the netdev's route and neighbour table (Resolve).
	CM cm.Config
	// Log receives the port's notices (copy mode, queues in use); nil
	// discards them.
	Log *slog.Logger
}

// Device is an open RDMA device: the verbs device (embedded: AllocPD,
// CreateCQ, ...), its connection manager and what it runs on.
type Device struct {
	*verbs.Device
	CM     *cm.Agent
	Netdev *netdev.Device
	// Addr is the address the NIC answers at, its GID's.
	Addr netip.Addr
	// Port is the port opened: "xsk" or "udp". On xsk, XDPMode is the
	// XDP program's attach mode ("native" or "generic") and Queues the
	// number of AF_XDP sockets.
	Port    string
	XDPMode string
	Queues  int
	undo    []func()
}

// Open opens a device on the named netdev.
func Open(name string, cfg Config) (_ *Device, err error) {
	d := &Device{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if cfg.Port != "" && cfg.Port != "xsk" && cfg.Port != "udp" {
		return nil, fmt.Errorf("rnic: port %q: want xsk, udp or \"\" (xsk where permitted)", cfg.Port)
	}
	// Any device opens; one without Ethernet takes only the udp port
	// (openPorts says so).
	if d.Netdev, err = netdev.OpenUDP(name); err != nil {
		return nil, fmt.Errorf("rnic: %w", err)
	}
	d.undo = append(d.undo, d.Netdev.Close)
	if d.Addr, err = pickAddr(d.Netdev, cfg); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var ports []datapath.Port
	if ports, err = d.openPorts(cfg.Port, log); err != nil {
		return nil, err
	}
	dc := cfg.Device
	dc.Port, dc.Ports, dc.MAC, dc.IP, dc.MTU, dc.KernelRx = nil, ports, d.Netdev.MAC, d.Addr, d.Netdev.MTU, d.Port == "xsk"
	if d.Device, err = verbs.Open(dc); err != nil {
		return nil, fmt.Errorf("rnic: %w", err)
	}
	d.undo = append(d.undo, func() { d.Device.Close() })
	if stop, err := d.Netdev.CountDowns(&d.Device.NIC().Counters().LinkDowned); err == nil {
		d.undo = append(d.undo, stop)
	} else {
		slog.Debug("link_downed will not count", "err", err)
	}
	cc := cfg.CM
	if cc.Resolve == nil {
		cc.Resolve = d.Resolve
	}
	if d.CM, err = cm.NewAgent(d.Device, d.Addr, cc); err != nil {
		return nil, fmt.Errorf("rnic: connection manager: %w", err)
	}
	d.undo = append(d.undo, func() { d.CM.Close() })
	return d, nil
}

// pickAddr chooses the address the NIC answers at.
func pickAddr(nd *netdev.Device, cfg Config) (netip.Addr, error) {
	if !cfg.Addr.IsValid() {
		a, err := nd.FirstIPv4()
		if err != nil {
			return netip.Addr{}, fmt.Errorf("rnic: %s has no IP address: %w", nd.Name, err)
		}
		return a, nil
	}
	a := cfg.Addr.Unmap()
	for _, g := range nd.GIDs {
		if g.Addr() == a {
			return a, nil
		}
	}
	if cfg.Port == "udp" && a.IsLoopback() {
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("rnic: %v is not an address of %s", a, nd.Name)
}

// openPorts opens the NIC's queues: AF_XDP sockets (xsk), a kernel UDP
// socket (udp), or xsk where permitted and udp otherwise ("").
func (d *Device) openPorts(kind string, log *slog.Logger) ([]datapath.Port, error) {
	switch kind {
	case "", "xsk":
		if !d.Netdev.Ethernet() {
			if kind == "xsk" {
				return nil, fmt.Errorf("rnic: the xsk port needs an Ethernet device; %s has no Ethernet address (use Port \"udp\")", d.Netdev.Name)
			}
			break
		}
		x, err := xsk.Open(d.Netdev.Name, xsk.Config{Log: log}, nil)
		if err == nil {
			d.undo = append(d.undo, func() { x.Close() })
			var ports []datapath.Port
			for _, s := range x.Sockets() {
				ports = append(ports, s)
			}
			d.Port, d.XDPMode, d.Queues = "xsk", x.Program().Mode().String(), len(ports)
			return ports, nil
		}
		denied := xsk.NotPermitted(err)
		if kind == "xsk" || !denied {
			if denied {
				return nil, fmt.Errorf("rnic: AF_XDP port on %s not permitted (run as root, or use Port \"udp\"): %w", d.Netdev.Name, err)
			}
			return nil, fmt.Errorf("rnic: AF_XDP port on %s: %w", d.Netdev.Name, err)
		}
		log.Info("AF_XDP not permitted: using a kernel UDP socket", "dev", d.Netdev.Name)
	}
	u, err := udpport.Open(udpport.Config{Local: d.Addr, LocalMAC: d.Netdev.MAC, Buffers: 8192})
	if err != nil {
		return nil, fmt.Errorf("rnic: UDP port on %s (%v): %w", d.Netdev.Name, d.Addr, err)
	}
	d.undo = append(d.undo, func() { u.Close() })
	d.Port, d.Queues = "udp", 1
	return []datapath.Port{u}, nil
}

// Resolve finds the Ethernet address frames to ip go to: the peer's on
// the same segment, else its router's, from the netdev's route and
// neighbour table (asking the kernel to resolve it, until ctx ends). On
// the udp port of a device without Ethernet (loopback) the kernel routes
// each datagram and no frame carries a MAC: it returns noEthernet.
func (d *Device) Resolve(ctx context.Context, ip netip.Addr) (wire.MAC, error) {
	if d.Port == "udp" && !d.Netdev.Ethernet() {
		return noEthernet, nil
	}
	hop, err := d.Netdev.Resolve(ctx, ip)
	return hop.MAC, err
}

// noEthernet is the next hop of a QP on a device without Ethernet: a
// locally administered address, never on a wire (the kernel UDP port sends
// datagrams, not frames), that the verbs take for a resolved one.
var noEthernet = wire.MAC{0x02, 0, 0, 0, 0, 0x01}

// Close closes the connection manager, the device, the port and the
// netdev, in that order. Connections still open end.
func (d *Device) Close() error {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
	return nil
}
