package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/capture"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/internal/topo"
)

// runDemo is the main job: a softrnic NIC in each of two namespaces joined
// by a veth pair, an RC queue pair between them, and every RC operation run
// with its data verified, then a table and the NICs' counters.
func runDemo(args []string, stdout io.Writer) error {
	fs := newFlagSet("demo", "demo [flags]", `Two softrnic NICs in two network namespaces joined by a veth pair, an RC
queue pair between them, and SEND/RECV, WRITE, WRITE_WITH_IMM, READ,
CMP_AND_SWAP and FETCH_AND_ADD run with their data verified (root).
`)
	portKind := fs.String("port", "xsk", "port: xsk (AF_XDP) or udp (kernel UDP socket)")
	size := fs.Int("s", 64<<10, "message size for SEND, WRITE and READ")
	iters := fs.Int("n", 200, "iterations per operation")
	frames := fs.Bool("frames", false, "instead, send one frame of every opcode across the pair")
	obs := addObserveFlags(fs)
	hpuDemo := fs.Bool("hpu", false, "instead, run sPIN handlers on b's NIC: an aggregation of vectors from 4 senders and a key-value cache")
	mtu := fs.Int("mtu", 1500, "MTU of the veth pair")
	payload := fs.Int("payload", 256, "with -frames: payload bytes in frames that carry one")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badUsage(flagUsage(fs), "demo takes no arguments, not %q", fs.Args())
	}
	if *portKind != "xsk" && *portKind != "udp" {
		return badValue("-port %q: want xsk or udp", *portKind)
	}
	if *size < 1 || *iters < 1 {
		return badValue("-s %d -n %d: want at least one byte and one iteration", *size, *iters)
	}
	if *frames && obs.given() {
		return badValue("-frames sends frames from packet sockets, without a NIC: -pcap and -metrics do not apply")
	}
	if os.Geteuid() != 0 {
		return errors.New("the demo creates network namespaces: run it as root")
	}
	if *frames {
		return runFramesDemo(mtu, payload, stdout)
	}
	stopPcap, err := obs.startPcap()
	if err != nil {
		return err
	}
	defer stopPcap() // after the NICs have closed
	if *hpuDemo {
		return runHPUDemo(*portKind, *mtu, obs, stdout)
	}
	spec := topo.PairSpec(*mtu, 1)
	tp, err := topo.Build(spec)
	if err != nil {
		return err
	}
	defer tp.Close()
	l := spec.Links[0]
	fmt.Fprintf(stdout, "softrnic demo: two NICs in namespaces %s and %s, %s port, veth MTU %d\n\n",
		tp.NS("a").FullName, tp.NS("b").FullName, *portKind, *mtu)

	ends := make([]*demoEnd, 2)
	for i, e := range []struct {
		ns  *topo.Namespace
		end topo.End
	}{{tp.NS("a"), l.A}, {tp.NS("b"), l.B}} {
		de, err := newDemoEnd(e.ns, e.end, *portKind, "-port udp", 2*(*size)+4096)
		if err != nil {
			return err
		}
		defer de.close()
		ends[i] = de
	}
	a, b := ends[0], ends[1]
	stopMetrics, err := obs.serve(a, b)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 3, 14); err != nil {
		return err
	}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tsize B\titerations\tGbit/s\tus/op\tdata\t")
	for _, op := range []struct {
		name string
		wr   verbs.WROpcode
		size int
	}{
		{"SEND/RECV", verbs.WRSend, *size},
		{"WRITE", verbs.WRRDMAWrite, *size},
		{"WRITE_WITH_IMM", verbs.WRRDMAWriteWithImm, *size},
		{"READ", verbs.WRRDMARead, *size},
		{"CMP_AND_SWAP", verbs.WRAtomicCmpAndSwp, 8},
		{"FETCH_AND_ADD", verbs.WRAtomicFetchAdd, 8},
	} {
		elapsed, err := demoOp(a, b, op.wr, op.size, *iters)
		if err != nil {
			return fmt.Errorf("%s: %w", op.name, err)
		}
		us := float64(elapsed.Microseconds()) / float64(*iters)
		gbps := float64(op.size) * float64(*iters) * 8 / elapsed.Seconds() / 1e9
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\tverified\t\n", op.name, op.size, *iters, gbps, us)
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\ncounters (rxe names)")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NIC\tsent_pkts\trcvd_pkts\tduplicate_request\tout_of_seq_request\trcvd_seq_err\trcvd_rnr_err\tretransmits\trdma_sends\trdma_recvs\t")
	for i, e := range ends {
		c := e.dev.NIC().Counters()
		fmt.Fprintf(tw, "%c\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", 'a'+i, c.SentPkts.Load(), c.RcvdPkts.Load(), c.DuplicateRequest.Load(),
			c.OutOfSeqRequest.Load(), c.RcvdSeqErr.Load(), c.RcvdRNRErr.Load(), c.Retransmits.Load(), c.RdmaSends.Load(), c.RdmaRecvs.Load())
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\nall operations verified")
	return nil
}

