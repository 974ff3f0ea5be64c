package cachebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/observe"
	"github.com/softrnic/softrnic/host/verbs"
)

// ScaleConfig sets up the QP-scaling run: two live NICs over the
// in-memory port, WRITEs spread round-robin over more and more QPs, with
// the QP contexts behind GCCache and behind the blocking baseline.
type ScaleConfig struct {
	QPs      []int         // QP counts (default 1, 16, 256, 4096, 16384)
	Duration time.Duration // per point (default 1 s)
	Size     int           // bytes per WRITE (default 4096)
	Depth    int           // WRITEs in flight over all the QPs (default 64)
	PCIe     time.Duration // host-memory latency of the DMA model (default 1 us)
	Sets     int           // QPC cache sets (default 512)
	Ways     int           // QPC cache ways (default 4)
	// GCCacheOnly skips the baseline's points (a run that looks at
	// GCCache's own costs, a cache simulation's among them).
	GCCacheOnly bool

	// Progress, if not nil, is called before each measurement: how many
	// are done, of how many, and the one starting.
	Progress func(done, total int, step string)
	// Observe, if not nil, watches the NICs the benchmark opens (their
	// frames, their counters).
	Observe *observe.Hooks
	// CPUProfile, if not nil, takes a CPU profile of the measured part of
	// the GCCache run at the last QP count (not its setup).
	CPUProfile io.Writer
}

func (c *ScaleConfig) defaults() {
	if len(c.QPs) == 0 {
		c.QPs = []int{1, 16, 256, 4096, 16384}
	}
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.Size <= 0 {
		c.Size = 4096
	}
	if c.Depth <= 0 {
		c.Depth = 64
	}
	if c.PCIe <= 0 {
		c.PCIe = time.Microsecond
	}
	if c.Sets <= 0 {
		c.Sets = 512
	}
	if c.Ways <= 0 {
		c.Ways = 4
	}
}

// ScaleRow is one point: a cache and a QP count.
type ScaleRow struct {
	Cache       string // "GCCache" or "baseline"
	QPs         int
	WRs         int
	Elapsed     time.Duration
	Lookups     uint64 // the sender's QPC lookups during the run
	Misses      uint64
	HostFetches uint64
}

// Gbps is the aggregate WRITE throughput.
func (r ScaleRow) Gbps(size int) float64 {
	return float64(r.WRs) * float64(size) * 8 / r.Elapsed.Seconds() / 1e9
}

