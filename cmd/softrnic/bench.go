package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/internal/bench/cachebench"
	"github.com/softrnic/softrnic/internal/bench/portbench"
	"github.com/softrnic/softrnic/internal/bench/relbench"
	"github.com/softrnic/softrnic/internal/topo"
)

// benchmarks are `softrnic bench`'s subcommands.
// benchNames lists the benchmarks' names, for the top-level usage.
func benchNames() string {
	var names []string
	for _, b := range benchmarks {
		names = append(names, b.name)
	}
	return strings.Join(names, ", ")
}

var benchmarks = []struct {
	name, summary string
	run           func(args []string, stdout io.Writer) error
}{
	{"frames", "frame rates of the xsk and udp ports, kernel UDP and iperf3 over a veth pair (root)", runBenchFrames},
	{"cache", "GCCache against the blocking baseline: latency, head-of-line blocking, host fetches, throughput", runBenchCache},
	{"write", "RDMA WRITE throughput over a veth pair beside the raw xsk frame rate (root)", runBenchWrite},
	{"replay", "one QP's throughput for each replay allocation beside min(link, allocation x MTU / RTT)", runBenchReplay},
	{"loss", "WRITE and READ goodput under random loss, as a fraction of lossless (go-back-N)", runBenchLoss},
	{"shallow", "4 WRITE QPs and a READ stream through a queue shallower than their windows", runBenchShallow},
	{"incast", "8 to 64 sender QPs into one receiver through one shallow ECN queue: window against DCQCN", runBenchIncast},
	{"isolation", "a QP stalled at the replay gate beside one that keeps sending, on one engine", runBenchIsolation},
	{"hol", "hot QPs' WRITE latency beside cold QPs whose contexts miss, with GCCache and with the blocking baseline", runBenchHOL},
	{"scale", "aggregate WRITE throughput over 1 to 16K QPs on two live NICs, the QP contexts behind GCCache and behind the baseline", runBenchScale},
	{"hpu", "sPIN handlers: scheduler latency and rate, handlers on a veth pair, the applications against the host", runBenchHPU},
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: softrnic bench <benchmark> [flags]")
	fmt.Fprintln(w, "\nbenchmarks:")
	for _, b := range benchmarks {
		fmt.Fprintf(w, "  %-7s %s\n", b.name, b.summary)
	}
	fmt.Fprintln(w, "\nEach takes -h for its flags: softrnic bench frames -h, or softrnic help bench frames.")
}

// runBench dispatches the benchmarks.
func runBench(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return badUsage(benchUsage, "no benchmark named")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return &helpRequest{benchUsage}
	}
	for _, b := range benchmarks {
		if b.name == args[0] {
			return b.run(args[1:], stdout)
		}
	}
	return badUsage(benchUsage, "unknown benchmark %q", args[0])
}

// benchProgress starts a benchmark's status line (on a terminal) and
// returns it with stdout made to keep clear of it.
func benchProgress(name string, stdout io.Writer) (*progress, io.Writer) {
	p := startProgress(name)
	return p, p.output(stdout)
}

// noArgs refuses arguments after a benchmark's flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return badUsage(flagUsage(fs), "%s takes no arguments, not %q", fs.Name(), fs.Args())
	}
	return nil
}

func runBenchCache(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench cache", "bench cache [flags]",
		"GCCache against the blocking baseline in one run: hit latency, head-of-line\nblocking, redundant host fetches and throughput, each claim checked.\n")
	dur := fs.Duration("d", time.Second, "time per latency and throughput measurement")
	lookups := fs.Int("n", 200000, "lookups per redundancy workload")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	p, stdout := benchProgress("bench cache", stdout)
	defer p.stop()
	fmt.Fprintf(stdout, "GCCache against the blocking baseline, %v per measurement (GOMAXPROCS %d)\n\n", *dur, runtime.GOMAXPROCS(0))
	ok, err := cachebench.Report(stdout, cachebench.Config{Duration: *dur, Lookups: *lookups})
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("a claim did not hold in this run")
	}
	return nil
}

