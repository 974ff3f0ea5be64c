package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/verbs"
)

// nicOptions say how a command that runs one NIC on a netdev opens it.
type nicOptions struct {
	dev         string // the netdev (-d)
	gidIndex    int    // -1: the first IPv4 GID (with ipv6, the first IPv6 one)
	ipv6        bool
	portKind    string // xsk or udp
	poll        datapath.PollMode
	pollBudget  time.Duration // PollAdaptive's (0: datapath's default)
	ecn         datapath.ECN
	pcap        string // record frames in this pcapng file
	metricsAddr string // serve Prometheus metrics here
	pprof       bool
	qps         int // QPs the command creates, if more than the device's default 256
}

// addNICFlags defines into o the flags of a command that runs one NIC on
// a netdev: -io, -poll (defaultPoll if not given), -ecn, -pcap, -metrics and
// -pprof; o's GID index is the first IPv4 GID's. After the flags are
// parsed, parsePoll sets o's poll mode (a usage error if it is no mode).
func addNICFlags(fs *flag.FlagSet, o *nicOptions, defaultPoll string) (parsePoll func() error) {
	o.gidIndex, o.portKind = -1, "xsk"
	fs.StringVar(&o.portKind, "io", o.portKind, "how frames reach the network: xsk (AF_XDP, needs root) or udp (kernel UDP socket)")
	poll := fs.String("poll", defaultPoll, "how the NIC is driven: app (the program's own polling runs it), sleep, adaptive or spin")
	ecn := ecnFlag(fs)
	fs.StringVar(&o.pcap, "pcap", "", "record every frame the NIC sends and receives in this pcapng file")
	fs.StringVar(&o.metricsAddr, "metrics", "", "serve the NIC's counters as Prometheus metrics at http://ADDR/metrics during the run")
	fs.BoolVar(&o.pprof, "pprof", false, "with --metrics, serve Go's pprof at /debug/pprof/ on the same listener")
	return func() error {
		mode, err := datapath.ParsePollMode(*poll)
		if err != nil {
			return badValue("-poll %q: want app, sleep, adaptive or spin", *poll)
		}
		o.poll = mode
		o.ecn, err = parseECN(*ecn)
		return err
	}
}

// ecnFlag defines -ecn, the ECN field of the NIC's packets.
func ecnFlag(fs *flag.FlagSet) *string {
	return fs.String("ecn", "auto", "the ECN field of the NIC's packets: auto (ECT(0), as RoCEv2 NICs mark them, while congestion control reacts to CNPs), off (Not-ECT, as rxe), ect0 or ect1")
}

// parseECN reads -ecn's value; a usage error if it names no choice.
func parseECN(s string) (datapath.ECN, error) {
	c, err := datapath.ParseECN(s)
	if err != nil {
		return 0, badValue("-ecn %q: want auto, off, ect0 or ect1", s)
	}
	return c, nil
}

// nicEnv is a NIC running on a netdev.
type nicEnv struct {
	nd    *netdev.Device
	ip    netip.Addr // the GID's address
	ports []datapath.Port
	dev   *verbs.Device
}

// resolve finds a peer's (or its next hop's) Ethernet address.
func (e *nicEnv) resolve(ctx context.Context, ip netip.Addr) (wire.MAC, error) {
	hop, err := e.nd.Resolve(ctx, ip)
	return hop.MAC, err
}

// openNIC opens the netdev, its ports (with a recording), the device and
// the metrics listener; close undoes what it opened, in reverse.
func openNIC(o nicOptions) (_ *nicEnv, _ func(), err error) {
	var undo []func()
	closeAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	e := &nicEnv{} // the undo steps use it, whatever this returns
	var metricsLn net.Listener
	if o.metricsAddr != "" { // first: an address that cannot be had fails before the NIC opens
		if metricsLn, err = listenMetrics(o.metricsAddr); err != nil {
			return nil, nil, err
		}
		undo = append(undo, func() { metricsLn.Close() }) // (closed again by the server's stop)
	}
	if o.portKind == "udp" {
		// The kernel UDP port sends no Ethernet frames: any device with
		// an address will do, the loopback device included.
		e.nd, err = netdev.OpenUDP(o.dev)
	} else {
		e.nd, err = openNetdev(o.dev)
	}
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { e.nd.Close() })
	gid, err := pickGID(e.nd, o.gidIndex, o.ipv6)
	if err != nil {
		return nil, nil, err
	}
	e.ip = gid.Addr()
	slog.Debug("netdev", "dev", e.nd.Name, "mac", e.nd.MAC, "mtu", e.nd.MTU, "gid", e.ip)
	ports, closePorts, err := openPorts(e.nd, o.portKind, e.ip)
	if err != nil {
		return nil, nil, err
	}
	e.ports = ports
	undo = append(undo, closePorts)
	var tap func([]byte)
	if o.pcap != "" {
		var stop func()
		if tap, stop, err = capturePorts(o.pcap, e.nd.Name, ports); err != nil {
			return nil, nil, err
		}
		undo = append(undo, stop)
	}
	xskPort := o.portKind == "xsk"
	if e.dev, err = verbs.Open(verbs.DeviceConfig{
		NICConfig: datapath.NICConfig{Ports: ports, MAC: e.nd.MAC, IP: e.ip, Addrs: e.nd.Addrs(), Poll: o.poll, PollBudget: o.pollBudget, ECN: o.ecn, MaxQPs: max(256, o.qps+16),
			KernelRx: xskPort, DeliverTap: tap},
		MTU: e.nd.MTU,
	}); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { e.dev.Close() }, func() { logCounters(e.nd.Name, e.dev, ports) })
	if stop, err := e.nd.CountDowns(&e.dev.NIC().Counters().LinkDowned); err == nil {
		undo = append(undo, stop)
	} else {
		slog.Debug("link_downed will not count", "err", err)
	}
	if xskPort && !e.dev.KernelRx() {
		slog.Debug("no kernel UDP socket beside the XSK sockets (another stack holds port 4791?)", "dev", e.nd.Name)
	}
	if metricsLn != nil {
		undo = append(undo, serveOn(metricsLn, o.pprof, metrics.Handler(metrics.Source{Name: e.nd.Name, Dev: e.dev, Ports: ports})))
	}
	return e, closeAll, nil
}
