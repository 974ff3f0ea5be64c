package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/internal/bench/hpubench"
	"github.com/softrnic/softrnic/internal/topo"
)

// runBenchHPU prints the HPU tables: the scheduler's latency and packet
// rate, the packet rate through handlers on real frames over a veth pair
// beside the same traffic without handlers, and each application against
// its host baseline.
func runBenchHPU(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench hpu", "bench hpu [flags]", `sPIN handlers (package hpu): the scheduler's latency from a packet's arrival
to its handler's end (p50, p99) beside PsPIN's, its packet rate with an
empty handler, the rate of 64-byte WRITEs through an empty handler over a
veth pair beside the same WRITEs without one (root; skipped otherwise),
and every application of hpu/apps against doing the same on the host.
`)
	samples := fs.Int("samples", 20000, "latency samples per row")
	dur := fs.Duration("d", time.Second, "time per scheduler rate row")
	msgs := fs.Int("n", 100000, "64-byte WRITEs per veth row")
	veth := fs.Bool("veth", true, "run the veth rows (root)")
	apps := fs.Bool("apps", true, "run the application rows")
	obs := addObserveFlags(fs) // the veth rows' NICs
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if obs.given() && !*veth {
		return badValue("-pcap and -metrics are the veth rows' NICs': drop -veth=false")
	}
	if *samples < 10 || *dur <= 0 || *msgs < 1 {
		return badValue("-samples %d -d %v -n %d: want at least 10 samples, a positive time and one message", *samples, *dur, *msgs)
	}
	p, stdout := benchProgress("bench hpu", stdout)
	defer p.stop()
	p.set("the scheduler")
	if err := hpubench.ReportScheduler(stdout, *samples, *dur); err != nil {
		return err
	}
	if *veth {
		fmt.Fprintln(stdout)
		if os.Geteuid() != 0 {
			fmt.Fprintln(stdout, "veth rows skipped: they create network namespaces, run as root")
		} else {
			p.set("a veth pair")
			if err := vethHPU(stdout, *msgs, obs); err != nil {
				return err
			}
		}
	}
	if *apps {
		p.set("the applications")
		fmt.Fprintln(stdout)
		if err := hpubench.ReportApps(stdout); err != nil {
			return err
		}
	}
	return nil
}

// vethHPU sends 64-byte WRITEs between two NICs over a veth pair (xsk
// ports), 64 in flight: without a context, then with an empty handler on
// the receiving QP.
func vethHPU(w io.Writer, msgs int, obs *observeFlags) error {
	stopPcap, err := obs.startPcap()
	if err != nil {
		return err
	}
	defer stopPcap() // after the NICs have closed
	spec := topo.PairSpec(1500, 1)
	tp, err := topo.Build(spec)
	if err != nil {
		return err
	}
	defer tp.Close()
	l := spec.Links[0]
	a, err := newDemoEnd(tp.NS("a"), l.A, "xsk", "", 1<<20)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newDemoEnd(tp.NS("b"), l.B, "xsk", "", 1<<20)
	if err != nil {
		return err
	}
	defer b.close()
	stopMetrics, err := obs.serve(a, b)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 3, 14); err != nil {
		return err
	}
	plain, err := writeStream(a, b, 64, msgs)
	if err != nil {
		return err
	}
	in, err := b.qp.AttachHandlers(hpu.Context{Name: "empty", Payload: func(*hpu.Task) hpu.Action { return hpu.Success }}, verbs.Match{})
	if err != nil {
		return err
	}
	handled, err := writeStream(a, b, 64, msgs)
	if err != nil {
		return err
	}
	if got := in.Stats.Packets.Load(); got != uint64(msgs) {
		return fmt.Errorf("the handler saw %d packets of %d", got, msgs)
	}
	fmt.Fprintf(w, "real frames over a veth pair (xsk ports, MTU 1500): %d WRITEs of 64 bytes, 64 in flight, 1 QP\n", msgs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "receiver\tpackets/s\tratio\t")
	fmt.Fprintf(tw, "no context (placed in memory)\t%.0f\t1.00\t\n", float64(msgs)/plain.Seconds())
	fmt.Fprintf(tw, "empty payload handler\t%.0f\t%.2f\t\n", float64(msgs)/handled.Seconds(), plain.Seconds()/handled.Seconds())
	if err := tw.Flush(); err != nil {
		return err
	}
	c := b.dev.NIC().Counters()
	hs := &b.dev.NIC().HPU().Stats
	fmt.Fprintf(w, "receiver: hpu_packets %d, hpu_helped %d (run by the engine itself), hpu_kept_off %d, hpu_refused %d (not acknowledged: sent again), sender: retransmitted_pkts %d\n",
		c.HPUPackets.Load(), hs.Helped.Load(), hs.KeptOff.Load(), c.HPURefused.Load(), a.dev.NIC().Counters().RetransmittedPkts.Load())
	return nil
}

// writeStream posts n WRITEs of size bytes from a to b, 64 in flight, and
// returns the time until the last completed.
func writeStream(a, b *demoEnd, size, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sge := []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(size), LKey: a.mr.LKey}}
	wc := make([]verbs.WC, 32)
	const depth = 64
	start := time.Now()
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < depth {
			wr := verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WRRDMAWrite, SGL: sge, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
			if posted%16 == 15 || posted == n-1 {
				wr.Flags = verbs.SendSignaled
			}
			if _, err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return 0, err
			}
			posted++
		}
		k := a.cq.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("completion %+v: %v", c, c.Status)
			}
			done = int(c.WRID) + 1
		}
		if k == 0 {
			if err := a.cq.Wait(ctx); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}
