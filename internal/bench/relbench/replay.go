// Package relbench measures the reliability layer between two softrnic
// NICs over the in-memory port, whose link can be given a delay, a rate,
// a queue limit and loss.
//
// Replay (`softrnic bench replay`): what the replay buffer does to a QP's
// throughput. One RC QP sends 64 KiB
// WRITEs between two softrnic NICs over the in-memory port with a fixed
// added round trip and a link rate, for several replay allocations, and
// each measured rate is printed beside the seed's prediction,
// min(link, allocation x MTU / RTT): a QP sends at most its allocation
// per round trip. The RTT in the prediction is the one a packet sees, as
// measured in the same run by a QP with a single entry (the added delay
// plus the engines' and the emulated link's own time).
package relbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/observe"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/reliability"
)

// Config sets a run.
type Config struct {
	Allocations []int         // replay entries of the QP, one row each (default 4 … 256)
	RTT         time.Duration // added round trip (default 10 ms: every default allocation below the path's BDP)
	LinkGbits   float64       // link rate each way, Gbit/s (default 2)
	MTU         int           // IB MTU enum (default 5: 4096)
	Message     int           // bytes per WRITE (default 65536)
	Duration    time.Duration // per row (default 1 s)

	// Progress, if not nil, is called before each measurement: how many
	// are done, of how many, and the one starting.
	Progress func(done, total int, step string)
	// Observe, if not nil, watches the NICs the benchmark opens (their
	// frames, their counters).
	Observe *observe.Hooks
}

func (c *Config) defaults() {
	if len(c.Allocations) == 0 {
		c.Allocations = []int{4, 8, 16, 32, 64, 128, 256}
	}
	if c.RTT == 0 {
		c.RTT = 10 * time.Millisecond
	}
	if c.LinkGbits == 0 {
		c.LinkGbits = 2
	}
	if c.MTU == 0 {
		c.MTU = 5
	}
	if c.Message == 0 {
		c.Message = 64 << 10
	}
	if c.Duration == 0 {
		c.Duration = time.Second
	}
}

// Row is one measurement.
type Row struct {
	Allocation     int
	Gbits          float64 // WRITE payload moved
	Predicted      float64 // min(link payload rate, allocation x MTU / RTT)
	Stalls         uint64  // times the gate held a packet
	StalledPercent float64 // of the run
	Retransmitted  uint64
}

// frameOverhead is the bytes a RoCEv2 frame carries beyond its payload
// (Ethernet, IPv4, UDP, BTH, ICRC; a first WRITE packet adds a RETH).
const frameOverhead = 14 + 20 + 8 + 12 + 4

// Run measures the round trip with one entry, then every allocation; it
// returns the round trip and the rows.
func Run(cfg Config) (time.Duration, []Row, error) {
	cfg.defaults()
	mtu := 128 << cfg.MTU
	progress := func(done int, step string) {
		if cfg.Progress != nil {
			cfg.Progress(done, 1+len(cfg.Allocations), step)
		}
	}
	progress(0, "the round trip, one entry")
	probe, err := measure(cfg, 1, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("one entry: %w", err)
	}
	rtt := time.Duration(float64(mtu*8) / (probe.Gbits * 1e9) * 1e9)
	var rows []Row
	for i, alloc := range cfg.Allocations {
		progress(1+i, fmt.Sprintf("%d entries", alloc))
		r, err := measure(cfg, alloc, rtt)
		if err != nil {
			return rtt, rows, fmt.Errorf("allocation %d: %w", alloc, err)
		}
		rows = append(rows, r)
	}
	return rtt, rows, nil
}

type end struct {
	dev     *verbs.Device
	closing func() // the watcher's, before dev closes
	pd      *verbs.PD
	cq      *verbs.CQ
	qp      *verbs.QP
	mr      *verbs.MR
	buf     []byte
	ah      verbs.AH
}

