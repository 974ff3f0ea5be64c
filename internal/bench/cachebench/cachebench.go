// Package cachebench reproduces the GCCache paper's claims in software,
// GCCache and the blocking baseline side by side in one run: hit latency,
// head-of-line blocking under misses, redundant host accesses on bursty and
// Zipf workloads, and lookup throughput at several miss ratios.
package cachebench

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
)

// Kind names a cache design.
type Kind string

// The designs compared.
const (
	GC       Kind = "GCCache"
	Baseline Kind = "baseline"
)

// env is a QPC table, a DMA engine and a cache over them.
type env struct {
	mem   *hostmem.Memory
	table *hostmem.Table
	dma   *hostmem.DMA
	cache ctxcache.Cache
}

func newEnv(kind Kind, entries int, model hostmem.PCIe, cfg ctxcache.Config) (*env, error) {
	mem := hostmem.NewMemory()
	e := &env{mem: mem, table: hostmem.NewTable(mem, hostmem.QPC, hostmem.EntrySizes[hostmem.QPC], entries), dma: hostmem.NewDMA(mem, model, 1<<16)}
	ad := ctxcache.NewAdapter(e.table)
	var err error
	if kind == GC {
		e.cache, err = ctxcache.New(ad, e.dma, cfg)
	} else {
		e.cache, err = ctxcache.NewBaseline(ad, e.dma, cfg)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	e.dma.Close()
	e.mem.Close()
}

// warm looks up every index in idx until each hits.
func (e *env) warm(idx []uint64) {
	dst := make([]uint64, 16)
	resp := make([]ctxcache.Response, 64)
	for _, i := range idx {
		for {
			st, _ := e.cache.Lookup(0, i, dst)
			if st == ctxcache.Hit {
				break
			}
			for n := e.cache.Poll(0, resp); n > 0; n = e.cache.Poll(0, resp) {
				for _, r := range resp[:n] {
					e.cache.Release(r.PID)
				}
			}
			runtime.Gosched()
		}
	}
}

// Latency is a latency distribution.
type Latency struct {
	Median, P99 time.Duration
	Samples     int
}

func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{Median: samples[len(samples)/2], P99: samples[len(samples)*99/100], Samples: len(samples)}
}

