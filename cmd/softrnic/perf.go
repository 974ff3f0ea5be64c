package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/perftest"
	"github.com/softrnic/softrnic/host/verbs"
)

const perfUsage = `usage: softrnic perf <test> [flags] [server address]

tests: send-bw write-bw read-bw atomic-bw send-lat write-lat read-lat atomic-lat

Without an address it is the server and waits for a client; with one it
is the client. Flags follow perftest's ib_* tools; a softrnic peer and a
perftest peer are alike to it.
`

// runPerf is `softrnic perf`: perftest's tests, as client or server.
func runPerf(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, perfUsage)
		return nil
	}
	test, err := perftest.ParseTest(args[0])
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("perf "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), perfUsage, "\nflags:\n"); fs.PrintDefaults() }
	cfg := perftest.Config{Test: test}
	dev := fs.String("d", "", "network device to run on (required)")
	gidIndex := fs.Int("x", -1, "GID index (default: the first IPv4 GID, as perftest picks on RoCE)")
	fs.IntVar(&cfg.Size, "s", 0, "message size in bytes (bw 65536, lat 2)")
	fs.IntVar(&cfg.Iters, "n", 0, "iterations (write-bw 5000, others 1000)")
	fs.BoolVar(&cfg.All, "a", false, "run every size from 2 to 8388608 bytes")
	dur := fs.Int("D", 0, "run for this many seconds instead of -n iterations (bw tests)")
	fs.IntVar(&cfg.QPs, "q", 1, "QPs (bandwidth tests)")
	mtu := fs.Int("m", 0, "IB MTU in bytes, 256..4096 (default: the port's, from the netdev MTU)")
	tcpPort := fs.Int("p", perftest.Port, "TCP port of the exchange")
	fs.StringVar(&cfg.Atomic, "A", perftest.FetchAndAdd, "atomic type: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.IntVar(&cfg.TxDepth, "t", 0, "send queue depth (bw 128, lat 1)")
	fs.IntVar(&cfg.RxDepth, "r", 0, "receive queue depth (send tests 512)")
	fs.IntVar(&cfg.CQMod, "Q", 0, "signal one completion every this many sends (bw 100; 1 above 8 KiB)")
	fs.IntVar(&cfg.OutReads, "o", 0, "outstanding READs/atomics (softrnic's maximum, 16)")
	fs.BoolVar(&cfg.Gbits, "report_gbits", false, "report bandwidth in Gbit/s")
	fs.Bool("F", false, "accepted for perftest compatibility (CPU frequency checks do not apply)")
	jsonOut := fs.Bool("json", false, "print the results as JSON instead of perftest's table")
	showCounters := fs.Bool("counters", false, "print the NIC's and the port's counters to stderr at the end")
	portKind := fs.String("io", "xsk", "how frames reach the network: xsk (AF_XDP) or udp (kernel UDP socket)")
	fs.SetOutput(stdout)
	rest := args[1:]
	var addr string
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		if addr != "" {
			return fmt.Errorf("more than one server address: %q and %q", addr, fs.Arg(0))
		}
		addr, rest = fs.Arg(0), fs.Args()[1:]
	}
	if *dev == "" {
		return errors.New("-d: name the network device (perftest's -d takes the RDMA device; softrnic runs on the netdev)")
	}
	cfg.Duration = time.Duration(*dur) * time.Second
	if *mtu != 0 {
		if cfg.MTU = netdev.MTUEnum(*mtu); cfg.MTU == 0 {
			return fmt.Errorf("-m %d: want 256, 512, 1024, 2048 or 4096", *mtu)
		}
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	if *portKind != "xsk" && *portKind != "udp" {
		return fmt.Errorf("-io %q: want xsk or udp", *portKind)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	nd, err := netdev.Open(*dev)
	if err != nil {
		return err
	}
	defer nd.Close()
	gid, err := pickGID(nd, *gidIndex)
	if err != nil {
		return err
	}
	ip := gid.Addr()
	ports, closePorts, err := openPorts(nd, *portKind, ip)
	if err != nil {
		return err
	}
	defer closePorts()
	vd, err := verbs.Open(verbs.DeviceConfig{Ports: ports, MAC: nd.MAC, IP: ip})
	if err != nil {
		return err
	}
	defer vd.Close()
	if *showCounters {
		defer func() {
			vd.NIC().Counters().Each(func(name string, v uint64) {
				if v != 0 {
					fmt.Fprintf(os.Stderr, "softrnic: %s %d\n", name, v)
				}
			})
			for i, p := range ports {
				s := p.Stats()
				fmt.Fprintf(os.Stderr, "softrnic: port queue %d: rx %d tx %d drops: not-roce %d runt %d malformed %d too-long %d kernel %d\n", i,
					s.RxFrames.Load(), s.TxFrames.Load(), s.RxDropNotRoCE.Load(), s.RxDropRunt.Load(), s.RxDropMalformed.Load(), s.RxDropTooLong.Load(), s.RxDropKernel.Load())
			}
		}()
	}
	env := perftest.Env{Dev: vd, GID: ip, PortMTU: netdev.MTUEnum(nd.PathMTU()), DevName: nd.Name,
		Resolve: func(ctx context.Context, ip netip.Addr) (wire.MAC, error) {
			hop, err := nd.Resolve(ctx, ip)
			return hop.MAC, err
		}}

	var conn *perftest.Conn
	if addr == "" {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(*tcpPort)))
		if err != nil {
			return err
		}
		defer ln.Close()
		if !*jsonOut {
			fmt.Fprintln(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************")
		}
		if conn, err = perftest.Accept(ctx, ln); err != nil {
			return err
		}
	} else {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err = perftest.Dial(dctx, net.JoinHostPort(addr, strconv.Itoa(*tcpPort)))
		cancel()
		if err != nil {
			return err
		}
	}
	defer conn.Close()
	out := stdout
	if *jsonOut {
		out = nil
	}
	res, err := perftest.Run(ctx, env, conn, cfg, out)
	if *jsonOut && len(res) > 0 {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

// pickGID takes GID index x, or with -1 the first IPv4-mapped GID (else
// index 0), as perftest chooses on RoCE.
func pickGID(nd *netdev.Device, x int) (netdev.GID, error) {
	if x >= 0 {
		return nd.GID(x)
	}
	for _, g := range nd.GIDs {
		if g.IsIPv4() {
			return g, nil
		}
	}
	return nd.GID(0)
}

// openPorts opens the device's queues: an AF_XDP socket on every queue,
// or one kernel UDP socket.
func openPorts(nd *netdev.Device, kind string, ip netip.Addr) ([]datapath.Port, func(), error) {
	switch kind {
	case "xsk":
		d, err := xsk.Open(nd.Name, xsk.Config{}, log.Printf)
		if err != nil {
			return nil, nil, err
		}
		var ports []datapath.Port
		for _, s := range d.Sockets() {
			ports = append(ports, s)
		}
		return ports, func() { d.Close() }, nil
	case "udp":
		u, err := udpport.Open(udpport.Config{Local: ip, LocalMAC: nd.MAC, Buffers: 8192})
		if err != nil {
			return nil, nil, err
		}
		return []datapath.Port{u}, func() { u.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-io %q: want xsk or udp", kind)
}
