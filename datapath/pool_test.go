package datapath_test

import (
	"math/rand/v2"
	"testing"

	"github.com/softrnic/softrnic/datapath"
)

// TestPoolModel checks the pool against a model: a set of lent indices.
// No buffer is handed out twice, and every one comes back.
func TestPoolModel(t *testing.T) {
	const n = 32
	p := datapath.NewPool(n, 64)
	lent := map[uint64]bool{}
	var held []datapath.Frame
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		switch r.IntN(4) {
		case 0, 1:
			frames := make([]datapath.Frame, r.IntN(8))
			got := p.Get(frames)
			if want := min(len(frames), n-len(lent)); got != want {
				t.Fatalf("Get(%d) = %d, want %d", len(frames), got, want)
			}
			for _, f := range frames[:got] {
				if lent[f.Handle] || len(f.Data) != 64 {
					t.Fatalf("buffer %d handed out twice or wrong size", f.Handle)
				}
				lent[f.Handle] = true
				f.Data[0] = byte(f.Handle) // owned: writable
			}
			held = append(held, frames[:got]...)
		case 2:
			k := r.IntN(len(held) + 1)
			for _, f := range held[:k] {
				delete(lent, f.Handle)
			}
			p.Put(held[:k])
			held = held[k:]
		case 3:
			if h, ok := p.Take(); ok {
				if lent[uint64(h)] {
					t.Fatalf("Take gave lent buffer %d", h)
				}
				p.Return(h)
			} else if len(lent) != n {
				t.Fatal("Take failed with buffers free")
			}
		}
		if p.Lent() != len(lent) || p.Available()+p.Lent() != p.Cap() {
			t.Fatalf("lent %d, model %d", p.Lent(), len(lent))
		}
	}
}
