package ctxcache_test

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
)

// waitResponses polls a pipeline until n responses have come.
func waitResponses(t *testing.T, c ctxcache.Cache, pipe, n int) []ctxcache.Response {
	t.Helper()
	var got []ctxcache.Response
	buf := make([]ctxcache.Response, 16)
	for deadline := time.Now().Add(5 * time.Second); len(got) < n; {
		k := c.Poll(pipe, buf)
		got = append(got, buf[:k]...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d responses", len(got), n)
		}
	}
	return got
}

// TestMergedMisses: N concurrent misses on one context cost one host fetch
// and are answered N times, in arrival order, across pipelines.
func TestMergedMisses(t *testing.T) {
	f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: 2 * time.Millisecond})
	f.setHost(9, value(9, 42, 16))
	c, err := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Pipelines: 2})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]uint64, 16)
	const n = 10
	var pids []uint32
	for i := range n {
		st, pid := c.Lookup(i%2, 9, dst)
		if st != ctxcache.Miss {
			t.Fatalf("lookup %d: %v", i, st)
		}
		pids = append(pids, pid)
	}
	s := c.Stats()
	if s.HostFetches != 1 || s.Misses != n || s.Merged != n-1 {
		t.Fatalf("fetches %d misses %d merged %d; want 1, %d, %d", s.HostFetches, s.Misses, s.Merged, n, n-1)
	}
	for pipe := range 2 {
		got := waitResponses(t, c, pipe, n/2)
		for i, r := range got {
			if r.PID != pids[2*i+pipe] || r.Index != 9 || r.Err {
				t.Errorf("pipeline %d response %d: %+v, want PID %d", pipe, i, r, pids[2*i+pipe])
			}
			if v := checkValue(t, c.Data(r.PID), 9); v != 42 {
				t.Errorf("response data version %d", v)
			}
			c.Release(r.PID)
		}
	}
	if f.dma.Stats().Reads.Load() != 1 {
		t.Errorf("%d DMA reads", f.dma.Stats().Reads.Load())
	}
	if st, _ := c.Lookup(0, 9, dst); st != ctxcache.Hit || dst[1] != 42 {
		t.Errorf("after the fetch: %v, version %d", st, dst[1])
	}
}

// TestHitDuringMiss: with a miss in flight, a lookup that hits is answered
// at once by GCCache, and only after the miss by the baseline, which also
// fetches a second time for a second miss on the same line.
func TestHitDuringMiss(t *testing.T) {
	f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: 5 * time.Millisecond})
	for i := range uint64(64) {
		f.setHost(i, value(i, 1, 16))
	}
	dst := make([]uint64, 16)
	cfg := ctxcache.Config{Sets: 16, Ways: 4}
	g, _ := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, cfg)
	b, _ := ctxcache.NewBaseline(ctxcache.NewAdapter(f.table), f.dma, cfg)
	for _, c := range []ctxcache.Cache{g, b} {
		get(t, c, 0, 1, dst) // line 1 cached
	}
	if st, _ := g.Lookup(0, 2, dst); st != ctxcache.Miss {
		t.Fatal("GCCache: entry 2 should miss")
	}
	start := time.Now()
	if st, _ := g.Lookup(0, 1, dst); st != ctxcache.Hit || time.Since(start) > time.Millisecond {
		t.Errorf("GCCache: hit behind a miss: %v after %v", st, time.Since(start))
	}
	waitResponses(t, g, 0, 1)

	if st, _ := b.Lookup(0, 2, dst); st != ctxcache.Miss {
		t.Fatal("baseline: entry 2 should miss")
	}
	st, pid := b.Lookup(0, 1, dst)
	if st != ctxcache.Miss {
		t.Fatalf("baseline: a hit behind a miss returned %v", st)
	}
	b.Lookup(0, 2, dst) // a second miss on the line in flight
	got := waitResponses(t, b, 0, 3)
	if got[0].Index != 2 || got[1].Index != 1 || got[1].PID != pid || got[2].Index != 2 {
		t.Errorf("baseline answered out of order: %+v", got)
	}
	if s := b.Stats(); s.HostFetches != 3 { // 1 for the warm-up, 2 for the two misses on line 2
		t.Errorf("baseline fetched %d times, want 3", s.HostFetches)
	}
}

