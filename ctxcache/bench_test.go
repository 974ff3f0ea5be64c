package ctxcache_test

import (
	"testing"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
)

// BenchmarkLookupHit is the hit path: GCCache and the baseline, one
// pipeline, QPC entries (128 bytes), the paper's geometry.
func BenchmarkLookupHit(b *testing.B) {
	for _, kind := range []string{"GCCache", "baseline"} {
		b.Run(kind, func(b *testing.B) {
			f := newFixture(b, hostmem.QPC, 4096, hostmem.PCIe{})
			var c ctxcache.Cache
			if kind == "GCCache" {
				c, _ = ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{})
			} else {
				c, _ = ctxcache.NewBaseline(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{})
			}
			dst := make([]uint64, 16)
			for i := range uint64(1024) {
				get(b, c, 0, i, dst)
			}
			b.ReportAllocs()
			i := uint64(0)
			for b.Loop() {
				c.Lookup(0, i&1023, dst)
				i += 7
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
		})
	}
}

// BenchmarkLookupMiss is the miss path with an instant DMA engine: lookup,
// fetch, install, response, release.
func BenchmarkLookupMiss(b *testing.B) {
	f := newFixture(b, hostmem.QPC, 1<<16, hostmem.PCIe{})
	c, _ := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{})
	dst := make([]uint64, 16)
	resp := make([]ctxcache.Response, 8)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i = (i + 4099) & (1<<16 - 1)
		if st, _ := c.Lookup(0, i, dst); st == ctxcache.Miss {
			n := c.Poll(0, resp)
			for _, r := range resp[:n] {
				c.Release(r.PID)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lookup")
}
