package hostmem_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host/hostmem"
)

func TestMemory(t *testing.T) {
	m := hostmem.NewMemory()
	a := m.Alloc(100)
	buf := []byte("registered buffer")
	b := m.Map(buf)
	if a == 0 || b <= a || b%4096 != 0 {
		t.Fatalf("IOVAs %#x %#x", a, b)
	}
	s, err := m.Slice(b+11, 6)
	if err != nil || string(s) != "buffer" {
		t.Fatalf("Slice = %q, %v", s, err)
	}
	for _, c := range []struct {
		addr uint64
		n    int
	}{{0, 1}, {a + 99, 2}, {a + 100, 1}, {b - 1, 2}, {b + 17, 1}, {1 << 60, 1}} {
		if _, err := m.Slice(c.addr, c.n); !errors.Is(err, hostmem.ErrFault) {
			t.Errorf("Slice(%#x, %d) = %v, want ErrFault", c.addr, c.n, err)
		}
	}
	if err := m.Unmap(b); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Slice(b, 1); !errors.Is(err, hostmem.ErrFault) {
		t.Error("unmapped region still reachable")
	}
}

type recorder struct {
	tags []uint64
	at   []time.Time
	n    atomic.Int32
}

func (r *recorder) DMADone(tag uint64, err error) {
	r.tags = append(r.tags, tag)
	r.at = append(r.at, time.Now())
	r.n.Add(1)
}