// TestWriteBack: NIC-side updates stay in the cache until eviction or
// flush; host commands keep host memory and the cache in step.
func TestWriteBack(t *testing.T) {
	f := newFixture(t, hostmem.CQC, 64, hostmem.PCIe{})
	for i := range uint64(64) {
		f.setHost(i, value(i, 0, 8))
	}
	c, _ := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Sets: 1, Ways: 2})
	dst := make([]uint64, 8)
	get(t, c, 0, 5, dst)
	if c.Update(5, value(5, 7, 8)) != ctxcache.Hit {
		t.Fatal("update of a cached entry missed")
	}
	if v := checkValue(t, f.hostWords(5), 5); v == 7 {
		t.Error("update reached host memory before write-back")
	}
	c.Flush()
	if v := checkValue(t, f.hostWords(5), 5); v != 7 {
		t.Errorf("after flush host has version %d", v)
	}
	c.Update(5, value(5, 8, 8))
	get(t, c, 0, 6, dst)
	get(t, c, 0, 7, dst) // one set of two ways: 5 is evicted
	if v := checkValue(t, f.hostWords(5), 5); v != 8 {
		t.Errorf("after eviction host has version %d", v)
	}
	if s := c.Stats(); s.WriteBacks != 2 || s.Evictions != 1 {
		t.Errorf("write-backs %d evictions %d", s.WriteBacks, s.Evictions)
	}
	// A host command updates host memory and the cached copy.
	c.HostWrite(7, value(7, 3, 8))
	get(t, c, 0, 7, dst)
	if v := checkValue(t, dst, 7); v != 3 || checkValue(t, f.hostWords(7), 7) != 3 {
		t.Errorf("after HostWrite: cached version %d", v)
	}
	// Invalidation drops the line; the next lookup fetches it.
	f.setHost(7, value(7, 4, 8)) // the host changed it behind the cache's back...
	c.Invalidate(7)              // ...and said so
	if get(t, c, 0, 7, dst); checkValue(t, dst, 7) != 4 {
		t.Error("invalidated entry served stale")
	}
	if st, _ := c.Lookup(0, 64, dst); st != ctxcache.Fault {
		t.Errorf("index beyond the table: %v", st)
	}
}

// TestStall: when every outstanding entry is in use, a new miss is refused
// and counted, and hits still go through.
func TestStall(t *testing.T) {
	f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: 20 * time.Millisecond})
	c, _ := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Outstanding: 2, PIDs: 4})
	dst := make([]uint64, 16)
	c.Lookup(0, 1, dst)
	c.Lookup(0, 2, dst)
	if st, _ := c.Lookup(0, 3, dst); st != ctxcache.Stall {
		t.Errorf("third distinct miss with two outstanding entries: %v", st)
	}
	if st, _ := c.Lookup(0, 1, dst); st != ctxcache.Miss {
		t.Errorf("a miss on a line in flight still merges: %v", st)
	}
	if c.Stats().Stalls != 1 {
		t.Errorf("stalls %d", c.Stats().Stalls)
	}
	for _, r := range waitResponses(t, c, 0, 3) {
		c.Release(r.PID)
	}
}

// TestNoAllocs: lookups allocate nothing, hit or miss.
func TestNoAllocs(t *testing.T) {
	f := newFixture(t, hostmem.QPC, 4096, hostmem.PCIe{})
	c, _ := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Sets: 64, Ways: 4})
	dst := make([]uint64, 16)
	resp := make([]ctxcache.Response, 4)
	get(t, c, 0, 1, dst)
	if a := testing.AllocsPerRun(1000, func() { c.Lookup(0, 1, dst) }); a != 0 {
		t.Errorf("hit: %v allocs", a)
	}
	i := uint64(0)
	if a := testing.AllocsPerRun(1000, func() {
		i = (i + 97) % 4096
		if st, _ := c.Lookup(0, i, dst); st == ctxcache.Miss {
			n := c.Poll(0, resp)
			for _, r := range resp[:n] {
				c.Release(r.PID)
			}
		}
		c.Update(i, dst)
	}); a != 0 {
		t.Errorf("miss and update: %v allocs", a)
	}
}