// Scale runs every point, GCCache first, then the baseline.
func Scale(cfg ScaleConfig) ([]ScaleRow, error) {
	cfg.defaults()
	var rows []ScaleRow
	caches := []bool{false, true}
	if cfg.GCCacheOnly {
		caches = caches[:1]
	}
	for _, baseline := range caches {
		for _, n := range cfg.QPs {
			if cfg.Progress != nil {
				cache := "GCCache"
				if baseline {
					cache = "baseline"
				}
				cfg.Progress(len(rows), len(caches)*len(cfg.QPs), fmt.Sprintf("%s, %d QPs", cache, n))
			}
			r, err := scalePoint(cfg, n, baseline)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// scaleEnd is one NIC of the run.
type scaleEnd struct {
	dev     *verbs.Device
	closing func() // the watcher's, before dev closes
	cq      *verbs.CQ
	mr      *verbs.MR
	qps     []*verbs.QP
	ah      verbs.AH
}

// openScaleEnd opens one NIC of a run. The benchmark's thread runs both
// NICs (PollApp: it calls NIC.Progress on each in turn): no wake-up and
// no scheduler between a frame and the engine that takes it, so that what
// is measured is the NICs' own work, on a machine with few cores too.
//
// baseline is 0 for GCCache in front of the QP contexts, else the
// blocking baseline with that many host fetches in flight (1: the classic
// blocking cache).
func openScaleEnd(name string, p datapath.Port, last byte, n int, cfg ScaleConfig, baseline int) (*scaleEnd, error) {
	e := &scaleEnd{ah: verbs.AH{DestMAC: wire.MAC{2, 0, 0, 0, 9, last}, DestGID: netip.AddrFrom4([4]byte{10, 53, 0, last})}}
	p = cfg.Observe.WrapPort(name, p)
	var err error
	e.dev, err = verbs.Open(verbs.DeviceConfig{
		NICConfig: datapath.NICConfig{MAC: e.ah.DestMAC, IP: e.ah.DestGID, MaxQPs: n,
			BaselineQPC: baseline > 0, BaselineFetches: baseline, Poll: datapath.PollApp, Cache: ctxConfig(cfg)},
		Port: p, PCIe: hostmem.PCIe{Latency: cfg.PCIe}, Driven: true,
	})
	if err != nil {
		return nil, err
	}
	pd, err := e.dev.AllocPD()
	if err == nil {
		e.cq, err = e.dev.CreateCQ(4 * cfg.Depth)
	}
	if err == nil {
		e.mr, err = pd.RegMR(make([]byte, cfg.Depth*cfg.Size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	for i := 0; err == nil && i < n; i++ {
		var qp *verbs.QP
		// Each QP may hold its share of what is in flight (all of it, for
		// one QP), within the NIC's replay buffer (32768 entries).
		qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.cq, RecvCQ: e.cq,
			ReplayEntries: min(max(2, 32768/n), 2*cfg.Depth),
			Cap:           verbs.QPCap{MaxSendWR: max(4, 2*cfg.Depth/n), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		e.qps = append(e.qps, qp)
	}
	if err != nil {
		e.dev.Close()
		return nil, err
	}
	e.closing = cfg.Observe.Opened(name, e.dev, p)
	return e, nil
}

func (e *scaleEnd) close() {
	e.closing()
	e.dev.Close()
}

// scalePair is a run's two NICs over one in-memory port pair, their n
// QPs connected pairwise, a sending and b receiving.
type scalePair struct {
	a, b   *scaleEnd
	pa, pb *porttest.Port
}

func openScalePair(name string, n int, cfg ScaleConfig, baseline int) (*scalePair, error) {
	p := &scalePair{}
	p.pa, p.pb = porttest.NewPair(porttest.Config{Buffers: 8192})
	var err error
	if p.a, err = openScaleEnd(name+" a", p.pa, 1, n, cfg, baseline); err == nil {
		if p.b, err = openScaleEnd(name+" b", p.pb, 2, n, cfg, baseline); err != nil {
			p.a.close()
		}
	}
	for i := 0; err == nil && i < n; i++ {
		if err = verbs.ConnectRC(p.a.qps[i], p.b.qps[i], p.a.ah, p.b.ah, 5, 14); err != nil {
			err = fmt.Errorf("QP pair %d of %d: %w", i, n, err)
			p.a.close()
			p.b.close()
		}
	}
	if err != nil {
		p.pa.Close()
		p.pb.Close()
		return nil, err
	}
	return p, nil
}

// progress runs a turn of each NIC's engines.
func (p *scalePair) progress() {
	p.a.dev.NIC().Progress()
	p.b.dev.NIC().Progress()
}

func (p *scalePair) close() {
	p.a.close()
	p.b.close()
	p.pa.Close()
	p.pb.Close()
}

func scalePoint(cfg ScaleConfig, n int, baseline bool) (ScaleRow, error) {
	nic := fmt.Sprintf("scale %d QPs", n)
	if baseline {
		nic += " baseline"
	}
	pair, err := openScalePair(nic, n, cfg, blockingIf(baseline))
	if err != nil {
		return ScaleRow{}, err
	}
	defer pair.close()
	a := pair.a
	runtime.GC() // the setup's garbage is collected before the clock starts, not during the run
	// The run's deadline starts after that collection, which on a slow
	// machine (or under valgrind) can take most of a minute.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+time.Minute)
	defer cancel()
	// Every QP sends once before the clock starts (as perftest's
	// --perform_warm_up): a QP's first WRITE sets its state up (its
	// Sender and Receiver, its in-flight ring), which with 16K QPs and
	// a second's run would otherwise be paid again every few WRITEs.
	run := scaleRun{pair: pair, cfg: cfg, n: n, wc: make([]verbs.WC, 64)}
	if _, err := run.writes(ctx, func(next int) bool { return next < n }); err != nil {
		return ScaleRow{}, fmt.Errorf("warm-up: %w", err)
	}
	qpc := a.dev.NIC().Cache(hostmem.QPC)
	s0 := qpc.Stats()
	if cfg.CPUProfile != nil && !baseline && n == cfg.QPs[len(cfg.QPs)-1] {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return ScaleRow{}, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	done, err := run.writes(ctx, func(int) bool { return time.Since(start) < cfg.Duration })
	if err != nil {
		return ScaleRow{}, err
	}
	elapsed := time.Since(start)
	s1 := qpc.Stats()
	name := "GCCache"
	if baseline {
		name = "baseline"
	}
	return ScaleRow{Cache: name, QPs: n, WRs: done, Elapsed: elapsed, Lookups: s1.Lookups - s0.Lookups,
		Misses: s1.Misses - s0.Misses, HostFetches: s1.HostFetches - s0.HostFetches}, nil
}

// scaleRun posts a run's WRITEs, round-robin over the QPs, keeping
// cfg.Depth in flight.
type scaleRun struct {
	pair       *scalePair
	cfg        ScaleConfig
	n          int
	next, slot int // the next WRITE's number (its QP: next mod n) and buffer slot
	wc         []verbs.WC
}

// writes posts WRITEs while more(next) holds, and returns when every one
// posted has completed, with how many did.
func (r *scaleRun) writes(ctx context.Context, more func(next int) bool) (int, error) {
	a, b, cfg := r.pair.a, r.pair.b, r.cfg
	inflight, done := 0, 0
	for {
		for inflight < cfg.Depth && more(r.next) {
			qp := a.qps[r.next%r.n]
			wr := verbs.SendWR{WRID: uint64(r.next), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: a.mr.Addr + uint64(r.slot*cfg.Size), Length: uint32(cfg.Size), LKey: a.mr.LKey}},
				RemoteAddr: b.mr.Addr + uint64(r.slot*cfg.Size), RKey: b.mr.RKey}
			if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
				if errors.Is(err, verbs.ErrQueueFull) {
					break // this QP's queue is full: completions first
				}
				return done, err
			}
			r.next++
			inflight++
			r.slot = (r.slot + 1) % cfg.Depth
		}
		if inflight == 0 {
			return done, nil
		}
		r.pair.progress()
		k := a.cq.PollNoDrive(r.wc)
		for _, c := range r.wc[:k] {
			if c.Status != verbs.WCSuccess {
				return done, fmt.Errorf("%d QPs: completion %+v: %v", r.n, c, c.Status)
			}
		}
		inflight -= k
		done += k
		if k == 0 {
			if err := ctx.Err(); err != nil {
				return done, fmt.Errorf("%d QPs: %d WRITEs outstanding: %w", r.n, inflight, err)
			}
		}
	}
}

func ctxConfig(cfg ScaleConfig) ctxcache.Config {
	return ctxcache.Config{Sets: cfg.Sets, Ways: cfg.Ways}
}

// ReportScale prints the run: aggregate throughput per QP count and
// cache, and each point against one QP with the same cache.
func ReportScale(w io.Writer, cfg ScaleConfig) error {
	cfg.defaults()
	rows, err := Scale(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "QP scaling on two live NICs (in-memory port): %d-byte WRITEs round-robin over the QPs, %d in flight, QPC cache %d sets x %d ways, DMA latency %v, %v per point\n",
		cfg.Size, cfg.Depth, cfg.Sets, cfg.Ways, cfg.PCIe, cfg.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QPC cache\tQPs\tWRITEs\tGbit/s\tof 1 QP\tQPC lookups\tmisses\thost fetches\t")
	one := map[string]float64{}
	for _, r := range rows {
		g := r.Gbps(cfg.Size)
		if r.QPs == cfg.QPs[0] {
			one[r.Cache] = g
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.2f\t%d\t%d\t%d\t\n", r.Cache, r.QPs, r.WRs, g, g/one[r.Cache], r.Lookups, r.Misses, r.HostFetches)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	last := cfg.QPs[len(cfg.QPs)-1]
	var gc, bl float64
	for _, r := range rows {
		if r.QPs == last && r.Cache == "GCCache" {
			gc = r.Gbps(cfg.Size)
		}
		if r.QPs == last && r.Cache == "baseline" {
			bl = r.Gbps(cfg.Size)
		}
	}
	fmt.Fprintf(w, "\n%d QPs: GCCache %.2fx one QP (goal 0.8)", last, gc/one["GCCache"])
	if bl > 0 {
		fmt.Fprintf(w, "; GCCache %.2fx the baseline", gc/bl)
	}
	fmt.Fprintln(w)
	return nil
}

// blockingIf is openScaleEnd's baseline for the classic blocking cache,
// if baseline.
func blockingIf(baseline bool) int {
	if baseline {
		return 1
	}
	return 0
}