// HitLatency measures lookups that hit, from pipes pipelines at once. A
// lookup takes tens of nanoseconds, about what reading the clock costs, so
// each sample is a batch of 32 lookups timed together and divided by 32.
func HitLatency(kind Kind, pipes int, d time.Duration) (Latency, error) {
	const hot, batch = 1024, 32
	e, err := newEnv(kind, 4096, hostmem.PCIe{}, ctxcache.Config{Pipelines: pipes})
	if err != nil {
		return Latency{}, err
	}
	defer e.close()
	idx := make([]uint64, hot)
	for i := range idx {
		idx[i] = uint64(i * 3)
	}
	e.warm(idx)
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for p := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := rand.New(rand.NewPCG(uint64(p), 1))
			dst := make([]uint64, 16)
			order := make([]uint64, 4096)
			for i := range order {
				order[i] = idx[r.IntN(hot)]
			}
			samples := make([]time.Duration, 0, 1<<16)
			for end, k := time.Now().Add(d), 0; time.Now().Before(end) && len(samples) < cap(samples); {
				start := time.Now()
				for range batch {
					e.cache.Lookup(p, order[k&(len(order)-1)], dst) // len is a power of two
					k++
				}
				samples = append(samples, time.Since(start)/batch)
			}
			mu.Lock()
			all = append(all, samples...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(all), nil
}

// driver issues lookups on one pipeline and tracks their completion.
type driver struct {
	e       *env
	dst     []uint64
	resp    []ctxcache.Response
	pending []req // by PID
	waiting int
	done    func(r req, at time.Time)
}

type req struct {
	idx    uint64
	issued time.Time
	hot    bool
	hit    bool // answered from the cache (at once, or in its turn)
}

func newDriver(e *env, done func(req, time.Time)) *driver {
	return &driver{e: e, dst: make([]uint64, 16), resp: make([]ctxcache.Response, 256), pending: make([]req, 256), done: done}
}

// issue looks one index up; it reports false on a stall.
func (d *driver) issue(r req) bool {
	st, pid := d.e.cache.Lookup(0, r.idx, d.dst)
	switch st {
	case ctxcache.Hit:
		r.hit = true
		d.done(r, time.Now())
	case ctxcache.Miss:
		d.pending[pid] = r
		d.waiting++
	case ctxcache.Stall:
		return false
	}
	return true
}

// poll completes answered lookups.
func (d *driver) poll() {
	n := d.e.cache.Poll(0, d.resp)
	if n == 0 {
		return
	}
	now := time.Now()
	for _, resp := range d.resp[:n] {
		r := d.pending[resp.PID]
		r.hit = resp.Hit
		d.waiting--
		d.e.cache.Release(resp.PID)
		d.done(r, now)
	}
}

// drain waits for every pending lookup.
func (d *driver) drain() {
	for deadline := time.Now().Add(5 * time.Second); d.waiting > 0 && time.Now().Before(deadline); {
		d.poll()
		runtime.Gosched()
	}
}

// HOL measures the latency of lookups that hit (found their entry cached)
// while misses on distinct contexts are in flight: a share missRatio of the
// requests, issued at a fixed pace, go to contexts never seen. missRatio 0
// gives the all-hit reference.
func HOL(kind Kind, dmaLatency time.Duration, missRatio float64, d time.Duration) (Latency, error) {
	const hot, entries = 64, 1 << 18
	e, err := newEnv(kind, entries, hostmem.PCIe{Latency: dmaLatency}, ctxcache.Config{})
	if err != nil {
		return Latency{}, err
	}
	defer e.close()
	hotIdx := make([]uint64, hot)
	for i := range hotIdx {
		hotIdx[i] = uint64(i)
	}
	e.warm(hotIdx)
	lat := make([]time.Duration, 0, int(d/(250*time.Nanosecond))+1)
	dr := newDriver(e, func(r req, at time.Time) {
		if r.hit {
			lat = append(lat, at.Sub(r.issued))
		}
	})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng := rand.New(rand.NewPCG(7, 7))
	const gap = 250 * time.Nanosecond // offered load: 4 M lookups/s
	next := uint64(hot)
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		due := start.Add(time.Duration(i) * gap)
		for time.Now().Before(due) {
			dr.poll()
		}
		r := req{issued: time.Now(), hot: rng.Float64() >= missRatio}
		if r.hot {
			r.idx = hotIdx[rng.IntN(hot)]
		} else {
			r.idx = next // a context never seen: a miss
			next = hot + (next-hot+1)%(entries-hot)
		}
		for !dr.issue(r) {
			dr.poll()
		}
	}
	dr.drain()
	return summarize(lat), nil
}

// Redundancy is what a workload cost in host fetches.
type Redundancy struct {
	Lookups, Misses, Merged, HostFetches uint64
	// Distinct counts the misses on contexts with no fetch outstanding, as
	// the driver sees them: what GCCache's host fetches should equal.
	Distinct uint64
}

// FetchesPerMiss is host fetches per miss.
func (r Redundancy) FetchesPerMiss() float64 { return float64(r.HostFetches) / float64(r.Misses) }

// Workload generates context indices.
type Workload func(r *rand.Rand) uint64

// Bursty returns runs of burst lookups of one context, contexts uniform
// over n.
func Bursty(n, burst int) Workload {
	var cur uint64
	left := 0
	return func(r *rand.Rand) uint64 {
		if left == 0 {
			cur, left = uint64(r.IntN(n)), burst
		}
		left--
		return cur
	}
}

