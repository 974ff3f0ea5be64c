package relbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/reliability"
)

// IncastConfig sets an incast run: many sender QPs WRITE into one
// receiver at once, their frames meeting in one shallow queue that marks
// ECN, as a switch's port towards the receiver does.
type IncastConfig struct {
	Senders    []int         // sender QPs per run (default 8, 16, 32, 64)
	Bytes      int           // bytes every run moves, shared equally by its senders (default 32 MiB)
	Message    int           // WRITE size (default 16 KiB)
	Depth      int           // WRITEs each sender keeps posted (default 4)
	LinkGbits  float64       // default 2
	RTT        time.Duration // added round trip (default 100 us)
	QueueBytes int           // the queue (default 128 KiB)
	MarkBytes  int           // ECN marks above this many queued bytes (default 32 KiB)
	MTU        int           // IB MTU enum (default 5)

	// Progress, if not nil, is called before each measurement.
	Progress func(done, total int, step string)
}

func (c *IncastConfig) defaults() {
	if len(c.Senders) == 0 {
		c.Senders = []int{8, 16, 32, 64}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Bytes, 32<<20)
	def(&c.Message, 16<<10)
	def(&c.Depth, 4)
	def(&c.QueueBytes, 128<<10)
	def(&c.MarkBytes, 32<<10)
	def(&c.MTU, 5)
	if c.LinkGbits == 0 {
		c.LinkGbits = 2
	}
	if c.RTT == 0 {
		c.RTT = 100 * time.Microsecond
	}
}

// IncastResult is one run's outcome.
type IncastResult struct {
	Senders       int
	CC            string
	Elapsed       time.Duration
	OfLink        float64       // goodput over the link rate
	Jain          float64       // Jain's index of the senders' goodputs
	MinShare      float64       // the least any sender had done when the first finished, over the mean then (1: equal)
	QueueP50      time.Duration // queueing delay of the frames the queue took
	QueueP99      time.Duration
	Sent          uint64
	Retransmitted uint64
	QueueDropped  uint64
	CNPs          uint64
	Timeouts      uint64
}

// Incast runs one cell: n senders with congestion control cc (p its
// DCQCN parameters, nil for the window).
func Incast(cfg IncastConfig, n int, cc CC, p *reliability.DCQCNParams) (IncastResult, error) {
	cfg.defaults()
	msg := cfg.Message
	per := max(1, cfg.Bytes/n/msg) // messages per sender
	size := n * 16 * msg
	pc := porttest.Config{Buffers: 16384, Delay: cfg.RTT / 2, Rate: cfg.LinkGbits * 1e9, QueueBytes: cfg.QueueBytes, MarkBytes: cfg.MarkBytes}
	l, err := openLinkCC(nil, fmt.Sprintf("incast %d", n), pc, 3, size, 0, ccOf(cc, p, pc))
	if err != nil {
		return IncastResult{}, err
	}
	defer l.Close()
	a, b := l.a, l.b
	qas, qbs, cqs, err := l.pairs(n, 64)
	if err != nil {
		return IncastResult{}, err
	}
	for i := range qas {
		if err := verbs.ConnectRCSelective(qas[i], qbs[i], a.ah, b.ah, cfg.MTU, 14); err != nil {
			return IncastResult{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	took := make([]time.Duration, n)
	counts := make([]atomic.Int64, n)
	var first sync.Once
	var atFirst []int64 // each sender's messages done when the first finished
	ready := make(chan struct{})
	start := time.Now()
	for i := range qas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			errs[i] = stream(ctx, qas[i], cqs[i], verbs.WRRDMAWrite, per, cfg.Depth, msg, a.mr, b.mr, uint64(i*16*msg), &counts[i])
			took[i] = time.Since(start)
			first.Do(func() {
				for j := range counts {
					atFirst = append(atFirst, counts[j].Load())
				}
			})
		}()
	}
	start = time.Now()
	close(ready) // every sender at once
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return IncastResult{}, err
	}
	link := cfg.LinkGbits * 1e9
	var shares []float64
	for _, d := range took {
		shares = append(shares, float64(per*msg*8)/d.Seconds())
	}
	ca, cb := a.dev.NIC().Counters(), b.dev.NIC().Counters()
	name := "window"
	if cc == DCQCNCC {
		name = "DCQCN"
	}
	return IncastResult{Senders: n, CC: name, Elapsed: elapsed,
		OfLink:        float64(n*per*msg*8) / elapsed.Seconds() / link,
		Jain:          jain(shares),
		MinShare:      minShare(atFirst),
		QueueP50:      l.pa.Link.QueueDelay.Quantile(0.5),
		QueueP99:      l.pa.Link.QueueDelay.Quantile(0.99),
		Sent:          ca.SentPkts.Load() + cb.SentPkts.Load(),
		Retransmitted: retransmitted(ca) + retransmitted(cb),
		QueueDropped:  l.pa.Link.QueueDropped.Load() + l.pb.Link.QueueDropped.Load(),
		CNPs:          cb.NPCNPSent.Load(),
		Timeouts:      ca.LocalACKTimeouts.Load()}, nil
}

