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

	"github.com/softrnic/softrnic/ctxcache/cachebench"
	"github.com/softrnic/softrnic/datapath/portbench"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/tests/topo"
)

// runBench dispatches the benchmarks.
func runBench(args []string, stdout io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "frames":
		return runBenchFrames(args[1:], stdout)
	case len(args) > 0 && args[0] == "cache":
		return runBenchCache(args[1:], stdout)
	case len(args) > 0 && args[0] == "write":
		return runBenchWrite(args[1:], stdout)
	}
	fmt.Fprintln(stdout, "usage: softrnic bench frames [flags]   frame rates of the xsk and udp ports, kernel UDP and iperf3 over a veth pair")
	fmt.Fprintln(stdout, "       softrnic bench cache [flags]    GCCache against the blocking baseline: latency, head-of-line blocking, host fetches, throughput")
	fmt.Fprintln(stdout, "       softrnic bench write [flags]    RDMA WRITE throughput over a veth pair beside the raw xsk frame rate")
	if len(args) == 0 {
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown benchmark %q", args[0])
}

func runBenchCache(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench cache", flag.ContinueOnError)
	dur := fs.Duration("d", time.Second, "time per latency and throughput measurement")
	lookups := fs.Int("n", 200000, "lookups per redundancy workload")
	if err := fs.Parse(args); err != nil {
		return err
	}
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

func runBenchFrames(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench frames", flag.ContinueOnError)
	sizes := fs.String("s", "64,1024,4096", "IB payload sizes, comma-separated")
	dur := fs.Duration("d", 2*time.Second, "measurement time per cell")
	batch := fs.Int("b", 64, "frames per batch")
	methods := fs.String("m", "", "methods, comma-separated (default all: xsk,udp port,kernel UDP,iperf3 TCP)")
	mtu := fs.Int("mtu", 9000, "veth MTU")
	if err := fs.Parse(args); err != nil {
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
func runBenchWrite(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench write", flag.ContinueOnError)
	size := fs.Int("s", 64<<10, "message size")
	iters := fs.Int("n", 4000, "messages")
	dur := fs.Duration("d", 2*time.Second, "time for the raw frame measurement")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the RDMA WRITE run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the benchmark creates network namespaces: run it as root")
	}
	raw, err := portbench.Run(portbench.Config{Payloads: []int{4096}, Duration: *dur, Methods: []string{portbench.XSK}, MTU: 9000})
	if err != nil {
		return err
	}
	spec := topo.PairSpec(9000, 1)
	tp, err := topo.Build(spec)
	if err != nil {
		return err
	}
	defer tp.Close()
	l := spec.Links[0]
	a, err := newDemoEnd(tp.NS("a"), l.A, "xsk", 2*(*size)+4096)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newDemoEnd(tp.NS("b"), l.B, "xsk", 2*(*size)+4096)
	if err != nil {
		return err
	}
	defer b.close()
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
