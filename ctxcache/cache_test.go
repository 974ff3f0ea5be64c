package ctxcache_test

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
)

// fixture is a context table in host memory with a DMA engine.
type fixture struct {
	mem   *hostmem.Memory
	dma   *hostmem.DMA
	table *hostmem.Table
}

func newFixture(t testing.TB, typ hostmem.ContextType, count int, model hostmem.PCIe) *fixture {
	mem := hostmem.NewMemory()
	f := &fixture{mem: mem, dma: hostmem.NewDMA(mem, model, 0), table: hostmem.NewTable(mem, typ, hostmem.EntrySizes[typ], count)}
	t.Cleanup(f.dma.Close)
	return f
}

// hostWords reads entry idx straight from host memory.
func (f *fixture) hostWords(idx uint64) []uint64 {
	e, _ := f.table.Entry(idx)
	w := make([]uint64, len(e)/8)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(e[8*i:])
	}
	return w
}

func (f *fixture) setHost(idx uint64, w []uint64) {
	e, _ := f.table.Entry(idx)
	for i := range w {
		binary.LittleEndian.PutUint64(e[8*i:], w[i])
	}
}

// get looks an entry up for a pipeline, waiting for the response on a miss.
func get(t testing.TB, c ctxcache.Cache, pipe int, idx uint64, dst []uint64) ctxcache.Status {
	resp := make([]ctxcache.Response, 16)
	for {
		st, pid := c.Lookup(pipe, idx, dst)
		switch st {
		case ctxcache.Hit, ctxcache.Fault:
			return st
		case ctxcache.Stall:
			time.Sleep(time.Microsecond)
			continue
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			n := c.Poll(pipe, resp)
			for _, r := range resp[:n] {
				if r.PID != pid {
					t.Errorf("pipeline %d: response for PID %d, waiting for %d", pipe, r.PID, pid)
				}
				if r.Err {
					t.Errorf("pipeline %d: fetch of %d failed", pipe, r.Index)
				}
				copy(dst, c.Data(r.PID))
				c.Release(r.PID)
			}
			if n > 0 {
				return ctxcache.Miss
			}
			if time.Now().After(deadline) {
				t.Fatalf("pipeline %d: no response for %d", pipe, idx)
			}
			runtime.Gosched() // let the DMA engine's goroutine run
		}
	}
}

// value is the content of entry idx at a version: the index and the
// version, and a checksum in every further word, so that torn or misplaced
// reads show. A one-word entry (MTT) packs index and version.
func value(idx, version uint64, words int) []uint64 {
	w := make([]uint64, words)
	if words == 1 {
		w[0] = idx<<32 | version
		return w
	}
	w[0], w[1] = idx, version
	for i := 2; i < words; i++ {
		w[i] = idx*0x9e3779b97f4a7c15 ^ version*uint64(i)
	}
	return w
}

// checkValue checks that w is a whole value of entry idx and returns its
// version.
func checkValue(t testing.TB, w []uint64, idx uint64) uint64 {
	t.Helper()
	version := w[0] & 0xffffffff
	if len(w) > 1 {
		version = w[1]
	}
	want := value(idx, version, len(w))
	for i := range w {
		if w[i] != want[i] {
			t.Fatalf("entry %d: word %d = %#x, want %#x (torn or misplaced read: %v)", idx, i, w[i], want[i], w)
		}
	}
	return version
}

// TestModel runs several pipelines against a small cache (so that lines are
// evicted all the time) while a host goroutine invalidates and flushes. Each
// pipeline owns some entries and updates them; everyone reads everything.
// Every read must be a whole, well-placed entry; an owner must read its own
// last write; and after a final flush host memory must equal the model.
func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   hostmem.ContextType
		model hostmem.PCIe
	}{
		{"QPC/instant", hostmem.QPC, hostmem.PCIe{}},
		{"QPC/pcie", hostmem.QPC, hostmem.PCIe{Latency: 20 * time.Microsecond, MaxReads: 8}},
		{"MTT/pcie", hostmem.MTT, hostmem.PCIe{Latency: 10 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const count, pipes = 512, 3
			f := newFixture(t, tc.typ, count, tc.model)
			ew := hostmem.EntrySizes[tc.typ] / 8
			for i := range uint64(count) {
				f.setHost(i, value(i, 0, ew)[:ew])
			}
			c, err := ctxcache.New(ctxcache.NewAdapter(f.table), f.dma, ctxcache.Config{Sets: 8, Ways: 2, Outstanding: 4, PIDs: 16, Pipelines: pipes})
			if err != nil {
				t.Fatal(err)
			}
			models := make([]map[uint64]uint64, pipes) // owner's latest version per entry
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for p := range pipes {
				models[p] = map[uint64]uint64{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(p), 7))
					dst := make([]uint64, ew)
					for range 3000 {
						idx := uint64(r.IntN(count))
						owner := int(idx % pipes)
						if owner == p && r.IntN(3) == 0 {
							v := models[p][idx] + 1
							c.Update(idx, value(idx, v, ew))
							models[p][idx] = v
							continue
						}
						get(t, c, p, idx, dst)
						v := checkValue(t, dst, idx)
						if owner == p && v != models[p][idx] {
							t.Errorf("pipeline %d: entry %d version %d, last written %d", p, idx, v, models[p][idx])
						}
					}
				}()
			}
			var hwg sync.WaitGroup
			hwg.Add(1)
			go func() { // the host: invalidations and flushes
				defer hwg.Done()
				r := rand.New(rand.NewPCG(99, 7))
				for {
					select {
					case <-stop:
						return
					default:
					}
					if r.IntN(10) == 0 {
						c.Flush()
					} else {
						c.Invalidate(uint64(r.IntN(count)))
					}
					time.Sleep(20 * time.Microsecond)
				}
			}()
			wg.Wait()
			close(stop)
			hwg.Wait()
			c.Flush()
			f.dma.Quiesce()
			for p := range pipes {
				for idx, v := range models[p] {
					if got := checkValue(t, f.hostWords(idx), idx); got != v {
						t.Errorf("host entry %d version %d, want %d", idx, got, v)
					}
				}
			}
			s := c.Stats()
			t.Logf("%+v", s)
			if s.Evictions == 0 || s.WriteBacks == 0 || s.Misses == 0 || s.Hits == 0 {
				t.Errorf("the run did not exercise the cache: %+v", s)
			}
		})
	}
}