func runBenchHOL(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench hol", "bench hol [flags]",
		"Two live NICs over the in-memory port behind a 2 us PCIe model; one WRITE on\nevery QP per round, half the QPs cold (their QP contexts evicted on both NICs\nbefore each round). Prints the hot QPs' completion latency all hot, half cold,\nand half cold with the blocking baseline QPC cache; the runs go several times,\ninterleaved, and each row is the median of its repeats.\n")
	qps := fs.Int("q", 32, "QPs, half of them cold")
	rounds := fs.Int("n", 5000, "rounds")
	pcie := fs.Duration("pcie", 2*time.Microsecond, "DMA latency")
	repeats := fs.Int("repeats", 5, "times the four runs go, interleaved, each with its share of the rounds (p50 and p99: the medians of the repeats')")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *qps < 2 || *qps > 4096 {
		return badValue("-q %d: want 2 to 4096 QPs", *qps)
	}
	if *rounds < 1 {
		return badValue("-n %d: want at least 1 round", *rounds)
	}
	if *repeats < 1 || *repeats > *rounds {
		return badValue("-repeats %d: want 1 to the rounds (%d)", *repeats, *rounds)
	}
	p, stdout := benchProgress("bench hol", stdout)
	defer p.stop()
	return cachebench.ReportHOL(stdout, cachebench.HOLConfig{QPs: *qps, Rounds: *rounds, PCIe: *pcie, Repeats: *repeats, Progress: p.stepFunc()})
}

func runBenchScale(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench scale", "bench scale [flags]",
		"Two live NICs over the in-memory port; 4 KiB WRITEs spread round-robin over\n1, 16, 256, 4K and 16K QPs; the QP contexts behind GCCache, then behind the\nblocking baseline; DMA latency 1 us. Prints each point against one QP.\n")
	dur := fs.Duration("d", time.Second, "time per point")
	qps := fs.String("q", "1,16,256,4096,16384", "QP counts, comma-separated")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the GCCache run at the last QP count to this file")
	sets := fs.Int("sets", 512, "QP context cache sets (8192 with 4 ways holds 32K QPs: no context misses, only the cost of cold per-QP state)")
	ways := fs.Int("ways", 4, "QP context cache ways")
	gcOnly := fs.Bool("gccache-only", false, "skip the baseline's points")
	obs := addBenchObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	var counts []int
	for _, f := range strings.Split(*qps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65536 {
			return badValue("-q %q: want QP counts from 1 to 65536", *qps)
		}
		counts = append(counts, n)
	}
	if *sets < 1 || *sets > 1<<20 {
		return badValue("-sets %d: want 1 to %d", *sets, 1<<20)
	}
	if *ways < 1 || *ways > 32 {
		return badValue("-ways %d: want 1 to 32", *ways)
	}
	hooks, stop, err := obs.hooks()
	if err != nil {
		return err
	}
	defer stop()
	cfg := cachebench.ScaleConfig{QPs: counts, Duration: *dur, Sets: *sets, Ways: *ways, GCCacheOnly: *gcOnly, Observe: hooks}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	p, stdout := benchProgress("bench scale", stdout)
	defer p.stop()
	cfg.Progress = p.stepFunc()
	return cachebench.ReportScale(stdout, cfg)
}

