package relbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/host/observe"
	"github.com/softrnic/softrnic/host/verbs"
)

// LossConfig sets a loss run: one QP of 64 KiB WRITEs, then one of 64 KiB
// READs, over a link that loses frames at random, at each loss rate.
type LossConfig struct {
	Rates     []float64     // loss probabilities per frame (default 0, 0.001, 0.01, 0.05)
	Messages  int           // messages per cell (default 1000)
	RTT       time.Duration // added round trip (default 200 us)
	LinkGbits float64       // default 2
	MTU       int           // IB MTU enum (default 5)

	// Progress, if not nil, is called before each measurement: how many
	// are done, of how many, and the one starting.
	Progress func(done, total int, step string)
	// Observe, if not nil, watches the NICs the benchmark opens (their
	// frames, their counters).
	Observe *observe.Hooks
}

func (c *LossConfig) defaults() {
	if len(c.Rates) == 0 {
		c.Rates = []float64{0, 0.001, 0.01, 0.05}
	}
	if c.Messages == 0 {
		c.Messages = 1000
	}
	if c.RTT == 0 {
		c.RTT = 200 * time.Microsecond
	}
	if c.LinkGbits == 0 {
		c.LinkGbits = 2
	}
	if c.MTU == 0 {
		c.MTU = 5
	}
}

// LossRow is one loss rate's result for one operation and recovery.
type LossRow struct {
	Op            string
	Selective     bool // selective repeat, else go-back-N
	Loss          float64
	Gbits         float64
	OfLossless    float64 // Gbits over the same operation's lossless goodput
	Retransmitted uint64
	Sent          uint64
}

// Loss measures every cell: goodput at each loss rate as a fraction of
// the lossless goodput, with go-back-N and with selective repeat.
func Loss(cfg LossConfig) ([]LossRow, error) {
	cfg.defaults()
	var rows []LossRow
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead} {
		for _, sr := range []bool{false, true} {
			base := 0.0
			for _, rate := range cfg.Rates {
				if cfg.Progress != nil {
					rec := "go-back-N"
					if sr {
						rec = "selective repeat"
					}
					cfg.Progress(len(rows), 4*len(cfg.Rates), fmt.Sprintf("%v, %s, %g%% loss", op, rec, 100*rate))
				}
				r, err := lossCell(cfg, op, rate, sr)
				if err != nil {
					return rows, fmt.Errorf("%v at %.1f%% loss: %w", op, 100*rate, err)
				}
				if rate == 0 || base == 0 {
					base = r.Gbits
				}
				r.OfLossless = r.Gbits / base
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func lossCell(cfg LossConfig, op verbs.WROpcode, rate float64, sr bool) (LossRow, error) {
	const msg = 64 << 10
	link := fmt.Sprintf("loss %v %g%%", op, 100*rate)
	if sr {
		link += " selective"
	}
	l, err := openLink(cfg.Observe, link, porttest.Config{Buffers: 16384, Delay: cfg.RTT / 2, Rate: cfg.LinkGbits * 1e9, Loss: rate, Seed: 42}, 2, 16*msg, 0)
	if err != nil {
		return LossRow{}, err
	}
	defer l.Close()
	a, b := l.a, l.b
	connect := verbs.ConnectRC
	if sr {
		connect = verbs.ConnectRCSelective
	}
	if err := connect(a.qp, b.qp, a.ah, b.ah, cfg.MTU, 14); err != nil {
		return LossRow{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := stream(ctx, a.qp, a.cq, op, cfg.Messages, 8, msg, a.mr, b.mr, 0); err != nil {
		return LossRow{}, err
	}
	elapsed := time.Since(start)
	ca, cb := a.dev.NIC().Counters(), b.dev.NIC().Counters()
	name := "WRITE"
	if op == verbs.WRRDMARead {
		name = "READ"
	}
	return LossRow{Op: name, Selective: sr, Loss: rate, Gbits: float64(cfg.Messages*msg*8) / elapsed.Seconds() / 1e9,
		Retransmitted: retransmitted(ca) + retransmitted(cb), Sent: ca.SentPkts.Load() + cb.SentPkts.Load()}, nil
}

// ReportLoss runs the cells and prints the table.
func ReportLoss(w io.Writer, cfg LossConfig) error {
	cfg.defaults()
	fmt.Fprintf(w, "One RC QP, %d messages of 64 KiB per cell, IB MTU %d, added RTT %v, link %.1f Gbit/s, random loss\n",
		cfg.Messages, 128<<cfg.MTU, cfg.RTT, cfg.LinkGbits)
	rows, err := Loss(cfg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\trecovery\tloss %\tGbit/s\tof lossless\tpackets sent\tretransmitted\t")
	for _, r := range rows {
		rec := "go-back-N"
		if r.Selective {
			rec = "selective"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.3f\t%.2f\t%d\t%d\t\n", r.Op, rec, 100*r.Loss, r.Gbits, r.OfLossless, r.Sent, r.Retransmitted)
	}
	tw.Flush()
	if err == nil {
		reportLossGoals(w, rows)
	}
	return err
}

// reportLossGoals prints #26's goals for the cells measured: with
// selective repeat at 1 % loss, WRITE at least 0.9x lossless and READ
// 0.8x, both at least 3x go-back-N; at 5 %, WRITE at least 0.6x.
func reportLossGoals(w io.Writer, rows []LossRow) {
	find := func(op string, sr bool, loss float64) (LossRow, bool) {
		for _, r := range rows {
			if r.Op == op && r.Selective == sr && math.Abs(r.Loss-loss) < 1e-9 {
				return r, true
			}
		}
		return LossRow{}, false
	}
	var lines []string
	for _, g := range []struct {
		op       string
		loss     float64
		lossless float64 // the least fraction of lossless goodput
		overGBN  float64 // the least multiple of go-back-N's (0: none)
	}{{"WRITE", 0.01, 0.9, 3}, {"READ", 0.01, 0.8, 3}, {"WRITE", 0.05, 0.6, 0}} {
		sr, ok1 := find(g.op, true, g.loss)
		gbn, ok2 := find(g.op, false, g.loss)
		if !ok1 || !ok2 {
			continue
		}
		x := sr.Gbits / max(gbn.Gbits, 1e-9)
		ok := sr.OfLossless >= g.lossless && (g.overGBN == 0 || x >= g.overGBN)
		want := fmt.Sprintf(">= %.1fx lossless", g.lossless)
		if g.overGBN > 0 {
			want += fmt.Sprintf(", >= %.0fx go-back-N", g.overGBN)
		}
		lines = append(lines, fmt.Sprintf("  %-5s selective at %g %%: %.2fx lossless, %.1fx go-back-N (goal %s): %s", g.op, 100*g.loss, sr.OfLossless, x, want, holds(ok)))
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\ngoals (#26):")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}