// TestEveryContextType: one cache design serves every context type; only
// the adapter differs (entry size, entries per line).
func TestEveryContextType(t *testing.T) {
	for typ := range hostmem.NumContextTypes {
		t.Run(typ.String(), func(t *testing.T) {
			f := newFixture(t, typ, 100, hostmem.PCIe{Latency: 10 * time.Microsecond})
			ew := hostmem.EntrySizes[typ] / 8
			for i := range uint64(100) {
				f.setHost(i, value(i, 5, ew))
			}
			ad := ctxcache.NewAdapter(f.table)
			c, err := ctxcache.New(ad, f.dma, ctxcache.Config{Sets: 8, Ways: 2})
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]uint64, ew)
			for i := range uint64(100) {
				get(t, c, 0, i, dst)
				if v := checkValue(t, dst, i); v != 5 {
					t.Fatalf("entry %d version %d", i, v)
				}
			}
			c.Poll(0, nil) // publishes the pipeline's lookup count
			s := c.Stats()
			// Entries share a fetch when they share a line: 8 per line for the MTT.
			wantFetches := uint64(100)
			if ad.EntriesPerLine == 8 {
				wantFetches = 13
			}
			if s.HostFetches != wantFetches || s.Lookups != 100 {
				t.Errorf("%v: %d fetches for 100 entries, want %d (%+v)", typ, s.HostFetches, wantFetches, s)
			}
		})
	}
}

// TestHostCommands: both caches take the host's commands (HostWrite,
// Invalidate) with a lookup of the entry cached, and with one whose fetch
// is under way: every later answer is the host's new entry, never the
// line fetched before the write.
func TestHostCommands(t *testing.T) {
	type hostCache interface {
		ctxcache.Cache
		HostWrite(idx uint64, src []uint64) error
		Invalidate(idx uint64)
	}
	for _, name := range []string{"GCCache", "baseline"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: 2 * time.Millisecond})
			for i := range uint64(64) {
				f.setHost(i, value(i, 1, 16))
			}
			cfg := ctxcache.Config{Sets: 16, Ways: 4}
			var c hostCache
			if name == "GCCache" {
				c, _ = ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, cfg)
			} else {
				c, _ = ctxcache.NewBaseline(ctxcache.NewAdapter(f.table), f.dma, cfg)
			}
			dst := make([]uint64, 16)
			get(t, c, 0, 3, dst) // cached
			if err := c.HostWrite(3, value(3, 2, 16)); err != nil {
				t.Fatal(err)
			}
			get(t, c, 0, 3, dst)
			if v := checkValue(t, dst, 3); v != 2 {
				t.Fatalf("after a host write to a cached entry: version %d, want 2", v)
			}
			// A write while the entry's fetch is under way.
			st, _ := c.Lookup(0, 40, dst)
			if st != ctxcache.Miss {
				t.Fatalf("entry 40: %v, want a miss", st)
			}
			if err := c.HostWrite(40, value(40, 5, 16)); err != nil {
				t.Fatal(err)
			}
			r := waitResponses(t, c, 0, 1)
			copy(dst, c.Data(r[0].PID))
			c.Release(r[0].PID)
			if v := checkValue(t, dst, 40); v != 5 {
				t.Fatalf("the answer to a fetch overtaken by a host write: version %d, want 5", v)
			}
			get(t, c, 0, 40, dst)
			if v := checkValue(t, dst, 40); v != 5 {
				t.Fatalf("after the write: version %d, want 5", v)
			}
			// Invalidate: the next lookup fetches host memory again.
			f.setHost(3, value(3, 9, 16)) // behind the cache's back
			c.Invalidate(3)
			get(t, c, 0, 3, dst)
			if v := checkValue(t, dst, 3); v != 9 {
				t.Fatalf("after Invalidate: version %d, want 9", v)
			}
		})
	}
}

