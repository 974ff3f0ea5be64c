package perftest

import (
	"math"
	"math/bits"
)

// Histogram is a high-dynamic-range histogram (the HdrHistogram layout):
// values from 1 to 2^(subBits+buckets) are kept with a relative error
// below 2^-subBits (about 0.05 % with 11 sub-bucket bits), in fixed
// memory; Record does not allocate. Values are integers: latencies are
// recorded in nanoseconds.
type Histogram struct {
	counts        []uint64
	total         uint64
	min, max, sum uint64
	sumSq         float64
}

const (
	subBits  = 11 // 2048 sub-buckets: 3 significant decimal digits
	subCount = 1 << subBits
	hdrMax   = 1 << 40 // about 18 minutes in nanoseconds
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	buckets := 40 - subBits + 1
	return &Histogram{counts: make([]uint64, (buckets+1)*subCount/2), min: math.MaxUint64}
}

// index maps v to its counter: values below subCount count exactly; above,
// each power of two has subCount/2 counters.
func index(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits // >= 1
	return (shift+1)*subCount/2 + int(v>>shift) - subCount/2
}

// lowest returns the smallest value that maps to counter i, and the
// width of its range.
func lowest(i int) (uint64, uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	shift := i/(subCount/2) - 1
	sub := uint64(i%(subCount/2)) + subCount/2
	return sub << shift, 1 << shift
}

// Record adds one value; values above the range are clamped to it.
func (h *Histogram) Record(v uint64) {
	if v >= hdrMax {
		v = hdrMax - 1
	}
	h.counts[index(v)]++
	h.total++
	h.sum += v
	h.sumSq += float64(v) * float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Min and Max are the exact extremes (0 when empty).
func (h *Histogram) Min() uint64 {
	if h.total == 0 {
		return 0
	}
	return h.min
}

// Max is the largest value recorded.
func (h *Histogram) Max() uint64 { return h.max }

// Mean is the exact average.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.total)
}

// StdDev is the exact population standard deviation.
func (h *Histogram) StdDev() float64 {
	if h.total == 0 {
		return 0
	}
	m := h.Mean()
	return math.Sqrt(max(0, h.sumSq/float64(h.total)-m*m))
}

// Percentile returns the value at or below which p percent of the values
// lie: the highest value equivalent to the counter holding that rank,
// clamped to the exact maximum.
func (h *Histogram) Percentile(p float64) uint64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.total)))
	rank = max(1, min(rank, h.total))
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, w := lowest(i)
			return max(h.Min(), min(lo+w-1, h.max))
		}
	}
	return h.max
}