// TestDMA checks copies, faults, counters, and with a PCIe model the
// latency and the ordering of writes before later reads.
func TestDMA(t *testing.T) {
	for _, model := range []hostmem.PCIe{{}, {Latency: 50 * time.Microsecond, BytesPerSec: 1e9, MaxReads: 2}} {
		m := hostmem.NewMemory()
		d := hostmem.NewDMA(m, model, 0)
		addr := m.Alloc(4096)
		if err := d.Write(addr+8, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 5)
		start := time.Now()
		if err := d.Read(addr+8, got); err != nil || string(got) != "hello" {
			t.Fatalf("%+v: Read = %q, %v", model, got, err)
		}
		if el := time.Since(start); el < model.Latency {
			t.Errorf("%+v: read took %v", model, el)
		}
		if err := d.Read(addr+4095, got); !errors.Is(err, hostmem.ErrFault) {
			t.Errorf("%+v: read across the end: %v", model, err)
		}
		var r recorder
		bufs := make([][]byte, 4)
		for i := range bufs {
			bufs[i] = make([]byte, 8)
			binary.LittleEndian.PutUint64(bufs[i], 0)
			if err := d.Write(addr+uint64(64*i), []byte{byte(i + 1)}); err != nil {
				t.Fatal(err)
			}
			if err := d.ReadAsync(addr+uint64(64*i), bufs[i], &r, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(time.Second); r.n.Load() < 4 && time.Now().Before(deadline); {
			d.Poll()
		}
		d.Close()
		for i, tag := range r.tags {
			if tag != uint64(i) || bufs[i][0] != byte(i+1) {
				t.Errorf("%+v: completion %d: tag %d data %d", model, i, tag, bufs[i][0])
			}
		}
		if s := d.Stats(); s.Reads.Load() != 5 || s.Writes.Load() != 5 || s.Faults.Load() != 1 {
			t.Errorf("%+v: reads %d writes %d faults %d", model, s.Reads.Load(), s.Writes.Load(), s.Faults.Load())
		}
	}
}

func TestTablesAndRegistration(t *testing.T) {
	m := hostmem.NewMemory()
	qpc := hostmem.NewTable(m, hostmem.QPC, hostmem.EntrySizes[hostmem.QPC], 16)
	e, err := qpc.Entry(3)
	if err != nil || len(e) != 128 {
		t.Fatal(err)
	}
	copy(e, "qp three")
	addr, _ := qpc.Addr(3)
	d := hostmem.NewDMA(m, hostmem.PCIe{}, 0)
	got := make([]byte, 8)
	if err := d.Read(addr, got); err != nil || string(got) != "qp three" {
		t.Fatalf("DMA read of QPC 3: %q, %v", got, err)
	}
	if _, err := qpc.Addr(16); !errors.Is(err, hostmem.ErrIndex) {
		t.Errorf("index 16 of 16: %v", err)
	}
	mtt := hostmem.NewTable(m, hostmem.MTT, 8, 8)
	reg, err := hostmem.NewRegistrar(m, mtt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{7}, 3*4096+1)
	mr, err := reg.Register(buf)
	if err != nil || mr.Pages != 4 {
		t.Fatalf("Register: %+v, %v", mr, err)
	}
	for p := range 4 {
		e, _ := mtt.Entry(mr.FirstMTT + uint64(p))
		page := binary.LittleEndian.Uint64(e)
		b, err := m.Slice(page, 1)
		if page != mr.IOVA+uint64(p*4096) || err != nil || b[0] != 7 {
			t.Errorf("page %d at %#x: %v", p, page, err)
		}
	}
	if _, err := reg.Register(make([]byte, 5*4096)); !errors.Is(err, hostmem.ErrMTTFull) {
		t.Errorf("overfull MTT: %v", err)
	}
}

// TestRegistrarModel registers and releases regions of random sizes
// against a model of the MTT: a region takes the lowest-starting run of
// free entries long enough for it (the runs between live regions, and
// after the last), Register fails exactly when no run is, live regions
// never overlap, every entry holds its page's address, and the count in
// use is the live regions' pages.
func TestRegistrarModel(t *testing.T) {
	const entries = 64
	m := hostmem.NewMemory()
	mtt := hostmem.NewTable(m, hostmem.MTT, 8, entries)
	reg, err := hostmem.NewRegistrar(m, mtt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	type live struct {
		mr  hostmem.MR
		buf []byte
	}
	var regions []live // by start
	lowestFit := func(n uint64) (uint64, bool) {
		at := uint64(0)
		for _, r := range regions {
			if r.mr.FirstMTT-at >= n {
				return at, true
			}
			at = r.mr.FirstMTT + uint64(r.mr.Pages)
		}
		return at, entries-at >= n
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 3000 {
		if len(regions) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(regions))
			if err := reg.Release(regions[i].mr); err != nil {
				t.Fatalf("step %d: Release: %v", step, err)
			}
			regions = append(regions[:i], regions[i+1:]...)
		} else {
			pages := 1 + rng.IntN(12)
			buf := make([]byte, pages*4096-rng.IntN(4096))
			buf[0] = byte(step)
			want, fits := lowestFit(uint64(pages))
			mr, err := reg.Register(buf)
			if fits != (err == nil) {
				t.Fatalf("step %d: %d pages: %v, the model says fits %v", step, pages, err, fits)
			}
			if err != nil {
				if !errors.Is(err, hostmem.ErrMTTFull) {
					t.Fatalf("step %d: %v", step, err)
				}
				continue
			}
			if mr.FirstMTT != want {
				t.Fatalf("step %d: %d pages at entry %d, the model says %d", step, pages, mr.FirstMTT, want)
			}
			i := sort.Search(len(regions), func(i int) bool { return regions[i].mr.FirstMTT > mr.FirstMTT })
			regions = append(regions[:i], append([]live{{mr, buf}}, regions[i:]...)...)
		}
		used := 0
		for i, r := range regions {
			if i > 0 && regions[i-1].mr.FirstMTT+uint64(regions[i-1].mr.Pages) > r.mr.FirstMTT {
				t.Fatalf("step %d: regions at %d and %d overlap", step, regions[i-1].mr.FirstMTT, r.mr.FirstMTT)
			}
			used += r.mr.Pages
			for p := range r.mr.Pages {
				e, _ := mtt.Entry(r.mr.FirstMTT + uint64(p))
				if binary.LittleEndian.Uint64(e) != r.mr.IOVA+uint64(p*4096) {
					t.Fatalf("step %d: entry %d of a region at %d holds %#x", step, p, r.mr.FirstMTT, binary.LittleEndian.Uint64(e))
				}
			}
			if b, err := m.Slice(r.mr.IOVA, 1); err != nil || b[0] != r.buf[0] {
				t.Fatalf("step %d: a live region is not mapped: %v", step, err)
			}
		}
		if n, c := reg.InUse(); n != used || c != entries {
			t.Fatalf("step %d: InUse %d of %d, the model %d of %d", step, n, c, used, entries)
		}
	}
}

// TestMemoryMapModel maps and unmaps regions at random against a model
// (a map of live IOVAs to their buffers) while readers resolve regions
// that stay mapped: every live region reads back its own bytes, every
// unmapped one faults, and a reader never sees a region change under it
// (the table is appended to in place).
func TestMemoryMapModel(t *testing.T) {
	m := hostmem.NewMemory()
	pinned := make([]uint64, 8)
	for i := range pinned {
		pinned[i] = m.Map([]byte{byte(i), byte(i), byte(i)})
	}
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				i := (k + r) % len(pinned)
				s, err := m.Slice(pinned[i]+1, 2)
				if err != nil || s[0] != byte(i) || s[1] != byte(i) {
					errs <- fmt.Errorf("pinned region %d: %v, %v", i, s, err)
					return
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64][]byte{}
	var dead []uint64
	for step := range 4000 {
		if len(live) == 0 || rng.IntN(3) > 0 {
			buf := make([]byte, 4+rng.IntN(9000))
			binary.LittleEndian.PutUint32(buf[len(buf)-4:], uint32(step))
			live[m.Map(buf)] = buf
		} else {
			for a := range live {
				if err := m.Unmap(a); err != nil {
					t.Fatal(err)
				}
				delete(live, a)
				dead = append(dead, a)
				break
			}
		}
		if step%500 != 499 {
			continue
		}
		for a, buf := range live {
			s, err := m.Slice(a, len(buf))
			if err != nil || &s[0] != &buf[0] {
				t.Fatalf("step %d: live region %#x: %v", step, a, err)
			}
			if _, err := m.Slice(a, len(buf)+1); !errors.Is(err, hostmem.ErrFault) {
				t.Fatalf("step %d: %#x past its end: %v", step, a, err)
			}
		}
		for _, a := range dead {
			if _, err := m.Slice(a, 1); !errors.Is(err, hostmem.ErrFault) {
				t.Fatalf("step %d: unmapped %#x still reachable", step, a)
			}
		}
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
