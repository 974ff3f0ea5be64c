package perftest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHistogramModel records random latencies of several shapes and checks
// every statistic against the sorted samples: count, min, max and mean
// exactly, percentiles within the histogram's relative error.
func TestHistogramModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func() uint64{
		"small":     func() uint64 { return uint64(r.IntN(3000)) },
		"lognormal": func() uint64 { return uint64(math.Exp(r.NormFloat64()*1.5 + 10)) },
		"bimodal": func() uint64 {
			if r.IntN(100) == 0 {
				return 5_000_000 + uint64(r.IntN(1000))
			}
			return 2_000 + uint64(r.IntN(500))
		},
		"huge": func() uint64 { return r.Uint64N(1 << 39) },
	}
	for name, gen := range shapes {
		for _, n := range []int{1, 2, 10, 1000, 100000} {
			h := NewHistogram()
			vals := make([]uint64, n)
			var sum float64
			for i := range vals {
				vals[i] = gen()
				h.Record(vals[i])
				sum += float64(vals[i])
			}
			slices.Sort(vals)
			if h.Count() != uint64(n) || h.Min() != vals[0] || h.Max() != vals[n-1] {
				t.Fatalf("%s/%d: count %d min %d max %d, want %d %d %d", name, n, h.Count(), h.Min(), h.Max(), n, vals[0], vals[n-1])
			}
			if m := sum / float64(n); math.Abs(h.Mean()-m) > 1e-9*m+1e-9 {
				t.Fatalf("%s/%d: mean %f, want %f", name, n, h.Mean(), m)
			}
			for _, p := range []float64{0, 1, 50, 90, 99, 99.9, 100} {
				rank := max(1, int(math.Ceil(p/100*float64(n))))
				want := vals[rank-1]
				got := h.Percentile(p)
				if float64(got) < float64(want) || float64(got) > float64(want)*(1+1.0/1024)+1 {
					t.Errorf("%s/%d: p%v = %d, want %d (within 0.1%%)", name, n, p, got, want)
				}
			}
		}
	}
}

func TestHistogramIndex(t *testing.T) {
	for v := uint64(0); v < 1<<22; v += 1 + v/1000 {
		i := index(v)
		lo, w := lowest(i)
		if v < lo || v >= lo+w {
			t.Fatalf("value %d in counter %d [%d, %d)", v, i, lo, lo+w)
		}
	}
	h := NewHistogram()
	if i := index(hdrMax - 1); i >= len(h.counts) {
		t.Fatalf("largest value maps to %d of %d counters", i, len(h.counts))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := NewHistogram()
	b.ReportAllocs()
	for i := range b.N {
		h.Record(uint64(i*7919) % 10_000_000)
	}
}