func runBenchFrames(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench frames", "bench frames [flags]",
		"Frame rates across a veth pair between two namespaces through the AF_XDP\nport, the UDP port, kernel UDP sockets and iperf3 (root).\n")
	sizes := fs.String("s", "64,1024,4096", "IB payload sizes, comma-separated")
	dur := fs.Duration("d", 2*time.Second, "measurement time per cell")
	batch := fs.Int("b", 64, "frames per batch")
	methods := fs.String("m", "", "methods, comma-separated (default all: xsk,udp port,kernel UDP,kernel UDP GSO,iperf3 TCP)")
	mtu := fs.Int("mtu", 9000, "veth MTU")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the benchmark creates network namespaces: run it as root")
	}
	cfg := portbench.Config{Duration: *dur, Batch: *batch, MTU: *mtu}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("bad size %q", s)
		}
		cfg.Payloads = append(cfg.Payloads, n)
	}
	if *methods != "" {
		for _, m := range strings.Split(*methods, ",") {
			cfg.Methods = append(cfg.Methods, strings.TrimSpace(m))
		}
	}
	p, stdout := benchProgress("bench frames", stdout)
	defer p.stop()
	cfg.Progress = p.stepFunc()
	fmt.Fprintf(stdout, "frame rates across a veth pair between two namespaces (MTU %d), %v per cell, batches of %d, one sender and one receiver\n\n",
		*mtu, *dur, *batch)
	results, err := portbench.Run(cfg)
	if err != nil {
		return err
	}
	printFrameResults(stdout, results)
	return nil
}

func printFrameResults(w io.Writer, results []portbench.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "payload B\tmethod\tframe B\tpackets/s\tGbit/s\tvs kernel UDP\tallocs/frame\t")
	base := map[int]float64{}
	for _, r := range results {
		if r.Method == portbench.KernelUDP && r.Err == nil {
			base[r.Payload] = r.PPS()
		}
	}
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(tw, "%d\t%s\t\t\t\t%v\t\t\n", r.Payload, r.Method, r.Err)
			continue
		}
		pps, vs, allocs, size := "-", "-", "-", "-"
		payload := strconv.Itoa(r.Payload)
		if r.Payload == 0 {
			payload = "128K writes"
		}
		if !strings.HasPrefix(r.Method, portbench.IPerf3) {
			pps = fmt.Sprintf("%.0f", r.PPS())
			allocs = fmt.Sprintf("%.2f", r.Allocs)
			size = strconv.Itoa(r.FrameSize)
			if b := base[r.Payload]; b > 0 {
				vs = fmt.Sprintf("%.2fx", r.PPS()/b)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", payload, r.Method, size, pps, r.Gbps(), vs, allocs)
	}
	tw.Flush()
}

// runBenchWrite measures RDMA WRITE throughput between two NICs over a veth
// pair (xsk port, IB MTU 4096) and, in the same run, the xsk port's raw
// frame rate with 4096-byte payloads: the protocol's cost over raw frames.
// runBenchReplay is `softrnic bench replay`: the seed's claim that a QP
// sends at most its replay allocation per round trip, measured.
func runBenchReplay(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench replay", "bench replay [flags]",
		"One RC QP's 64 KiB WRITE throughput over the in-memory port with an added\nround trip, for each replay allocation, beside min(link, allocation x MTU / RTT).\n")
	allocs := fs.String("a", "4,8,16,32,64,128,256", "replay allocations (entries), comma-separated")
	rtt := fs.Duration("rtt", 10*time.Millisecond, "added round trip")
	link := fs.Float64("link", 2, "link rate each way, Gbit/s")
	dur := fs.Duration("d", time.Second, "time per allocation")
	obs := addBenchObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg := relbench.Config{RTT: *rtt, LinkGbits: *link, Duration: *dur}
	for _, a := range strings.Split(*allocs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(a))
		if err != nil || n < 1 {
			return badValue("-a: bad allocation %q", a)
		}
		cfg.Allocations = append(cfg.Allocations, n)
	}
	if *rtt <= 0 || *link <= 0 || *dur <= 0 {
		return badValue("-rtt, -link and -d must be positive")
	}
	hooks, stop, err := obs.hooks()
	if err != nil {
		return err
	}
	defer stop()
	cfg.Observe = hooks
	p, stdout := benchProgress("bench replay", stdout)
	defer p.stop()
	cfg.Progress = p.stepFunc()
	ok, err := relbench.Report(stdout, cfg)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(stdout, "\nnot every row came within 20 % of its prediction")
	} else {
		fmt.Fprintln(stdout, "\nevery row within 20 % of its prediction")
	}
	return nil
}