// observeFlags are -pcap, -metrics and -pprof of the commands that run
// two NICs over a veth pair (demo, bench write, bench hpu).
type observeFlags struct {
	pcap, metrics *string
	pprof         *bool
}

func addObserveFlags(fs *flag.FlagSet) *observeFlags {
	return &observeFlags{
		pcap:    fs.String("pcap", "", "record every frame both NICs send and receive in this pcapng file (interfaces \"a rx\", \"a tx\", \"b rx\", \"b tx\")"),
		metrics: fs.String("metrics", "", "serve both NICs' counters (devices \"a\" and \"b\") as Prometheus metrics at http://ADDR/metrics during the run (softrnic stat ADDR reads them)"),
		pprof:   fs.Bool("pprof", false, "with -metrics, serve Go's pprof at /debug/pprof/ on the same listener"),
	}
}

// given reports whether any of the flags asks for something.
func (o *observeFlags) given() bool { return *o.pcap != "" || *o.metrics != "" || *o.pprof }

// startPcap starts recording the ports newDemoEnd opens, with -pcap;
// call stop after the NICs have closed.
func (o *observeFlags) startPcap() (stop func(), err error) {
	if *o.pcap == "" {
		return func() {}, nil
	}
	return startRecording(*o.pcap)
}

// serve serves the ends' metrics, with -metrics, each under its
// namespace's name, until stop.
func (o *observeFlags) serve(ends ...*demoEnd) (stop func(), err error) {
	if *o.metrics == "" {
		return func() {}, nil
	}
	var srcs []metrics.Source
	for _, e := range ends {
		srcs = append(srcs, metrics.Source{Name: e.name, Dev: e.dev, Ports: []datapath.Port{e.port}})
	}
	return serveMetrics(*o.metrics, *o.pprof, srcs...)
}

// demoEnd is one NIC of the demo.
type demoEnd struct {
	name   string // its namespace's
	port   datapath.Port
	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	mr     *verbs.MR
	buf    []byte
	ah     verbs.AH
	closer func()
}