// minShare is the least of counts over their mean.
func minShare(counts []int64) float64 {
	var sum int64
	for _, c := range counts {
		sum += c
	}
	if sum == 0 {
		return 0
	}
	return float64(slices.Min(counts)) * float64(len(counts)) / float64(sum)
}

// ReportIncast runs every cell, the window and DCQCN at each sender
// count, prints the table and each goal's verdict, and returns the rows.
func ReportIncast(w io.Writer, cfg IncastConfig) ([]IncastResult, error) {
	cfg.defaults()
	fmt.Fprintf(w, "incast: N sender QPs (selective repeat) WRITE %d MiB in all, %d KiB each, %d posted per QP, into one receiver\n",
		cfg.Bytes>>20, cfg.Message>>10, cfg.Depth)
	fmt.Fprintf(w, "through one queue of %d KiB marking ECN above %d KiB, link %.1f Gbit/s, added RTT %v; DCQCN with the paper's parameters,\n",
		cfg.QueueBytes>>10, cfg.MarkBytes>>10, cfg.LinkGbits, cfg.RTT)
	fmt.Fprintln(w, "then (DCQCN scaled) with its increase steps and byte counter scaled from its 40 Gbit/s link to this one")
	fmt.Fprintln(w, "min share: the least a QP had moved when the first finished, over the mean then; queue delays: the frames' waits in the queue")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "senders\tCC\ttime\tof link\tJain\tmin share\tqueue p50\tqueue p99\tpackets sent\tretransmitted\tqueue drops\tCNPs\ttimeouts\t")
	var out []IncastResult
	steps := reliability.DefaultDCQCN().ScaledTo(cfg.LinkGbits * 1e9)
	ccs := []struct {
		name string
		cc   CC
		p    *reliability.DCQCNParams
	}{{"window", DefaultCC, nil}, {"DCQCN", DCQCNCC, nil}, {"DCQCN scaled", DCQCNCC, &steps}}
	total := len(ccs) * len(cfg.Senders)
	for _, n := range cfg.Senders {
		for _, c := range ccs {
			if cfg.Progress != nil {
				cfg.Progress(len(out), total, fmt.Sprintf("%d senders, %v", n, c.name))
			}
			r, err := Incast(cfg, n, c.cc, c.p)
			if err != nil {
				return out, fmt.Errorf("%d senders, %s: %w", n, c.name, err)
			}
			r.CC = c.name
			out = append(out, r)
			fmt.Fprintf(tw, "%d\t%s\t%v\t%.2f\t%.2f\t%.2f\t%v\t%v\t%d\t%d\t%d\t%d\t%d\t\n", n, r.CC, r.Elapsed.Round(time.Millisecond), r.OfLink, r.Jain, r.MinShare,
				r.QueueP50.Round(time.Microsecond), r.QueueP99.Round(time.Microsecond), r.Sent, r.Retransmitted, r.QueueDropped, r.CNPs, r.Timeouts)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\ngoal, each row: of link >= 0.85 and no QP starved (min share >= 0.10)")
	for _, r := range out {
		fmt.Fprintf(w, "  %2d senders, %-12s of link %.2f, min share %.2f, queue p99 %v: %s\n", r.Senders, r.CC, r.OfLink, r.MinShare,
			r.QueueP99.Round(time.Microsecond), holds(r.OfLink >= 0.85 && r.MinShare >= 0.10))
	}
	return out, nil
}