// runBenchLoss is `softrnic bench loss`.
func runBenchLoss(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench loss", "bench loss [flags]",
		"One RC QP's 64 KiB WRITE and READ goodput over the in-memory port losing\nframes at random, as a fraction of the lossless goodput.\n")
	rates := fs.String("l", "0,0.1,1,5", "loss rates in percent, comma-separated")
	n := fs.Int("n", 1000, "messages per cell")
	rtt := fs.Duration("rtt", 200*time.Microsecond, "added round trip")
	obs := addBenchObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg := relbench.LossConfig{Messages: *n, RTT: *rtt}
	for _, r := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v < 0 || v >= 100 {
			return badValue("-l: bad loss rate %q", r)
		}
		cfg.Rates = append(cfg.Rates, v/100)
	}
	if *n < 1 || *rtt <= 0 {
		return badValue("-n and -rtt must be positive")
	}
	hooks, stop, err := obs.hooks()
	if err != nil {
		return err
	}
	defer stop()
	cfg.Observe = hooks
	p, stdout := benchProgress("bench loss", stdout)
	defer p.stop()
	cfg.Progress = p.stepFunc()
	return relbench.ReportLoss(stdout, cfg)
}

// runBenchIncast is `softrnic bench incast`.
func runBenchIncast(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench incast", "bench incast [flags]",
		"N sender QPs WRITE into one receiver at once through one shallow queue that\nmarks ECN: goodput against the link, fairness, queueing delay, with the\ncongestion window and with DCQCN.\n")
	senders := fs.String("senders", "8,16,32,64", "sender QP counts, comma-separated")
	mib := fs.Int("mib", 32, "MiB each run moves, shared by its senders")
	queue := fs.Int("queue", 128<<10, "the queue in bytes")
	mark := fs.Int("ecn", 32<<10, "mark Congestion Experienced above this many queued bytes")
	rtt := fs.Duration("rtt", 100*time.Microsecond, "added round trip")
	link := fs.Float64("link", 2, "link rate, Gbit/s")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg := relbench.IncastConfig{Bytes: *mib << 20, QueueBytes: *queue, MarkBytes: *mark, RTT: *rtt, LinkGbits: *link}
	for _, v := range strings.Split(*senders, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 128 {
			return badValue("-senders: %q is not a count from 1 to 128", v)
		}
		cfg.Senders = append(cfg.Senders, n)
	}
	if *mib < 1 || *queue < 1 || *mark < 1 || *rtt <= 0 || *link <= 0 {
		return badValue("-mib, -queue, -ecn, -rtt and -link must be positive")
	}
	p, stdout := benchProgress("bench incast", stdout)
	defer p.stop()
	cfg.Progress = p.stepFunc()
	_, err := relbench.ReportIncast(stdout, cfg)
	return err
}

// runBenchShallow is `softrnic bench shallow`.
func runBenchShallow(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench shallow", "bench shallow [flags]",
		"Four QPs of 64 KiB WRITEs and one of 64 KiB READs between two NICs through a\nlink whose queue holds less than their windows: time, goodput, retransmissions.\n")
	queue := fs.Int("queue", 64<<10, "the link's queue in bytes")
	rtt := fs.Duration("rtt", time.Millisecond, "added round trip")
	link := fs.Float64("link", 2, "link rate each way, Gbit/s")
	mark := fs.Int("ecn", 0, "the ECN rows mark Congestion Experienced above this many queued bytes (0: half the queue)")
	n := fs.Int("n", 200, "64 KiB WRITEs per QP (the READ stream is half as long)")
	obs := addBenchObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *queue < 1 || *rtt <= 0 || *link <= 0 || *mark < 0 || *n < 2 {
		return badValue("-queue, -rtt and -link must be positive, -n at least 2, -ecn at least 0")
	}
	hooks, stop, err := obs.hooks()
	if err != nil {
		return err
	}
	defer stop()
	p, stdout := benchProgress("bench shallow", stdout)
	defer p.stop()
	cfg := relbench.ShallowConfig{QueueBytes: *queue, RTT: *rtt, LinkGbits: *link, MarkBytes: *mark, Messages: *n, Reads: *n / 2, Progress: p.stepFunc(), Observe: hooks}
	_, err = relbench.ReportShallow(stdout, cfg)
	return err
}