// TestBaselineOneFetch: the baseline with one fetch in flight is the
// classic blocking cache. A miss queued behind another waits for it
// before its own fetch starts (three misses on distinct lines take three
// round trips, one after another), and a miss queued on a line that the
// fetch ahead brings in is a hit when its turn comes (no second fetch);
// the answers keep arrival order.
func TestBaselineOneFetch(t *testing.T) {
	const rtt = 20 * time.Millisecond
	f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: rtt})
	for i := range uint64(64) {
		f.setHost(i, value(i, 1, 16))
	}
	b, err := ctxcache.NewBaseline(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Sets: 16, Ways: 4, Outstanding: 1})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]uint64, 16)
	start := time.Now()
	for _, idx := range []uint64{2, 7, 2, 9} {
		if st, _ := b.Lookup(0, idx, dst); st != ctxcache.Miss {
			t.Fatalf("entry %d: %v, want a miss (a ticket)", idx, st)
		}
	}
	got := waitResponses(t, b, 0, 4)
	elapsed := time.Since(start)
	for i, want := range []uint64{2, 7, 2, 9} {
		if got[i].Index != want {
			t.Fatalf("answers out of order: %+v", got)
		}
		checkValue(t, b.Data(got[i].PID), want)
		b.Release(got[i].PID)
	}
	if !got[2].Hit {
		t.Errorf("the second lookup of entry 2 fetched again: %+v", got[2])
	}
	if s := b.Stats(); s.HostFetches != 3 || s.Misses != 3 || s.Hits != 1 {
		t.Errorf("stats %+v, want 3 fetches, 3 misses, 1 hit", s)
	}
	if elapsed < 3*rtt {
		t.Errorf("three misses answered in %v: their fetches overlapped (round trip %v)", elapsed, rtt)
	}
}

// TestAnswered: Answered gives what Poll gives, without polling the DMA
// engine: nothing while the fetch is in flight or done but not polled,
// the answer once the caller has polled the engine, for GCCache and the
// baseline alike.
func TestAnswered(t *testing.T) {
	for _, name := range []string{"GCCache", "baseline"} {
		t.Run(name, func(t *testing.T) {
			clk := hostmem.NewDrivenClock(time.Unix(0, 0))
			const latency = time.Microsecond
			f := newFixture(t, hostmem.QPC, 64, hostmem.PCIe{Latency: latency, Clock: clk})
			f.setHost(5, value(5, 3, 16))
			var c ctxcache.Cache
			var err error
			if name == "GCCache" {
				c, err = ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{})
			} else {
				c, err = ctxcache.NewBaseline(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Outstanding: 1})
			}
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]uint64, 16)
			st, pid := c.Lookup(0, 5, dst)
			if st != ctxcache.Miss {
				t.Fatalf("first lookup: %v, want a miss", st)
			}
			resp := make([]ctxcache.Response, 4)
			if n := c.Answered(0, resp); n != 0 {
				t.Fatalf("in flight: %d answers", n)
			}
			clk.Advance(2 * latency)
			if n := c.Answered(0, resp); n != 0 {
				t.Fatalf("fetch due, DMA engine not polled: %d answers", n)
			}
			if n := f.dma.Poll(); n != 1 {
				t.Fatalf("DMA engine completed %d transfers, want the fetch", n)
			}
			n := c.Answered(0, resp)
			if n != 1 || resp[0].PID != pid || resp[0].Index != 5 || resp[0].Err {
				t.Fatalf("after the poll: %d answers %+v, want ticket %d for entry 5", n, resp[:n], pid)
			}
			if v := checkValue(t, c.Data(pid), 5); v != 3 {
				t.Errorf("answer's version %d, want 3", v)
			}
			c.Release(pid)
			if n := c.Answered(0, resp); n != 0 {
				t.Errorf("answered twice: %+v", resp[:n])
			}
		})
	}
}