func open(obs *observe.Hooks, name string, p *porttest.Port, mac wire.MAC, ip string, size, alloc int, cc linkCC) (*end, error) {
	e := &end{ah: verbs.AH{DestMAC: mac, DestGID: netip.MustParseAddr(ip)}, buf: make([]byte, size)}
	port := obs.WrapPort(name, p)
	var err error
	if e.dev, err = verbs.Open(verbs.DeviceConfig{
		NICConfig: datapath.NICConfig{MAC: mac, IP: e.ah.DestGID, NoCongestionControl: cc.cc == NoCC,
			DelayRule: map[CC]reliability.DelayRule{LossCC: reliability.DelayOff}[cc.cc], DCQCN: cc.dcqcn},
		Port: port,
	}); err != nil {
		return nil, err
	}
	e.closing = obs.Opened(name, e.dev, port)
	if e.pd, err = e.dev.AllocPD(); err != nil {
		return e, err
	}
	if e.cq, err = e.dev.CreateCQ(1024); err != nil {
		return e, err
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.cq, RecvCQ: e.cq, ReplayEntries: alloc,
		Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return e, err
	}
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	return e, err
}

// link is two devices joined by an in-memory link, each with one RC QP
// (not connected) and a registered buffer.
type link struct {
	pa, pb *porttest.Port
	a, b   *end
}

// openLink opens a link on subnet 10.49.net.0/24; both QPs reserve alloc
// replay entries (0: the default). Its NICs are name+" a" and name+" b"
// to the watcher obs. Close releases everything.
func openLink(obs *observe.Hooks, name string, cfg porttest.Config, net byte, size, alloc int) (*link, error) {
	return openLinkCC(obs, name, cfg, net, size, alloc, linkCC{cc: DefaultCC})
}

// CC is the congestion control a benchmark's NICs run.
type CC uint8

const (
	DefaultCC CC = iota // loss-driven window, pacing, ECN (CNPs), the delay rule on long paths
	NoCC                // none: the replay allocation alone bounds what is in flight
	LossCC              // the default without the delay rule
	DCQCNCC             // DCQCN's rate-based reaction point (DCQCN below, else the paper's parameters, the link's rate as line rate)
)

// linkCC is a link's congestion control: cc, and with DCQCNCC its
// parameters.
type linkCC struct {
	cc    CC
	dcqcn *reliability.DCQCNParams
}

// ccOf is cc on a link of cfg: DCQCNCC with p, or the paper's parameters
// at the link's rate when p is nil.
func ccOf(cc CC, p *reliability.DCQCNParams, cfg porttest.Config) linkCC {
	if cc != DCQCNCC {
		return linkCC{cc: cc}
	}
	if p == nil {
		d := reliability.DefaultDCQCN()
		d.LineRate = cfg.Rate
		p = &d
	}
	return linkCC{cc, p}
}

