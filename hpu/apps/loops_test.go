package apps

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The element loops the handlers run on every packet, per 1 KiB payload
// (the benchmarks' path MTU).
func BenchmarkAddInto(b *testing.B) {
	for _, float := range []bool{false, true} {
		name := map[bool]string{false: "int32", true: "float32"}[float]
		b.Run(name, func(b *testing.B) {
			dst, p := make([]byte, 1024), make([]byte, 1024)
			b.SetBytes(1024)
			for b.Loop() {
				addInto(dst, p, float)
			}
		})
	}
}

func BenchmarkReduceLoops(b *testing.B) {
	p := make([]byte, 1024)
	for i := 0; i < len(p); i += 4 {
		le.PutUint32(p[i:], rand.Uint32())
	}
	for _, op := range []ReduceOp{Sum, Min, Max} {
		b.Run([]string{"sum", "min", "max"}[op], func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				reduceSink += reducePacket(p, op)
			}
		})
	}
}

var reduceSink int64

// TestElementLoops: the word-at-a-time loops against element-by-element
// references, on random elements (extremes included) of every length up
// to 40 elements, and a payload whose length is no multiple of four.
func TestElementLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	elem := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return 0x7fffffff
		case 1:
			return 0x80000000
		}
		return rng.Uint32()
	}
	for n := 0; n <= 40; n++ {
		for range 20 {
			p, dst := make([]byte, 4*n), make([]byte, 4*n)
			for i := 0; i < len(p); i += 4 {
				le.PutUint32(p[i:], elem())
				le.PutUint32(dst[i:], elem())
			}
			want := make([]byte, len(dst))
			for i := 0; i < len(p); i += 4 {
				le.PutUint32(want[i:], le.Uint32(dst[i:])+le.Uint32(p[i:]))
			}
			addInto(dst, p, false)
			if string(dst) != string(want) {
				t.Fatalf("%d elements: addInto % x, want % x", n, dst, want)
			}
			var sum int64
			lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
			for i := 0; i < len(p); i += 4 {
				v := int32(le.Uint32(p[i:]))
				sum, lo, hi = sum+int64(v), min(lo, v), max(hi, v)
			}
			for op, want := range map[ReduceOp]int64{Sum: sum, Min: int64(lo), Max: int64(hi)} {
				if got := reducePacket(p, op); got != want {
					t.Fatalf("%d elements, op %d: %d, want %d", n, op, got, want)
				}
			}
		}
	}
	// Two float32 lanes: each adds as float32.
	dst, p := make([]byte, 8), make([]byte, 8)
	le.PutUint32(dst, math.Float32bits(1.5))
	le.PutUint32(dst[4:], math.Float32bits(-2))
	le.PutUint32(p, math.Float32bits(0.25))
	le.PutUint32(p[4:], math.Float32bits(3))
	addInto(dst, p, true)
	if a, b := math.Float32frombits(le.Uint32(dst)), math.Float32frombits(le.Uint32(dst[4:])); a != 1.75 || b != 1 {
		t.Fatalf("float32: %v %v, want 1.75 1", a, b)
	}
	// A tail shorter than an element is left alone.
	dst, p = make([]byte, 6), []byte{1, 0, 0, 0, 9, 9}
	addInto(dst, p, false)
	if le.Uint32(dst) != 1 || dst[4] != 0 || dst[5] != 0 {
		t.Fatalf("a 6-byte payload: % x", dst)
	}
}