// Zipf returns contexts over n with Zipf exponent s (s < 1 allowed).
func Zipf(n int, s float64) Workload {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range n {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	perm := rand.New(rand.NewPCG(11, 11)).Perm(n) // popular contexts spread over the table
	return func(r *rand.Rand) uint64 {
		i, _ := slices.BinarySearch(cdf, r.Float64())
		return uint64(perm[min(i, n-1)])
	}
}

// Redundant runs a workload of count lookups with the given DMA latency on
// a cache of the paper's geometry (512 sets × 4 ways = 2K lines) over 64K
// contexts, and counts host fetches.
func Redundant(kind Kind, w Workload, count int, dmaLatency time.Duration) (Redundancy, error) {
	const entries = 1 << 16
	e, err := newEnv(kind, entries, hostmem.PCIe{Latency: dmaLatency}, ctxcache.Config{})
	if err != nil {
		return Redundancy{}, err
	}
	defer e.close()
	var out Redundancy
	outstanding := map[uint64]int{} // context -> tickets in flight, as the driver sees them
	dr := newDriver(e, func(r req, _ time.Time) {
		if outstanding[r.idx]--; outstanding[r.idx] == 0 {
			delete(outstanding, r.idx)
		}
	})
	rng := rand.New(rand.NewPCG(3, 3))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range count {
		idx := w(rng)
		dr.poll()
		before := outstanding[idx]
		for {
			st, pid := e.cache.Lookup(0, idx, dr.dst)
			if st == ctxcache.Stall {
				dr.poll()
				continue
			}
			if st == ctxcache.Miss {
				dr.pending[pid] = req{idx: idx}
				dr.waiting++
				outstanding[idx]++
				if before == 0 {
					out.Distinct++
				}
			}
			break
		}
	}
	dr.drain()
	s := e.cache.Stats()
	out.Lookups, out.Misses, out.Merged, out.HostFetches = s.Lookups-s.Stalls, s.Misses, s.Merged, s.HostFetches
	return out, nil
}

// Window is how many lookups a pipeline can have waiting for their answer
// in the throughput test: a packet pipeline holds a few packets whose
// context has not come yet, and stops taking new ones when they fill up.
const Window = 8

// Throughput runs lookups as fast as one pipeline can issue them, with at
// most Window awaiting their answer, a share missRatio of them misses on
// new contexts, and returns completed lookups per second.
func Throughput(kind Kind, missRatio float64, dmaLatency time.Duration, d time.Duration) (float64, error) {
	const hot, entries = 1024, 1 << 18
	e, err := newEnv(kind, entries, hostmem.PCIe{Latency: dmaLatency}, ctxcache.Config{})
	if err != nil {
		return 0, err
	}
	defer e.close()
	hotIdx := make([]uint64, hot)
	for i := range hotIdx {
		hotIdx[i] = uint64(i)
	}
	e.warm(hotIdx)
	completed := 0
	dr := newDriver(e, func(req, time.Time) { completed++ })
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng := rand.New(rand.NewPCG(5, 5))
	next := uint64(hot)
	start := time.Now()
	for i := 0; ; i++ {
		if i%64 == 0 && time.Since(start) >= d {
			break
		}
		r := req{idx: hotIdx[rng.IntN(hot)]}
		if rng.Float64() < missRatio {
			r.idx = next
			next = hot + (next-hot+1)%(entries-hot)
		}
		for dr.waiting >= Window {
			dr.poll()
		}
		for !dr.issue(r) {
			dr.poll()
			runtime.Gosched()
		}
		if dr.waiting > 0 && i%16 == 0 { // poll for answers in batches, as a pipeline would
			dr.poll()
		}
	}
	elapsed := time.Since(start)
	dr.drain()
	return float64(completed) / elapsed.Seconds(), nil
}

// Config sets how long the report's measurements run.
type Config struct {
	Duration time.Duration // per latency and throughput measurement (default 1s)
	Lookups  int           // per redundancy workload (default 200000)
}

// Report runs every measurement and prints them with the paper's claims
// checked against the figures of this run. It returns false if a claim
// does not hold.
func Report(w io.Writer, cfg Config) (bool, error) {
	if cfg.Duration == 0 {
		cfg.Duration = time.Second
	}
	if cfg.Lookups == 0 {
		cfg.Lookups = 200000
	}
	ok := true
	claim := func(holds bool, text string) {
		mark := "ok"
		if !holds {
			mark, ok = "NOT MET", false
		}
		fmt.Fprintf(w, "  claim: %-70s %s\n", text, mark)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)

	fmt.Fprintln(w, "1. Hit latency (QPC, 512 sets x 4 ways, every lookup a hit; batches of 32 timed together)")
	fmt.Fprintln(tw, "pipelines\tcache\tmedian ns\tp99 ns\t")
	var gc1 Latency
	for _, pipes := range []int{1, 2} {
		for _, k := range []Kind{GC, Baseline} {
			l, err := HitLatency(k, pipes, cfg.Duration)
			if err != nil {
				return false, err
			}
			if k == GC && pipes == 1 {
				gc1 = l
			}
			fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t\n", pipes, k, ns(l.Median), ns(l.P99))
		}
	}
	tw.Flush()
	claim(gc1.Median <= 25*time.Nanosecond, "GCCache median hit latency <= 25 ns (1 pipeline)")

	fmt.Fprintln(w, "\n2. Head-of-line blocking (DMA latency 2 us, 4 M lookups/s offered, 64 hot contexts; latency of the lookups that hit;")
	fmt.Fprintln(w, "   the streams run in turn three times and each figure is the middle of the three)")
	fmt.Fprintln(tw, "stream\tcache\tmedian ns\tp99 ns\t")
	var allHit, gcMixed, blMixed Latency
	streams := []struct {
		name  string
		k     Kind
		ratio float64
		dst   *Latency
		runs  []Latency
	}{{"all hits", GC, 0, &allHit, nil}, {"50% misses", GC, 0.5, &gcMixed, nil}, {"50% misses", Baseline, 0.5, &blMixed, nil}}
	for range 3 {
		for i := range streams {
			s := &streams[i]
			l, err := HOL(s.k, 2*time.Microsecond, s.ratio, cfg.Duration/3)
			if err != nil {
				return false, err
			}
			s.runs = append(s.runs, l)
		}
	}
	for _, s := range streams {
		*s.dst = middle(s.runs)
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t\n", s.name, s.k, ns(s.dst.Median), ns(s.dst.P99))
	}
	tw.Flush()
	claim(gcMixed.P99 <= allHit.P99*3/2, "GCCache hit p99 with 50% misses within 1.5x of the all-hit stream")
	claim(gcMixed.P99*10 <= blMixed.P99, "GCCache hit p99 at most 0.1x the baseline's")

	fmt.Fprintln(w, "\n3. Redundant host accesses (64K contexts, 2K-line cache, DMA latency 2 us)")
	fmt.Fprintln(tw, "workload\tcache\tlookups\tmisses\tmerged\thost fetches\tfetches/miss\tdistinct missed while not outstanding\t")
	var claims []func()
	for _, wl := range []struct {
		name string
		w    func() Workload
	}{{"bursty (runs of 8)", func() Workload { return Bursty(1<<16, 8) }}, {"Zipf(0.99)", func() Workload { return Zipf(1<<16, 0.99) }}} {
		for _, k := range []Kind{GC, Baseline} {
			r, err := Redundant(k, wl.w(), cfg.Lookups, 2*time.Microsecond)
			if err != nil {
				return false, err
			}
			distinct := "-" // the baseline answers queued hits with tickets too: the driver cannot tell its misses
			if k == GC {
				distinct = fmt.Sprint(r.Distinct)
				claims = append(claims, func() {
					claim(r.HostFetches == r.Distinct, fmt.Sprintf("GCCache, %s: host fetches = distinct contexts missed while not outstanding", wl.name))
				})
			} else {
				claims = append(claims, func() { claim(r.HostFetches == r.Misses, "baseline, "+wl.name+": one host fetch per miss") })
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.3f\t%s\t\n", wl.name, k, r.Lookups, r.Misses, r.Merged, r.HostFetches, r.FetchesPerMiss(), distinct)
		}
	}
	tw.Flush()
	for _, c := range claims {
		c()
	}

	fmt.Fprintf(w, "\n4. Throughput (one pipeline with at most %d lookups awaiting an answer, DMA latency 1 us, misses on new contexts)\n", Window)
	fmt.Fprintln(tw, "miss ratio\tcache\tM lookups/s\t")
	for _, ratio := range []float64{0, 0.1, 0.5} {
		for _, k := range []Kind{GC, Baseline} {
			t, err := Throughput(k, ratio, time.Microsecond, cfg.Duration)
			if err != nil {
				return false, err
			}
			fmt.Fprintf(tw, "%.0f%%\t%s\t%.2f\t\n", ratio*100, k, t/1e6)
		}
	}
	tw.Flush()
	return ok, nil
}

func ns(d time.Duration) float64 { return float64(d.Nanoseconds()) }

// middle returns the median of the runs' medians and of their p99s.
func middle(runs []Latency) Latency {
	med := make([]time.Duration, len(runs))
	p99 := make([]time.Duration, len(runs))
	for i, r := range runs {
		med[i], p99[i] = r.Median, r.P99
	}
	slices.Sort(med)
	slices.Sort(p99)
	return Latency{Median: med[len(med)/2], P99: p99[len(p99)/2]}
}