// openLinkCC is openLink with the NICs' congestion control cc.
func openLinkCC(obs *observe.Hooks, name string, cfg porttest.Config, net byte, size, alloc int, cc linkCC) (*link, error) {
	l := &link{}
	l.pa, l.pb = porttest.NewPair(cfg)
	var err error
	if l.a, err = open(obs, name+" a", l.pa, wire.MAC{2, 0, 0, 0, net, 1}, fmt.Sprintf("10.49.%d.1", net), size, alloc, cc); err == nil {
		l.b, err = open(obs, name+" b", l.pb, wire.MAC{2, 0, 0, 0, net, 2}, fmt.Sprintf("10.49.%d.2", net), size, alloc, cc)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close closes the devices and the ports.
func (l *link) Close() {
	for _, e := range []*end{l.a, l.b} {
		if e != nil && e.dev != nil {
			if e.closing != nil {
				e.closing()
			}
			e.dev.Close()
		}
	}
	l.pa.Close()
	l.pb.Close()
}

func measure(cfg Config, alloc int, rtt time.Duration) (Row, error) {
	size := 64 * cfg.Message
	l, err := openLink(cfg.Observe, fmt.Sprintf("replay %d", alloc), porttest.Config{Buffers: 16384, Delay: cfg.RTT / 2, Rate: cfg.LinkGbits * 1e9}, 0, size, alloc)
	if err != nil {
		return Row{}, err
	}
	defer l.Close()
	a, b := l.a, l.b
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, cfg.MTU, 14); err != nil {
		return Row{}, err
	}
	nic := a.dev.NIC()
	c := nic.Counters()
	stalls0, stalled0, re0 := c.ReplayStalls.Load(), c.ReplayStalledNs.Load(), c.RetransmittedPkts.Load()

	// WRITEs posted ahead: more than the allocation holds, so that the
	// gate, not the posting, is what holds the QP back.
	depth := min(64, 2+alloc*(128<<cfg.MTU)/cfg.Message)
	post := func(i int) error {
		off := uint64((i % 64) * cfg.Message)
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr + off, Length: uint32(cfg.Message), LKey: a.mr.LKey}},
			RemoteAddr: b.mr.Addr + off, RKey: b.mr.RKey}})
		return err
	}
	posted, done := 0, 0
	for ; posted < depth; posted++ {
		if err := post(posted); err != nil {
			return Row{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+30*time.Second)
	defer cancel()
	start := time.Now()
	var wc [64]verbs.WC
	var elapsed time.Duration
	for {
		k := a.cq.Poll(wc[:])
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				return Row{}, fmt.Errorf("WRITE %d: %v", w.WRID, w.Status)
			}
			done++
		}
		if elapsed = time.Since(start); elapsed >= cfg.Duration {
			break
		}
		for ; posted < done+depth; posted++ {
			if err := post(posted); err != nil {
				return Row{}, err
			}
		}
		if k == 0 {
			if err := a.cq.Wait(ctx); err != nil {
				return Row{}, errors.New("no completion: the QP stopped")
			}
		}
	}
	mtu := 128 << cfg.MTU
	payloadRate := cfg.LinkGbits * float64(mtu) / float64(mtu+frameOverhead)
	predicted := payloadRate
	if rtt > 0 {
		predicted = min(payloadRate, float64(alloc*mtu*8)/rtt.Seconds()/1e9)
	}
	r := Row{Allocation: alloc, Predicted: predicted,
		Gbits:         float64(done*cfg.Message*8) / elapsed.Seconds() / 1e9,
		Stalls:        c.ReplayStalls.Load() - stalls0,
		Retransmitted: c.RetransmittedPkts.Load() - re0}
	r.StalledPercent = 100 * float64(c.ReplayStalledNs.Load()-stalled0) / float64(elapsed.Nanoseconds())
	// Let the posted WRITEs finish before the devices close.
	for drained := done; drained < posted; {
		k := a.cq.Poll(wc[:])
		drained += k
		if k == 0 {
			if err := a.cq.Wait(ctx); err != nil {
				break
			}
		}
	}
	return r, nil
}

// Report runs and prints the table; ok says every row came within 20 %
// of its prediction.
func Report(w io.Writer, cfg Config) (ok bool, err error) {
	cfg.defaults()
	fmt.Fprintf(w, "One RC QP, %d KiB WRITEs, IB MTU %d, added RTT %v, link %.1f Gbit/s each way (in-memory port)\n",
		cfg.Message>>10, 128<<cfg.MTU, cfg.RTT, cfg.LinkGbits)
	rtt, rows, err := Run(cfg)
	fmt.Fprintf(w, "predicted = min(link payload rate, allocation x MTU / RTT); RTT %v, measured with one entry in this run\n", rtt.Round(time.Microsecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "entries\tGbit/s\tpredicted\tratio\tgate stalls\tstalled %\tretransmitted\t")
	ok = err == nil
	for _, r := range rows {
		ratio := r.Gbits / r.Predicted
		if ratio < 0.8 || ratio > 1.2 {
			ok = false
		}
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.2f\t%d\t%.0f\t%d\t\n", r.Allocation, r.Gbits, r.Predicted, ratio, r.Stalls, r.StalledPercent, r.Retransmitted)
	}
	tw.Flush()
	return ok, err
}
