package main

/*
#define SRN_GO
#include "srn.h"
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/capture"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/verbs"
	"golang.org/x/sys/unix"
)

// config is what the environment says about the devices (README, "C
// programs on softrnic").
type config struct {
	netdevs []string          // SOFTRNIC_NETDEV, comma-separated; empty: every Ethernet netdev that is up
	port    string            // SOFTRNIC_PORT: xsk, udp or auto (xsk, else udp when not permitted)
	poll    datapath.PollMode // SOFTRNIC_POLL
	pcap    string            // SOFTRNIC_PCAP: a pcapng file (one per device: the netdev's name is added)
	metrics string            // SOFTRNIC_METRICS: serve Prometheus metrics at this address
	maxQPs  int               // SOFTRNIC_MAX_QPS
	hold    time.Duration     // SOFTRNIC_POST_HOLD: datapath.NICConfig.PostHold (off: -1)
}

func readConfig() (config, error) {
	c := config{port: "auto", poll: datapath.PollApp, maxQPs: 256}
	for _, n := range strings.Split(os.Getenv("SOFTRNIC_NETDEV"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			c.netdevs = append(c.netdevs, n)
		}
	}
	if v := os.Getenv("SOFTRNIC_PORT"); v != "" {
		if v != "xsk" && v != "udp" && v != "auto" {
			return c, fmt.Errorf("SOFTRNIC_PORT=%q: want xsk, udp or auto", v)
		}
		c.port = v
	}
	if v := os.Getenv("SOFTRNIC_POLL"); v != "" {
		m, err := datapath.ParsePollMode(v)
		if err != nil {
			return c, fmt.Errorf("SOFTRNIC_POLL=%q: want app, sleep, adaptive or spin", v)
		}
		c.poll = m
	}
	c.pcap = os.Getenv("SOFTRNIC_PCAP")
	c.metrics = os.Getenv("SOFTRNIC_METRICS")
	if v := os.Getenv("SOFTRNIC_MAX_QPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<16 {
			return c, fmt.Errorf("SOFTRNIC_MAX_QPS=%q: want a number from 1 to 65536", v)
		}
		c.maxQPs = n
	}
	if v := os.Getenv("SOFTRNIC_POST_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case v == "off" || v == "0":
			c.hold = -1
		case err != nil || d < 0 || d > time.Millisecond:
			return c, fmt.Errorf("SOFTRNIC_POST_HOLD=%q: want off or a duration up to 1ms (30us, say)", v)
		default:
			c.hold = d
		}
	}
	return c, nil
}

// device is one open softrnic device: a NIC on a netdev, shared by every
// ibv_open_device of it in the process.
type device struct {
	h     int32 // its handle
	name  string
	nd    *netdev.Device
	ip    netip.Addr
	ports []datapath.Port
	kind  string
	dev   *verbs.Device
	refs  int // under devices.mu
	undo  []func()
	cmMu  sync.Mutex
	cm    *cm.Agent // librdmacm's connection manager, from its first use

	asyncMu  sync.Mutex
	asyncFDs []int         // the open contexts' async pipes
	watch    chan struct{} // closed: watchPort ends
}

var devices struct {
	sync.Mutex
	byName map[string]int32
	t      table[device]
}

// netdevNames lists the netdevs the devices are on.
func netdevNames() ([]string, error) {
	cfg, err := readConfig()
	if err != nil {
		return nil, err
	}
	if len(cfg.netdevs) > 0 {
		return cfg.netdevs, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 && len(i.HardwareAddr) == 6 {
			names = append(names, i.Name)
		}
	}
	return names, nil
}

// srn_device_names writes the netdevs of the devices into buf, each
// NUL-terminated, and returns how many (or -errno).
//
//export srn_device_names
func srn_device_names(buf *C.char, n C.int) C.int {
	names, err := netdevNames()
	if err != nil {
		fmt.Fprintln(os.Stderr, "softrnic:", err)
		return errno(err)
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	off, count := 0, 0
	for _, name := range names {
		if off+len(name)+1 > len(out) {
			break
		}
		off += copy(out[off:], name)
		out[off] = 0
		off++
		count++
	}
	return C.int(count)
}

// srn_open opens the device on netdev (or takes another reference to it)
// and fills attr. On failure it returns -errno with the reason in err.
//
//export srn_open
func srn_open(name *C.char, attr *C.struct_srn_dev_attr, errBuf *C.char, errLen C.int) C.int {
	d, err := acquireDevice(C.GoString(name))
	if err != nil {
		copyCString(errBuf, errLen, err.Error())
		return errno(err)
	}
	fillAttr(d, attr)
	return C.int(d.h)
}

func openDevice(name string) (_ *device, err error) {
	cfg, err := readConfig()
	if err != nil {
		return nil, err
	}
	d := &device{name: name}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if ifi, e := net.InterfaceByName(name); e == nil && len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("%s has no Ethernet address: softrnic sends RoCEv2 in Ethernet frames and needs an Ethernet device, such as a NIC or a veth", name)
	}
	if d.nd, err = netdev.Open(name); err != nil {
		return nil, fmt.Errorf("netdev %s: %w", name, err)
	}
	d.undo = append(d.undo, d.nd.Close)
	for _, g := range d.nd.GIDs {
		if g.IsIPv4() {
			d.ip = g.Addr()
			break
		}
	}
	if !d.ip.IsValid() && len(d.nd.GIDs) > 0 {
		d.ip = d.nd.GIDs[0].Addr()
	}
	if err := d.openPorts(cfg.port); err != nil {
		return nil, err
	}
	var tap func([]byte)
	if cfg.pcap != "" {
		if tap, err = d.record(cfg.pcap); err != nil {
			return nil, err
		}
	}
	if d.dev, err = verbs.Open(verbs.DeviceConfig{
		NICConfig: datapath.NICConfig{Ports: d.ports, MAC: d.nd.MAC, IP: d.ip, Addrs: d.nd.Addrs(), Poll: cfg.poll, PostHold: cfg.hold, MaxQPs: cfg.maxQPs, KernelRx: d.kind == "xsk", DeliverTap: tap},
		MTU:       d.nd.MTU,
	}); err != nil {
		return nil, err
	}
	d.undo = append(d.undo, func() { d.dev.Close() })
	if stop, err := d.nd.CountDowns(&d.dev.NIC().Counters().LinkDowned); err == nil {
		d.undo = append(d.undo, stop)
	}
	if cfg.metrics != "" {
		if err := d.serveMetrics(cfg.metrics); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// openPorts opens the NIC's queues: AF_XDP sockets (xsk), a kernel UDP
// socket (udp), or xsk where permitted and udp otherwise (auto).
func (d *device) openPorts(kind string) error {
	if kind == "xsk" || kind == "auto" {
		x, err := xsk.Open(d.nd.Name, xsk.Config{Log: slog.New(slog.DiscardHandler)}, nil)
		if err == nil {
			for _, s := range x.Sockets() {
				d.ports = append(d.ports, s)
			}
			d.kind = "xsk"
			d.undo = append(d.undo, func() { x.Close() })
			return nil
		}
		denied := xsk.NotPermitted(err)
		if kind == "xsk" {
			if denied {
				return fmt.Errorf("AF_XDP port on %s: not permitted (%v): run as root (AF_XDP needs CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK), or set SOFTRNIC_PORT=udp for a kernel UDP socket, which needs no privileges: %w", d.nd.Name, err, unix.EPERM)
			}
			return fmt.Errorf("AF_XDP port on %s: %w", d.nd.Name, err)
		}
		if !denied {
			fmt.Fprintf(os.Stderr, "softrnic: %s: AF_XDP port failed (%v); using a kernel UDP socket (SOFTRNIC_PORT=udp)\n", d.nd.Name, err)
		}
	}
	if !d.ip.IsValid() {
		return fmt.Errorf("%s has no IP address for the kernel UDP port", d.nd.Name)
	}
	u, err := udpport.Open(udpport.Config{Local: d.ip, LocalMAC: d.nd.MAC, Buffers: 8192})
	if err != nil {
		return fmt.Errorf("UDP port on %s (%s): %w", d.nd.Name, d.ip, err)
	}
	d.ports = []datapath.Port{u}
	d.kind = "udp"
	d.undo = append(d.undo, func() { u.Close() })
	return nil
}

// record wraps the ports in a pcapng recording (SOFTRNIC_PCAP), one file
// per device: the netdev's name goes before the file's extension. tap
// records the frames the kernel's UDP stack takes in for the NIC
// (datapath.NICConfig.DeliverTap) as the interface "NETDEV kernel rx".
func (d *device) record(name string) (tap func([]byte), err error) {
	if ext := strings.LastIndex(name, "."); ext > 0 {
		name = name[:ext] + "-" + d.nd.Name + name[ext:]
	} else {
		name += "-" + d.nd.Name
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("SOFTRNIC_PCAP: %w", err)
	}
	w, err := capture.NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if tap, err = w.WrapDevice(d.nd.Name, d.ports); err != nil {
		f.Close()
		return nil, err
	}
	d.undo = append(d.undo, func() { w.Flush(); f.Close() })
	return tap, nil
}

// serveMetrics serves the device's counters (SOFTRNIC_METRICS).
func (d *device) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("SOFTRNIC_METRICS: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metrics.Source{Name: d.nd.Name, Dev: d.dev, Ports: d.ports}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "softrnic: %s: metrics at http://%s/metrics\n", d.nd.Name, ln.Addr())
	d.undo = append(d.undo, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return nil
}

func (d *device) close() {
	if d.cm != nil {
		d.cm.Close()
		d.cm = nil
	}
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
}

// srn_close drops a reference to the device; the last closes it.
//
//export srn_close
func srn_close(h C.int) C.int {
	devices.Lock()
	defer devices.Unlock()
	d := devices.t.get(h)
	if d == nil {
		return -C.int(unix.EINVAL)
	}
	if d.refs--; d.refs > 0 {
		return 0
	}
	delete(devices.byName, d.name)
	devices.t.del(h)
	d.close()
	return 0
}

// srn_exit sends what the open devices' NICs hold for the program's next
// call (posts' frames, ACKs: datapath.NIC.SendHeld), from the library's
// destructor as the program exits: one that posts and exits without a
// poll or an ibv_close_device must not lose them. A device being opened
// or closed right now (the lock taken) is left alone.
//
//export srn_exit
func srn_exit() {
	if !devices.TryLock() {
		return
	}
	var open []*device
	devices.t.mu.RLock()
	for _, d := range devices.t.objs {
		if d != nil {
			open = append(open, d)
		}
	}
	devices.t.mu.RUnlock()
	devices.Unlock()
	for _, d := range open {
		d.dev.NIC().SendHeld()
	}
}

// srn_query fills attr with what the device is now (its GID table follows
// the netdev's addresses).
//
//export srn_query
func srn_query(h C.int, attr *C.struct_srn_dev_attr) C.int {
	d := devices.t.get(h)
	if d == nil {
		return -C.int(unix.EINVAL)
	}
	d.nd.Refresh()
	fillAttr(d, attr)
	return 0
}

// srn_port_state returns the port's state (enum ibv_port_state): ACTIVE
// while the netdev is up and running, DOWN otherwise.
//
//export srn_port_state
func srn_port_state(h C.int) C.int {
	d := devices.t.get(h)
	if d == nil {
		return -C.int(unix.EINVAL)
	}
	ifi, err := net.InterfaceByName(d.nd.Name)
	if err != nil || ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagRunning == 0 {
		return 1 // IBV_PORT_DOWN
	}
	return 4 // IBV_PORT_ACTIVE
}

func fillAttr(d *device, a *C.struct_srn_dev_attr) {
	*a = C.struct_srn_dev_attr{}
	copyCString(&a.netdev[0], C.SRN_NAME_LEN, d.nd.Name)
	copyCString(&a.port_kind[0], 8, d.kind)
	for i := range 6 {
		a.mac[i] = C.uint8_t(d.nd.MAC[i])
	}
	a.netdev_mtu = C.uint32_t(d.nd.MTU)
	a.active_mtu = C.uint32_t(d.dev.ActiveMTU())
	a.queues = C.uint32_t(len(d.ports))
	n := min(len(d.nd.GIDs), C.SRN_MAX_GIDS)
	a.gid_count = C.uint32_t(n)
	for i := range n {
		for j := range 16 {
			a.gid[i][j] = C.uint8_t(d.nd.GIDs[i][j])
		}
	}
	caps := map[string]int{}
	for _, u := range d.dev.Usage() {
		caps[u.Name] = u.Capacity
	}
	a.max_qp = C.uint32_t(caps["qps"])
	a.max_cq = C.uint32_t(caps["cqs"])
	a.max_mr = C.uint32_t(caps["mrs"])
	a.max_srq = C.uint32_t(caps["srqs"])
	a.max_qp_wr, a.max_srq_wr, a.max_cqe = 1<<14, 1<<14, 1<<16
	a.max_sge, a.max_recv_sge, a.max_inline = C.SRN_MAX_SEND_SGE, C.SRN_MAX_RECV_SGE, verbs.MaxInlineData
	a.max_rd_atomic, a.max_pd, a.max_ah = 16, 1<<16, 1<<16
	a.max_mr_size = 1 << 40
	if d.kind != "udp" { // the udp port takes no multicast
		a.max_mcast_grp, a.max_mcast_qp_attach = datapath.MaxMulticastGroups, datapath.MaxMulticastQPs
	}
}

// copyCString copies s into the C buffer buf of n bytes, NUL-terminated
// (cut to fit), and returns the bytes copied.
func copyCString(buf *C.char, n C.int, s string) int {
	if buf == nil || n <= 0 {
		return 0
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(out[:len(out)-1], s)
	out[k] = 0
	return k
}

// resolve finds the Ethernet address of a GID's host (or its next hop).
func (d *device) resolve(gid [16]byte) (wire.MAC, error) {
	ip := netip.AddrFrom16(gid).Unmap()
	if ip.Is4() && ip.IsMulticast() {
		return wire.MAC(verbs.MulticastMAC(ip)), nil // a group's: no neighbour to ask
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hop, err := d.nd.Resolve(ctx, ip)
	if err != nil {
		return wire.MAC{}, fmt.Errorf("%w: no route or neighbour for %s on %s: %v", unix.EHOSTUNREACH, ip, d.nd.Name, err)
	}
	return hop.MAC, nil
}