// runBenchIsolation is `softrnic bench isolation`.
func runBenchIsolation(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench isolation", "bench isolation [flags]",
		"QP A, with a small replay allocation, writes to a slow peer while QP B on the\nsame engine writes to a near one: B's throughput alone and beside A.\n")
	alloc := fs.Int("a", 4, "A's replay entries")
	slow := fs.Duration("slow", 20*time.Millisecond, "extra one-way delay of A's peer")
	dur := fs.Duration("d", time.Second, "time per measurement")
	obs := addBenchObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *alloc < 1 || *slow <= 0 || *dur <= 0 {
		return badValue("-a, -slow and -d must be positive")
	}
	hooks, stop, err := obs.hooks()
	if err != nil {
		return err
	}
	defer stop()
	p, stdout := benchProgress("bench isolation", stdout)
	defer p.stop()
	_, err = relbench.ReportIsolation(stdout, relbench.IsolationConfig{AllocA: *alloc, SlowDelay: *slow, Duration: *dur, Observe: hooks})
	return err
}

func runBenchWrite(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench write", "bench write [flags]",
		"RDMA WRITE throughput between two softrnic NICs over a veth pair (xsk port,\nIB MTU 4096) beside the xsk port's raw frame rate in the same run (root).\n")
	size := fs.Int("s", 64<<10, "message size")
	iters := fs.Int("n", 4000, "messages")
	dur := fs.Duration("d", 2*time.Second, "time for the raw frame measurement")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the RDMA WRITE run to this file")
	obs := addObserveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *size < 1 || *iters < 1 {
		return badValue("-s %d -n %d: want at least one byte and one message", *size, *iters)
	}
	if os.Geteuid() != 0 {
		return errors.New("the benchmark creates network namespaces: run it as root")
	}
	p, stdout := benchProgress("bench write", stdout)
	defer p.stop()
	p.set("raw frames")
	raw, err := portbench.Run(portbench.Config{Payloads: []int{4096}, Duration: *dur, Methods: []string{portbench.XSK}, MTU: 9000})
	if err != nil {
		return err
	}
	stopPcap, err := obs.startPcap()
	if err != nil {
		return err
	}
	defer stopPcap() // after the NICs have closed
	spec := topo.PairSpec(9000, 1)
	tp, err := topo.Build(spec)
	if err != nil {
		return err
	}
	defer tp.Close()
	l := spec.Links[0]
	a, err := newDemoEnd(tp.NS("a"), l.A, "xsk", "", 2*(*size)+4096)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newDemoEnd(tp.NS("b"), l.B, "xsk", "", 2*(*size)+4096)
	if err != nil {
		return err
	}
	defer b.close()
	stopMetrics, err := obs.serve(a, b)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 5, 14); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	p.set(fmt.Sprintf("%d RDMA WRITEs", *iters))
	elapsed, err := demoOp(a, b, verbs.WRRDMAWrite, *size, *iters)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	write := float64(*size) * float64(*iters) * 8 / elapsed.Seconds() / 1e9
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "veth MTU 9000, one run\tGbit/s\tpackets/s\t")
	fmt.Fprintf(tw, "xsk port, raw frames, 4096-byte payloads\t%.2f\t%.0f\t\n", raw[0].Gbps(), raw[0].PPS())
	fmt.Fprintf(tw, "RDMA WRITE %d B, 1 QP, 16 in flight, IB MTU 4096\t%.2f\t%.0f\t\n", *size, write, write*1e9/8/4096)
	tw.Flush()
	fmt.Fprintf(stdout, "\nRDMA WRITE reaches %.0f%% of the raw frame rate\n", 100*write/raw[0].Gbps())
	return nil
}