// newDemoEnd opens a NIC on end's device in ns with a port of the kind
// given; udpFlag is the flag that picks the udp port instead, named when
// AF_XDP is not permitted ("" when there is none).
func newDemoEnd(ns *topo.Namespace, end topo.End, kind, udpFlag string, size int) (*demoEnd, error) {
	var port datapath.Port
	var closePort func()
	err := ns.Do(func() error {
		switch kind {
		case "xsk":
			d, err := xsk.Open(end.Name, xsk.Config{Log: debugLogger()}, nil)
			if err != nil {
				return xskError(end.Name, err, udpFlag)
			}
			port, closePort = d.Sockets()[0], func() { d.Close() }
		case "udp":
			u, err := udpport.Open(udpport.Config{Local: end.Addrs[0].Addr(), LocalMAC: wire.MAC(end.MAC), Buffers: 8192})
			if err != nil {
				return err
			}
			port, closePort = u, func() { u.Close() }
		default:
			return fmt.Errorf("unknown port %q", kind)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if recorder != nil {
		c, err := capture.Wrap(port, recorder, ns.Name)
		if err != nil {
			closePort()
			return nil, err
		}
		port = c
	}
	e := &demoEnd{name: ns.Name, port: port, ah: verbs.AH{DestMAC: wire.MAC(end.MAC), DestGID: end.Addrs[0].Addr()}, buf: make([]byte, size)}
	e.closer = closePort
	mtu := 0 // the port's own limit, unless the link says less
	if l, lerr := ns.Link(end.Name); lerr == nil {
		mtu = l.Attrs().MTU
	}
	if e.dev, err = verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: e.ah.DestMAC, IP: e.ah.DestGID}, Port: port, MTU: mtu}); err != nil {
		closePort()
		return nil, err
	}
	slog.Debug("NIC open", "ns", ns.FullName, "dev", end.Name, "port", kind, "ib_mtu", 128<<e.dev.ActiveMTU())
	pd, _ := e.dev.AllocPD()
	e.pd = pd
	if e.cq, err = e.dev.CreateCQ(1024); err == nil {
		e.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	if err == nil {
		e.mr, err = pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *demoEnd) close() {
	if e.dev != nil {
		logCounters(e.name, e.dev, []datapath.Port{e.port})
		e.dev.Close()
	}
	e.closer()
}

// wait takes n completions from a CQ, failing on any error status.
func wait(cq *verbs.CQ, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 16)
	for n > 0 {
		k := cq.Poll(wc[:min(n, len(wc))])
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("completion %+v: %v", c, c.Status)
			}
		}
		n -= k
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// demoOp runs iters operations of one kind from a to b, up to 16 in flight,
// and verifies the data.
func demoOp(a, b *demoEnd, op verbs.WROpcode, size, iters int) (time.Duration, error) {
	src, dst := a.buf[:size], b.buf[:size]
	r := rand.New(rand.NewPCG(uint64(op), uint64(size)))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	clear(dst)
	sge := []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(size), LKey: a.mr.LKey}}
	remote := b.mr.Addr
	recv := op == verbs.WRSend || op == verbs.WRRDMAWriteWithImm
	if op == verbs.WRRDMARead {
		copy(dst, src)
		sge[0].Addr += uint64(len(a.buf) / 2)
	}
	atomic := op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAdd
	if atomic {
		clear(b.buf[:8])
		sge[0].Addr += uint64(len(a.buf) / 2)
	}
	b.dev.Fence() // hand b's memory over to b's NIC
	const depth = 16
	start := time.Now()
	posted, done := 0, 0
	for done < iters {
		for posted < iters && posted-done < depth {
			if recv {
				if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(posted), SGL: []verbs.SGE{{Addr: b.mr.Addr, Length: uint32(size), LKey: b.mr.LKey}}}}); err != nil {
					return 0, err
				}
			}
			wr := verbs.SendWR{WRID: uint64(posted), Opcode: op, Flags: verbs.SendSignaled, SGL: sge, RemoteAddr: remote, RKey: b.mr.RKey, Imm: uint32(posted)}
			if op == verbs.WRAtomicFetchAdd {
				wr.CompareAdd = 1
			}
			if op == verbs.WRAtomicCmpAndSwp {
				wr.CompareAdd, wr.Swap = uint64(posted), uint64(posted+1)
			}
			if _, err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return 0, err
			}
			posted++
		}
		if err := wait(a.cq, 1); err != nil {
			return 0, err
		}
		if recv {
			if err := wait(b.cq, 1); err != nil {
				return 0, err
			}
		}
		done++
	}
	elapsed := time.Since(start)
	b.dev.Fence() // b's NIC wrote b's memory; a's completions told us so
	switch {
	case atomic:
		if got := leUint64(b.buf[:8]); got != uint64(iters) {
			return 0, fmt.Errorf("the counter is %d after %d atomics", got, iters)
		}
	case op == verbs.WRRDMARead:
		if !bytes.Equal(a.buf[len(a.buf)/2:len(a.buf)/2+size], src) {
			return 0, errors.New("read data differs")
		}
	default:
		if !bytes.Equal(dst, src) {
			return 0, errors.New("data differs")
		}
	}
	return elapsed, nil
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
