package cachebench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/verbs"
)

// HOLConfig sets up the head-of-line run: two live NICs over the
// in-memory port behind a PCIe model, WRITEs on many QPs at once, half of
// the QPs hot and half cold (their QP contexts evicted, on both NICs,
// before each of their WRITEs). What is measured is the hot QPs' WRITE
// completion latency: a cold QP's context fetch must hold up no one else.
type HOLConfig struct {
	QPs    int           // QPs, half of them cold (default 32)
	Rounds int           // rounds of one WRITE on every QP (default 1000)
	Size   int           // bytes per WRITE (default 64)
	PCIe   time.Duration // host-memory latency of the DMA model (default 2 us)

	// Progress, if not nil, is called before each run.
	Progress func(done, total int, step string)
}

func (c *HOLConfig) defaults() {
	if c.QPs < 2 {
		c.QPs = 32
	}
	if c.Rounds <= 0 {
		c.Rounds = 1000
	}
	if c.Size <= 0 {
		c.Size = 64
	}
	if c.PCIe <= 0 {
		c.PCIe = 2 * time.Microsecond
	}
}

// HOLRow is one run: the hot QPs' completion latencies.
type HOLRow struct {
	Run      string // "all hot", "half cold", "half cold, baseline"
	Samples  int
	P50, P99 time.Duration
	Misses   uint64 // QPC misses on the requester's NIC
	Waits    uint64 // lookups its engine waited for (ctx_waits)
}

// NICHOL runs the three runs: all hot with GCCache, half cold with
// GCCache, half cold with the blocking baseline QPC cache.
func NICHOL(cfg HOLConfig) ([]HOLRow, error) {
	cfg.defaults()
	runs := []struct {
		name           string
		cold, baseline bool
	}{{"all hot", false, false}, {"half cold", true, false}, {"half cold, baseline", true, true}}
	var rows []HOLRow
	for i, r := range runs {
		if cfg.Progress != nil {
			cfg.Progress(i, len(runs), r.name)
		}
		row, err := holRun(cfg, r.cold, r.baseline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		row.Run = r.name
		rows = append(rows, row)
	}
	return rows, nil
}

func holRun(cfg HOLConfig, cold, baseline bool) (HOLRow, error) {
	n := cfg.QPs
	sc := ScaleConfig{Size: cfg.Size, Depth: n, PCIe: cfg.PCIe}
	sc.defaults()
	pair, err := openScalePair("hol", n, sc, baseline)
	if err != nil {
		return HOLRow{}, err
	}
	defer pair.close()
	a, b := pair.a, pair.b
	// Even QPs are cold, odd ones hot: they alternate on the wire.
	evict := func(e *scaleEnd) {
		nic := e.dev.NIC()
		c := nic.Cache(hostmem.QPC)
		nic.Command(func() {
			for i := 0; i < n; i += 2 {
				c.Invalidate(uint64(e.qps[i].Num))
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	posted := make([]time.Time, n)
	var lat []time.Duration
	wc := make([]verbs.WC, 64)
	qpc := a.dev.NIC().Cache(hostmem.QPC)
	s0, w0 := qpc.Stats(), a.dev.NIC().Counters().CtxWaits.Load()
	for round := range cfg.Rounds + 10 {
		if cold {
			evict(a)
			evict(b)
		}
		for i := range n {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: a.mr.Addr + uint64(i*cfg.Size), Length: uint32(cfg.Size), LKey: a.mr.LKey}},
				RemoteAddr: b.mr.Addr + uint64(i*cfg.Size), RKey: b.mr.RKey}
			posted[i] = time.Now()
			if _, err := a.qps[i].PostSend([]verbs.SendWR{wr}); err != nil {
				return HOLRow{}, err
			}
		}
		for got := 0; got < n; {
			pair.progress()
			k := a.cq.PollNoDrive(wc)
			now := time.Now()
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return HOLRow{}, fmt.Errorf("completion %+v: %v", c, c.Status)
				}
				if c.WRID%2 == 1 && round >= 10 { // a hot QP's, after warm-up
					lat = append(lat, now.Sub(posted[c.WRID]))
				}
			}
			got += k
			if k == 0 {
				if err := ctx.Err(); err != nil {
					return HOLRow{}, fmt.Errorf("round %d: %d of %d WRITEs complete: %w", round, got, n, err)
				}
			}
		}
	}
	slices.Sort(lat)
	s1 := qpc.Stats()
	return HOLRow{Samples: len(lat), P50: lat[len(lat)/2], P99: lat[len(lat)*99/100],
		Misses: s1.Misses - s0.Misses, Waits: a.dev.NIC().Counters().CtxWaits.Load() - w0}, nil
}

// ReportHOL prints the runs side by side and the goals of #23 as ratios:
// the hot QPs' p99 with half the QPs cold at most 1.5x all hot, and at
// most 0.2x the blocking baseline's with half cold.
func ReportHOL(w io.Writer, cfg HOLConfig) error {
	cfg.defaults()
	rows, err := NICHOL(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "head-of-line blocking on two live NICs (in-memory port): %d QPs, one %d-byte WRITE each per round, %d rounds; even QPs cold (QP contexts evicted on both NICs before each round), odd QPs hot; DMA latency %v\n",
		cfg.QPs, cfg.Size, cfg.Rounds, cfg.PCIe)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\thot WRITEs\tp50 us\tp99 us\tQPC misses\tengine waits\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%d\t\n", r.Run, r.Samples, us(r.P50), us(r.P99), r.Misses, r.Waits)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	hot, mixed, base := rows[0].P99, rows[1].P99, rows[2].P99
	fmt.Fprintf(w, "\nhot QPs' p99, half cold: %.2fx all hot (goal at most 1.5x); %.2fx the baseline's (goal at most 0.2x)\n",
		float64(mixed)/float64(hot), float64(mixed)/float64(base))
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
