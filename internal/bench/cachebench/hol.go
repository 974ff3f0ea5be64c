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
// Each round posts the cold QPs' WRITEs first, then the hot ones'; the
// receiving NIC takes a turn after each post, as its own host's thread
// would meanwhile, and the sender's CQ is polled after each post, as an
// application with many QPs polls while it posts (a completion waits for
// the NIC, not for the round's later posts); one thread runs both NICs
// (verbs' DeviceConfig.Driven), so that the figures are the NICs' work
// and not the scheduler's.
type HOLConfig struct {
	QPs    int           // QPs, half of them cold (default 32)
	Rounds int           // rounds of one WRITE on every QP (default 5000)
	Size   int           // bytes per WRITE (default 64)
	PCIe   time.Duration // host-memory latency of the DMA model (default 2 us)
	// Repeats is how many times the four runs go, interleaved, each with
	// its share of the rounds (default 5): a row's p50 and p99 are the
	// medians of its repeats', so that one stretch of a noisy machine
	// (another VM's load, a vCPU moved) lands in every row alike, not in
	// one row alone.
	Repeats int

	// Progress, if not nil, is called before each run.
	Progress func(done, total int, step string)
}

func (c *HOLConfig) defaults() {
	if c.QPs < 2 {
		c.QPs = 32
	}
	if c.Rounds <= 0 {
		c.Rounds = 5000
	}
	if c.Size <= 0 {
		c.Size = 64
	}
	if c.PCIe <= 0 {
		c.PCIe = 2 * time.Microsecond
	}
	if c.Repeats <= 0 {
		c.Repeats = 5
	}
	c.Repeats = min(c.Repeats, c.Rounds)
}

// HOLRow is one run: the hot QPs' completion latencies.
type HOLRow struct {
	Run      string // "all hot", "half cold", "half cold, blocking baseline", "half cold, in-order baseline"
	Samples  int
	P50, P99 time.Duration
	Misses   uint64 // QPC misses on the requester's NIC
	Waits    uint64 // lookups its engine waited for (ctx_waits)
}

// NICHOL runs the four runs: all hot with GCCache, half cold with
// GCCache, half cold with the blocking baseline QPC cache (one host fetch
// at a time), and half cold with the in-order baseline (its fetches
// overlap, 64 at most, but every answer waits its turn). They go
// cfg.Repeats times, interleaved, each time with their share of the
// rounds; a row's p50 and p99 are the medians of its repeats', its
// samples, misses and waits their sums.
func NICHOL(cfg HOLConfig) ([]HOLRow, error) {
	cfg.defaults()
	runs := []struct {
		name     string
		cold     bool
		baseline int // openScaleEnd's
	}{{"all hot", false, 0}, {"half cold", true, 0}, {"half cold, blocking baseline", true, 1}, {"half cold, in-order baseline", true, 64}}
	rows := make([]HOLRow, len(runs))
	p50s := make([][]time.Duration, len(runs))
	p99s := make([][]time.Duration, len(runs))
	for k := range cfg.Repeats {
		part := cfg
		part.Rounds = cfg.Rounds / cfg.Repeats
		if k < cfg.Rounds%cfg.Repeats {
			part.Rounds++
		}
		for i, r := range runs {
			if cfg.Progress != nil {
				cfg.Progress(k*len(runs)+i, cfg.Repeats*len(runs), fmt.Sprintf("%s (%d of %d)", r.name, k+1, cfg.Repeats))
			}
			row, err := holRun(part, r.cold, r.baseline)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			rows[i].Run = r.name
			rows[i].Samples += row.Samples
			rows[i].Misses += row.Misses
			rows[i].Waits += row.Waits
			p50s[i] = append(p50s[i], row.P50)
			p99s[i] = append(p99s[i], row.P99)
		}
	}
	for i := range rows {
		rows[i].P50, rows[i].P99 = median(p50s[i]), median(p99s[i])
	}
	return rows, nil
}

// median is the middle of ds (the upper one of an even count); it sorts
// ds.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func holRun(cfg HOLConfig, cold bool, baseline int) (HOLRow, error) {
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
	var order []int // the cold (even) QPs' WRITEs first, then the hot ones'
	for i := 0; i < n; i += 2 {
		order = append(order, i)
	}
	for i := 1; i < n; i += 2 {
		order = append(order, i)
	}
	var lat []time.Duration
	wc := make([]verbs.WC, 64)
	qpc := a.dev.NIC().Cache(hostmem.QPC)
	s0, w0 := qpc.Stats(), a.dev.NIC().Counters().CtxWaits.Load()
	for round := range cfg.Rounds + 10 {
		if cold {
			evict(a)
			evict(b)
		}
		got := 0
		take := func() (int, error) {
			k := a.cq.PollNoDrive(wc)
			now := time.Now()
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return 0, fmt.Errorf("completion %+v: %v", c, c.Status)
				}
				if c.WRID%2 == 1 && round >= 10 { // a hot QP's, after warm-up
					lat = append(lat, now.Sub(posted[c.WRID]))
				}
			}
			return k, nil
		}
		for _, i := range order {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: a.mr.Addr + uint64(i*cfg.Size), Length: uint32(cfg.Size), LKey: a.mr.LKey}},
				RemoteAddr: b.mr.Addr + uint64(i*cfg.Size), RKey: b.mr.RKey}
			posted[i] = time.Now()
			if _, err := a.qps[i].PostSend([]verbs.SendWR{wr}); err != nil {
				return HOLRow{}, err
			}
			pair.b.dev.NIC().Progress() // the peer takes what came, as its own host would meanwhile
			// The application polls its CQ between posts, as one with
			// many QPs does: a completion waits for the NIC, not for
			// the rest of the round's posts.
			k, err := take()
			if err != nil {
				return HOLRow{}, err
			}
			got += k
		}
		for got < n {
			pair.progress()
			k, err := take()
			if err != nil {
				return HOLRow{}, err
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
	fmt.Fprintf(w, "head-of-line blocking on two live NICs (in-memory port): %d QPs, one %d-byte WRITE each per round, %d rounds; even QPs cold (QP contexts evicted on both NICs before each round), odd QPs hot; DMA latency %v; the runs interleaved %d times, p50 and p99 the medians of the %d\n",
		cfg.QPs, cfg.Size, cfg.Rounds, cfg.PCIe, cfg.Repeats, cfg.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\thot WRITEs\tp50 us\tp99 us\tQPC misses\tengine waits\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%d\t\n", r.Run, r.Samples, us(r.P50), us(r.P99), r.Misses, r.Waits)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	hot, mixed, base, inorder := rows[0].P99, rows[1].P99, rows[2].P99, rows[3].P99
	fmt.Fprintf(w, "\nhot QPs' p99, half cold: %.2fx all hot (goal at most 1.5x); %.2fx the blocking baseline's (goal at most 0.2x); %.2fx the in-order baseline's\n",
		float64(mixed)/float64(hot), float64(mixed)/float64(base), float64(mixed)/float64(inorder))
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
