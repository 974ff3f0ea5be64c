package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/perftest"
)

const perfText = `tests: send-bw write-bw read-bw atomic-bw send-lat write-lat read-lat atomic-lat

Without an address it is the server and waits for a client; with one it
is the client. Flags follow perftest's ib_* tools and may come before or
after the test; a softrnic peer and a perftest peer are alike to it.
`

// perfFlags are `softrnic perf`'s flags, the same for every test.
type perfFlags struct {
	fs           *flag.FlagSet
	cfg          perftest.Config
	dev          *string
	gidIndex     *int
	dur          *int
	mtu          *int
	tcpPort      *int
	jsonOut      *bool
	showCounters *bool
	portKind     *string
	poll         *string
	pollMode     datapath.PollMode
	ecn          *string
	ecnMode      datapath.ECN
	cpu          *bool
	latLog       *string
	pcap         *string
	metricsAddr  *string
	pprof        *bool
	commCM       *bool
	conn         *string
	timeout      *int
	sl           *int
	tos          *int
	ibPort       *int
	sourceIP     *string
	ipv6         *bool
}

func newPerfFlags() *perfFlags {
	fs := newFlagSet("perf", "perf <test> [flags] [server address]", perfText)
	p := &perfFlags{fs: fs}
	cfg := &p.cfg
	p.dev = fs.String("d", "", "network device to run on (required)")
	p.gidIndex = fs.Int("x", -1, "GID index (default: the first IPv4 GID, as perftest picks on RoCE)")
	fs.IntVar(&cfg.Size, "s", 0, "message size in bytes, at least 1 (default: bw 65536, lat 2; atomics 8)")
	fs.IntVar(&cfg.Iters, "n", 0, "iterations (write-bw 5000, others 1000)")
	fs.BoolVar(&cfg.All, "a", false, "run every size from 2 to 8388608 bytes")
	p.dur = fs.Int("D", 0, "run for this many seconds instead of -n iterations, measuring between a warm-up and a cool-down of a quarter each (whole seconds)")
	fs.IntVar(&cfg.QPs, "q", 1, "QPs (bandwidth tests)")
	fs.BoolVar(&cfg.Bidir, "b", false, "bidirectional: both sides send (send-bw, write-bw, read-bw); each prints the sum of both")
	fs.BoolVar(&cfg.Bidir, "bidirectional", false, "same as -b")
	p.mtu = fs.Int("m", 0, "IB MTU in bytes, 256..4096 (default: the port's, from the netdev MTU)")
	p.tcpPort = fs.Int("p", perftest.Port, "port of the exchange: TCP, or rdma_cm's with -R or -z")
	fs.BoolVar(&cfg.RDMACM, "R", false, "connect the QPs through rdma_cm (the IB CM on QP1) and run the test on them; the exchange runs over rdma_cm too (perftest -R)")
	fs.BoolVar(&cfg.RDMACM, "rdma_cm", false, "same as -R")
	p.commCM = fs.Bool("z", false, "run the exchange over an rdma_cm connection; the QPs connect as without it (perftest -z)")
	fs.BoolVar(p.commCM, "comm_rdma_cm", false, "same as -z")
	fs.StringVar(&cfg.Atomic, "A", perftest.FetchAndAdd, "atomic type: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.IntVar(&cfg.TxDepth, "t", 0, "send queue depth (bw 128, lat 1)")
	fs.IntVar(&cfg.RxDepth, "r", 0, "receive queue depth (send tests 512)")
	fs.IntVar(&cfg.CQMod, "Q", 0, "signal one completion every this many sends (bw 100; 1 above 8 KiB)")
	fs.IntVar(&cfg.OutReads, "o", 0, "outstanding READs/atomics (softrnic's maximum, 16)")
	fs.BoolVar(&cfg.Gbits, "report_gbits", false, "report bandwidth in Gbit/s")
	fs.BoolVar(&cfg.SR, "sr", false, "selective repeat instead of go-back-N, if the peer is a softrnic perf --sr too (softrnic's own)")
	fs.Bool("F", false, "accepted for perftest compatibility (CPU frequency checks do not apply)")
	p.jsonOut = fs.Bool("json", false, "print the results as JSON instead of perftest's table")
	p.showCounters = fs.Bool("counters", false, "print the NIC's and the port's counters to stderr at the end")
	p.poll = fs.String("poll", "app", "how the NIC is driven: app (the test's own polling runs the NIC, as perftest busy-polls), sleep (engines sleep when idle), adaptive (poll 50 us, then sleep) or spin (a core each)")
	p.metricsAddr = fs.String("metrics", "", "serve the NIC's counters as Prometheus metrics at http://ADDR/metrics during the run")
	p.pprof = fs.Bool("pprof", false, "with --metrics, serve Go's pprof at /debug/pprof/ on the same listener")
	p.pcap = fs.String("pcap", "", "record every frame the NIC sends and receives in this pcapng file (interfaces \"QUEUE rx\" and \"QUEUE tx\")")
	p.latLog = fs.String("latency-log", "", "write every iteration's latency (microseconds, one a line) of a latency test to this file")
	p.cpu = fs.Bool("cpu", false, "print the process's CPU time per iteration (user and system, every thread: the test's and the NIC's) after the results")
	p.portKind = fs.String("io", "xsk", "how frames reach the network: xsk (AF_XDP, needs root) or udp (kernel UDP socket)")
	p.ecn = ecnFlag(fs)
	p.conn = fs.String("c", "RC", "connection type: RC, UC (send and write tests) or UD (send tests), as perftest's -c; both sides must run the same")
	fs.IntVar(&cfg.Inline, "I", 0, "most bytes a send carries inline (latency tests 220 for write, 236 for send, 188 for UD send; bandwidth tests 0)")
	fs.IntVar(&cfg.PostList, "l", 0, "post the work requests in lists of this many (bandwidth tests; signals one completion a list unless -Q)")
	p.timeout = fs.Int("u", 14, "RC QPs' local ACK timeout exponent: 4.096 us x 2^u")
	fs.BoolVar(&cfg.Events, "e", false, "sleep on completion events instead of busy-polling (send and READ tests; not with -D)")
	p.sl = fs.Int("S", 0, "service level 0..15 (accepted: a RoCEv2 frame without a VLAN tag carries none)")
	p.tos = fs.Int("T", -1, "with -R: the test QPs' type of service 0..255, rdma_cm's TOS (their frames' DSCP is its upper six bits; the ECN bits are --ecn's)")
	fs.BoolVar(&cfg.NoPeak, "N", false, "leave the bandwidth peak out (0.00)")
	fs.BoolVar(&cfg.Unsorted, "U", false, "latency tests: print every sample, in the order taken, before the row")
	fs.BoolVar(&cfg.Histogram, "H", false, "latency tests: print the samples sorted (without the two largest) before the row")
	fs.BoolVar(&cfg.Infinite, "run_infinitely", false, "bandwidth tests: run until stopped, printing a row every -D seconds (default 5)")
	fs.BoolVar(&cfg.CPUUtil, "cpu_util", false, "with -D: add the machine's CPU use over the sample (CPU_Util[%], from /proc/stat) to the row")
	fs.BoolVar(&cfg.WarmUp, "perform_warm_up", false, "WRITE, READ and atomic bandwidth clients: a send queue's worth of work requests on every QP before the measured run")
	p.sourceIP = fs.String("source_ip", "", "the client's address for the exchange's TCP connection (the server listens on it)")
	p.ipv6 = fs.Bool("ipv6", false, "use the first IPv6 GID instead of the first IPv4 one (unless -x)")
	p.ibPort = fs.Int("i", 1, "port of the device (softrnic's devices have one: 1)")
	// perftest's long forms of the flags, as its getopt_long takes them
	// (--size 64 and --size=64 alike).
	for _, a := range [][2]string{
		{"s", "size"}, {"n", "iters"}, {"q", "qp"}, {"d", "ib-dev"}, {"p", "port"}, {"m", "mtu"},
		{"t", "tx-depth"}, {"r", "rx-depth"}, {"x", "gid-index"}, {"i", "ib-port"}, {"a", "all"},
		{"D", "duration"}, {"Q", "cq-mod"}, {"o", "outs"}, {"A", "atomic_type"}, {"c", "connection"},
		{"I", "inline_size"}, {"l", "post_list"}, {"u", "qp-timeout"}, {"e", "events"}, {"S", "sl"},
		{"T", "tos"}, {"N", "noPeak"}, {"U", "report-unsorted"}, {"H", "report-histogrm"},
		{"H", "report-histogram"}, {"F", "CPU-freq"},
	} {
		fs.Var(fs.Lookup(a[0]).Value, a[1], "same as -"+a[0])
	}
	return p
}

// parse reads the command line: flags anywhere, then the test and at most
// one server address. It checks the configuration as Run would, and
// refuses a size given as less than one byte instead of taking the default.
func (p *perfFlags) parse(args []string) (addr string, err error) {
	usage := flagUsage(p.fs)
	var words []string
	for rest := args; ; {
		if err := parseFlags(p.fs, rest); err != nil {
			return "", err
		}
		if p.fs.NArg() == 0 {
			break
		}
		words, rest = append(words, p.fs.Arg(0)), p.fs.Args()[1:]
	}
	if len(words) == 0 {
		return "", badUsage(usage, "no test named")
	}
	if p.cfg.Test, err = perftest.ParseTest(words[0]); err != nil {
		return "", badUsage(usage, "%v", err)
	}
	switch len(words) {
	case 1:
	case 2:
		addr = words[1]
	default:
		return "", badUsage(usage, "more than one server address: %q and %q", words[1], words[2])
	}
	if *p.dev == "" {
		return "", badUsage(usage, "-d: name the network device (perftest's -d takes the RDMA device; softrnic runs on the netdev)")
	}
	// perftest.Config takes size 0 for the test's default: an explicit -s
	// must be a size.
	if flagGiven(p.fs, "s") && p.cfg.Size < 1 {
		return "", badValue("-s %d: a message size is at least 1 byte (leave -s out for the default: bw 65536, lat 2)", p.cfg.Size)
	}
	p.cfg.Duration = time.Duration(*p.dur) * time.Second
	if p.cfg.Conn, err = perftest.ParseConn(*p.conn); err != nil {
		return "", badValue("%v", err)
	}
	if *p.timeout < 0 || *p.timeout > 31 {
		return "", badValue("-u %d: a QP timeout exponent is 0..31", *p.timeout)
	}
	p.cfg.Timeout = uint8(*p.timeout)
	if *p.sl < 0 || *p.sl > 15 {
		return "", badValue("-S %d: a service level is 0..15", *p.sl)
	}
	if *p.tos >= 0 {
		if *p.tos > 255 {
			return "", badValue("-T %d: a type of service is 0..255", *p.tos)
		}
		if !p.cfg.RDMACM {
			return "", badValue("-T %d: a type of service is rdma_cm's: give -R too (as perftest)", *p.tos)
		}
		p.cfg.TOS = uint8(*p.tos)
	}
	if *p.ibPort != 1 {
		return "", badValue("-i %d: softrnic's devices have one port, 1", *p.ibPort)
	}
	if *p.sourceIP != "" {
		if _, perr := netip.ParseAddr(*p.sourceIP); perr != nil {
			return "", badValue("--source_ip %q: not an IP address", *p.sourceIP)
		}
	}
	if p.cfg.CPUUtil && p.cfg.Duration == 0 {
		fmt.Fprintln(os.Stderr, " CPU Utilization works only with Duration mode.")
	}
	if *p.mtu != 0 {
		if p.cfg.MTU = netdev.MTUEnum(*p.mtu); p.cfg.MTU == 0 {
			return "", badValue("-m %d: want 256, 512, 1024, 2048 or 4096", *p.mtu)
		}
	}
	if err := p.cfg.Check(); err != nil {
		return "", badValue("%v", err)
	}
	if *p.tcpPort < 1 || *p.tcpPort > 65535 {
		return "", badValue("-p %d: a port is 1..65535", *p.tcpPort)
	}
	if p.cfg.RDMACM && *p.commCM {
		return "", badValue("-R runs the exchange over rdma_cm already: give -R or -z, not both")
	}
	if *p.portKind != "xsk" && *p.portKind != "udp" {
		return "", badValue("-io %q: want xsk or udp", *p.portKind)
	}
	mode, err := datapath.ParsePollMode(*p.poll)
	if err != nil {
		return "", badValue("-poll %q: want app, sleep, adaptive or spin", *p.poll)
	}
	p.pollMode = mode
	if p.ecnMode, err = parseECN(*p.ecn); err != nil {
		return "", err
	}
	return addr, nil
}

// runPerf is `softrnic perf`: perftest's tests, as client or server.
func runPerf(args []string, stdout io.Writer) error {
	pf := newPerfFlags()
	addr, err := pf.parse(args)
	if err != nil {
		return err
	}
	cfg := pf.cfg
	cfg.Samples = *pf.latLog != ""
	dev, gidIndex, tcpPort, jsonOut, showCounters, portKind := pf.dev, pf.gidIndex, pf.tcpPort, pf.jsonOut, pf.showCounters, pf.portKind
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	poll, budget := pf.pollMode, time.Duration(0)
	if poll == datapath.PollApp && addr == "" && passiveServer(cfg.Test) {
		// This side's test polls nothing while the peer works (perftest's
		// server of a WRITE, READ or atomic test waits on its socket):
		// with -poll app its NIC polls on its own instead, each engine
		// while it has work and for passivePollBudget after (adaptive):
		// an engine whose queue carries the test never sleeps during it,
		// and on a port with several queues, one whose queue carries
		// nothing sleeps rather than holding a core the busy ones and
		// the peer need.
		poll, budget = datapath.PollAdaptive, passivePollBudget
	}
	if cfg.Events && !flagGiven(pf.fs, "poll") {
		// -e: the test sleeps on its CQ, so the NIC runs on its own
		// (PollApp would run it only while the test polls).
		poll = datapath.PollAdaptive
	}
	e, closeNIC, err := openNIC(nicOptions{dev: *dev, gidIndex: *gidIndex, ipv6: *pf.ipv6, portKind: *portKind, poll: poll, pollBudget: budget, ecn: pf.ecnMode,
		pcap: *pf.pcap, metricsAddr: *pf.metricsAddr, pprof: *pf.pprof, qps: cfg.QPs})
	if err != nil {
		return err
	}
	defer closeNIC()
	nd, vd, ports, ip := e.nd, e.dev, e.ports, e.ip
	if *showCounters {
		defer func() {
			vd.NIC().Counters().Each(func(name string, v uint64) {
				if v != 0 {
					fmt.Fprintf(os.Stderr, "softrnic: %s %d\n", name, v)
				}
			})
			for i, p := range ports {
				s := p.Stats()
				fmt.Fprintf(os.Stderr, "softrnic: port queue %d: rx %d tx %d drops: not-roce %d fragment %d runt %d malformed %d too-long %d kernel %d; tx-segmented %d rx-coalesced %d rx-fill-grown %d\n", i,
					s.RxFrames.Load(), s.TxFrames.Load(), s.RxDropNotRoCE.Load(), s.RxDropFragment.Load(), s.RxDropRunt.Load(), s.RxDropMalformed.Load(), s.RxDropTooLong.Load(), s.RxDropKernel.Load(),
					s.TxSegmented.Load(), s.RxCoalesced.Load(), s.RxFillGrown.Load())
			}
		}()
	}
	env := perftest.Env{Dev: vd, GID: ip, PortMTU: vd.ActiveMTU(), DevName: nd.Name, Resolve: e.resolve}

	var conn *perftest.Conn
	switch {
	case cfg.RDMACM || *pf.commCM:
		// The exchange (and with -R the test's QPs) through the CM.
		agent, err := cm.NewAgent(vd, ip, cm.Config{Resolve: e.resolve})
		if err != nil {
			return err
		}
		defer agent.Close()
		if addr == "" {
			if !*jsonOut {
				fmt.Fprintln(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************")
			}
			if conn, err = perftest.AcceptCM(ctx, agent, uint16(*tcpPort)); err != nil {
				return err
			}
			break
		}
		server, err := cm.ResolveAddr(ctx, net.JoinHostPort(addr, strconv.Itoa(*tcpPort)))
		if err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		quiet := sayRetrying(server.String())
		conn, err = perftest.DialCM(dctx, agent, server)
		quiet()
		cancel()
		if err != nil {
			return err
		}
	case addr == "":
		ln, err := net.Listen("tcp", net.JoinHostPort(*pf.sourceIP, strconv.Itoa(*tcpPort)))
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
	default:
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		to := net.JoinHostPort(addr, strconv.Itoa(*tcpPort))
		quiet := sayRetrying(to)
		var from netip.Addr
		if *pf.sourceIP != "" {
			from = netip.MustParseAddr(*pf.sourceIP) // checked by parse
		}
		conn, err = perftest.DialFrom(dctx, to, from)
		quiet()
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
	var prog *progress // -a: the size being measured, on a terminal
	if cfg.All && (addr != "" || !passiveServer(cfg.Test)) {
		prog = startProgress("perf " + cfg.Test.String())
		out = prog.perfSizes(out)
	}
	var ru0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	res, err := perftest.Run(ctx, env, conn, cfg, out)
	prog.stop()
	if *pf.cpu && err == nil {
		var ru1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		iters := 0
		for _, r := range res {
			iters += r.Iters
		}
		if c, cerr := cfg.WithDefaults(); iters == 0 && cerr == nil {
			iters = c.Iters // a server that reports nothing (perftest's READ and atomic servers)
		}
		user := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())
		sys := time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())
		if iters > 0 {
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(iters) }
			fmt.Fprintf(stdout, " CPU time: %.2f usec per iteration (user %.2f, sys %.2f; %d iterations, -poll %v)\n",
				per(user+sys), per(user), per(sys), iters, pf.pollMode)
		}
	}
	if *pf.latLog != "" && err == nil {
		if werr := writeSamples(*pf.latLog, res); werr != nil {
			return werr
		}
	}
	if *jsonOut && len(res) > 0 {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

// writeSamples writes the latency samples of the results, one a line.
func writeSamples(name string, res []perftest.Result) error {
	var b strings.Builder
	for _, r := range res {
		for _, v := range r.Samples {
			fmt.Fprintf(&b, "%.3f\n", v)
		}
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}

// passivePollBudget is how long a passive server's engine polls on after
// its last work before it sleeps: longer than any pause of a running test
// (a latency test's peer posts every few microseconds; a scheduling delay
// or a linger is a millisecond at most), so that the engine carrying the
// test does not sleep between its frames.
const passivePollBudget = 10 * time.Millisecond

// passiveServer reports whether a test's server side waits without
// polling while the client runs.
func passiveServer(t perftest.Test) bool {
	switch t {
	case perftest.WriteBW, perftest.ReadBW, perftest.AtomicBW, perftest.ReadLat, perftest.AtomicLat:
		return true
	}
	return false
}

// pickGID takes GID index x, or with -1 the first IPv4-mapped GID (with
// ipv6 the first IPv6 one), else index 0, as perftest chooses on RoCE.
func pickGID(nd *netdev.Device, x int, ipv6 bool) (netdev.GID, error) {
	if x >= 0 {
		return nd.GID(x)
	}
	for _, g := range nd.GIDs {
		if g.IsIPv4() != ipv6 {
			return g, nil
		}
	}
	if ipv6 {
		return netdev.GID{}, fmt.Errorf("--ipv6: %s has no IPv6 GID", nd.Name)
	}
	return nd.GID(0)
}

// openPorts opens the device's queues: an AF_XDP socket on every queue,
// or one kernel UDP socket.
func openPorts(nd *netdev.Device, kind string, ip netip.Addr) ([]datapath.Port, func(), error) {
	switch kind {
	case "xsk":
		d, err := xsk.Open(nd.Name, xsk.Config{Log: slog.Default()}, nil)
		if err != nil {
			return nil, nil, xskError(nd.Name, err, "--io udp")
		}
		var ports []datapath.Port
		for _, s := range d.Sockets() {
			ports = append(ports, s)
		}
		slog.Debug("AF_XDP ports open", "dev", nd.Name, "queues", len(ports), "xdp_mode", d.Program().Mode())
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

// openNetdev opens the device -d names. softrnic sends Ethernet frames: a
// device without an Ethernet address (loopback, a tunnel) is refused with
// that said.
func openNetdev(name string) (*netdev.Device, error) {
	if err := checkEthernet(name); err != nil {
		return nil, err
	}
	return netdev.Open(name)
}

// checkEthernet reports a device that has no Ethernet (6-byte MAC)
// address. A device it cannot find is left for netdev.Open to report.
func checkEthernet(name string) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil || len(ifi.HardwareAddr) == 6 {
		return nil
	}
	what := ""
	if ifi.Flags&net.FlagLoopback != 0 {
		what = " (it is the loopback device)"
	}
	return badValue("-d %s: %s has no Ethernet address%s: softrnic sends RoCEv2 in Ethernet frames and needs an Ethernet device, such as a NIC or a veth", name, name, what)
}

// xskError explains an error opening an AF_XDP port: for want of privileges
// (the XDP program and its maps need CAP_NET_ADMIN and CAP_BPF, the UMEM
// locked memory, CAP_IPC_LOCK), it says what to do, including the flag
// that picks the kernel UDP port instead (udpFlag, "" for none).
func xskError(dev string, err error, udpFlag string) error {
	msg := err.Error()
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) &&
		!strings.Contains(msg, "MEMLOCK") && !strings.Contains(msg, "operation not permitted") {
		return fmt.Errorf("AF_XDP port on %s: %w", dev, err)
	}
	hint := "run softrnic as root (AF_XDP needs CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK)"
	if udpFlag != "" {
		hint += ", or use " + udpFlag + " for a kernel UDP socket, which needs no privileges"
	}
	return fmt.Errorf("AF_XDP port on %s: not permitted: %s (%w)", dev, hint, err)
}

// sayRetrying says on stderr, once a second has gone by without a server
// answering at addr, that the client keeps trying (for 10 s in all, as
// perftest's clients do); the returned function stops it.
func sayRetrying(addr string) (stop func()) {
	t := time.AfterFunc(time.Second, func() {
		fmt.Fprintf(os.Stderr, "softrnic perf: no server answers at %s yet; retrying for up to 10 s\n", addr)
	})
	return func() { t.Stop() }
}
