package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/rnic"
)

const devinfoText = `What ibv_devinfo -v, show_gids and rdma link say of an RDMA device, for
softrnic on a netdev: its name (softrnic_NETDEV, as the C libraries name
it), the netdev, the port (xsk or udp, the XDP program's mode, the
queues), the port state and MTUs, the GID table with indexes and types,
and the NIC's fixed capacities. The device is opened to find the port out
(the XDP program is attached for that moment: run it beside no other
softrnic on the same netdev) and closed again.
`

// devInfo is what devinfo prints; -j prints it as JSON.
type devInfo struct {
	Device    string    `json:"device"`
	Netdev    string    `json:"netdev"`
	Ifindex   int       `json:"ifindex"`
	MAC       string    `json:"mac,omitempty"`
	MTU       int       `json:"netdev_mtu"`
	Port      string    `json:"port"`
	XDPMode   string    `json:"xdp_mode,omitempty"`
	Queues    int       `json:"queues"`
	State     string    `json:"state"`
	MaxMTU    int       `json:"max_mtu"` // the IB maximum, as rdma_rxe reports it
	ActiveMTU int       `json:"active_mtu"`
	Addr      string    `json:"address"`
	GIDs      []gidInfo `json:"gids"`
	Limits    []limit   `json:"limits"`
	Cache     cacheInfo `json:"context_cache"`
}

type gidInfo struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	Type  string `json:"type"`
	Addr  string `json:"address"`
}

type limit struct {
	Name     string `json:"name"`
	Capacity int    `json:"capacity"`
}

type cacheInfo struct {
	Sets, Ways, Outstanding, PIDs int
}

func runDevinfo(args []string, stdout io.Writer) error {
	fs := newFlagSet("devinfo", "devinfo [flags] NETDEV", devinfoText)
	jsonOut := fs.Bool("j", false, "print JSON")
	port := fs.String("io", "", "the port to open: xsk, udp, or empty for xsk where permitted and udp otherwise")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return badUsage(flagUsage(fs), "no netdev given")
	case fs.NArg() > 1:
		return badUsage(flagUsage(fs), "one netdev, not %q", fs.Args())
	case *port != "" && *port != "xsk" && *port != "udp":
		return badValue("-io %q: want xsk or udp", *port)
	}
	d, err := rnic.Open(fs.Arg(0), rnic.Config{Port: *port})
	if err != nil {
		return err
	}
	info := describeDevice(d)
	d.Close()
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	printDevinfo(stdout, &info)
	return nil
}

// describeDevice gathers what devinfo prints from an open device.
func describeDevice(d *rnic.Device) devInfo {
	nd := d.Netdev
	info := devInfo{Device: "softrnic_" + nd.Name, Netdev: nd.Name, Ifindex: nd.Index, MTU: nd.MTU,
		Port: d.Port, XDPMode: d.XDPMode, Queues: d.Queues, State: portState(nd.Name),
		MaxMTU: 4096, ActiveMTU: wire.MTUFromEnum(d.ActiveMTU()), Addr: d.Addr.String()}
	if nd.Ethernet() {
		info.MAC = nd.MAC.String()
	}
	for i, g := range nd.GIDs {
		info.GIDs = append(info.GIDs, gidInfo{Index: i, GID: netip.AddrFrom16(g).String(), Type: "RoCE v2", Addr: g.Addr().String()})
	}
	for _, u := range d.Usage() {
		info.Limits = append(info.Limits, limit{u.Name, u.Capacity})
	}
	info.Limits = append(info.Limits, limit{"replay_entries", d.NIC().Replay().Cap()})
	if c, ok := d.NIC().Cache(hostmem.QPC).(interface{ Config() ctxcache.Config }); ok {
		cfg := c.Config()
		info.Cache = cacheInfo{cfg.Sets, cfg.Ways, cfg.Outstanding, cfg.PIDs}
	}
	return info
}

// portState is ibv_devinfo's port state from the netdev's operational
// state, as rdma_rxe reports it: ACTIVE when the link is up (or its state
// unknown, as a tun's or the loopback device's often is), else DOWN.
func portState(name string) string {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return "PORT_DOWN (1)"
	}
	switch l.Attrs().OperState {
	case netlink.OperUp, netlink.OperUnknown:
		return "PORT_ACTIVE (4)"
	}
	return "PORT_DOWN (1)"
}

func printDevinfo(w io.Writer, d *devInfo) {
	fmt.Fprintf(w, "hca_id:\t%s\n", d.Device)
	fmt.Fprintf(w, "\tnetdev:\t\t\t%s (ifindex %d", d.Netdev, d.Ifindex)
	if d.MAC != "" {
		fmt.Fprintf(w, ", MAC %s", d.MAC)
	}
	fmt.Fprintf(w, ", MTU %d)\n", d.MTU)
	switch d.Port {
	case "xsk":
		fmt.Fprintf(w, "\tport:\t\t\txsk (AF_XDP sockets, XDP %s), %d queue%s\n", d.XDPMode, d.Queues, plural(d.Queues))
	default:
		fmt.Fprintf(w, "\tport:\t\t\tudp (a kernel UDP socket on port %d)\n", wire.RoCEv2Port)
	}
	if d.MAC != "" {
		fmt.Fprintf(w, "\tlink_layer:\t\tEthernet\n")
	} else {
		fmt.Fprintf(w, "\tlink_layer:\t\tnone (no Ethernet address: the udp port only)\n")
	}
	fmt.Fprintf(w, "\tstate:\t\t\t%s\n", d.State)
	fmt.Fprintf(w, "\tmax_mtu:\t\t%d (%d)\n", d.MaxMTU, wire.MTUEnum(d.MaxMTU))
	fmt.Fprintf(w, "\tactive_mtu:\t\t%d (%d)\n", d.ActiveMTU, wire.MTUEnum(d.ActiveMTU))
	fmt.Fprintf(w, "\taddress:\t\t%s (the GID the NIC answers at)\n", d.Addr)
	for _, g := range d.GIDs {
		fmt.Fprintf(w, "\tGID[%3d]:\t\t%s, %s\n", g.Index, g.GID, g.Type)
	}
	var l []string
	for _, x := range d.Limits {
		l = append(l, fmt.Sprintf("%s %d", x.Name, x.Capacity))
	}
	fmt.Fprintf(w, "\tcapacities:\t\t%s\n", strings.Join(l, ", "))
	c := d.Cache
	fmt.Fprintf(w, "\tcontext cache:\t\t%d sets x %d ways, %d host fetches in flight, %d tickets (each of QPC, CQC, SRQC, MPT, MTT)\n", c.Sets, c.Ways, c.Outstanding, c.PIDs)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
