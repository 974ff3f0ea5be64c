package apps_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/hpu/apps"
)

// TestHistogram: messages of random int32 values, over several packets
// each, counted on the NIC: the snapshot and the host's copy are the
// histogram the host computes itself, byte for byte.
func TestHistogram(t *testing.T) {
	const bins, lo, hi = 7, -1000, 1000 // the range does not divide into bins evenly
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	size := 4*bins + 24
	host := &region{b: fill(size+16, 0xee)}
	var wg sync.WaitGroup
	h, err := apps.NewHistogram(e, host, bins, lo, hi, func(_ *hpu.Message, err error) {
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	empty := h.Snapshot()
	if !slices.Equal(empty.Bins, make([]uint64, bins)) || empty.Count != 0 || empty.Sum != 0 || empty.Min != math.MaxInt32 || empty.Max != math.MinInt32 {
		t.Errorf("before any message: %+v", empty)
	}

	want := apps.HistogramSnapshot{Bins: make([]uint64, bins), Min: math.MaxInt32, Max: math.MinInt32}
	const msgs = 12
	wg.Add(msgs)
	for m := range msgs {
		n := 1 + rand.IntN(3000)
		if m == 0 {
			n = 250 // one packet
		}
		v := make([]byte, 4*n)
		for i := range n {
			var x int32
			switch rand.IntN(10) {
			case 0:
				x = rand.Int32() - math.MaxInt32/2 // mostly far outside the range
			case 1:
				x = []int32{lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, math.MinInt32, math.MaxInt32}[rand.IntN(8)]
			default:
				x = lo - 50 + rand.Int32N(hi-lo+100)
			}
			le.PutUint32(v[4*i:], uint32(x))
			b := 0
			switch {
			case x >= hi:
				b = bins - 1
			case x >= lo:
				b = int((int64(x) - lo) * bins / (hi - lo))
			}
			want.Bins[b]++
			want.Count++
			want.Sum += int64(x)
			want.Min, want.Max = min(want.Min, x), max(want.Max, x)
		}
		send(t, e, h.In, hpu.Message{QPN: 17, MSN: uint32(m)}, v, 1000)
	}
	wg.Wait()
	got := h.Snapshot()
	if !slices.Equal(got.Bins, want.Bins) || got.Count != want.Count || got.Sum != want.Sum || got.Min != want.Min || got.Max != want.Max {
		t.Errorf("snapshot %+v, want %+v", got, want)
	}
	wantHost := fill(len(host.b), 0xee)
	for i, c := range want.Bins {
		le.PutUint32(wantHost[4*i:], uint32(c))
	}
	le.PutUint64(wantHost[4*bins:], want.Count)
	le.PutUint64(wantHost[4*bins+8:], uint64(want.Sum))
	le.PutUint32(wantHost[4*bins+16:], uint32(want.Min))
	le.PutUint32(wantHost[4*bins+20:], uint32(want.Max))
	if got := host.bytes(); !bytes.Equal(got, wantHost) {
		t.Errorf("host memory\n%x\nwant\n%x", got, wantHost)
	}
	if d := h.In.Stats.DMABytes.Load(); d != uint64(msgs*size) {
		t.Errorf("%d bytes DMAed, want %d (the picture after each message)", d, msgs*size)
	}
}

// TestHistogramShape: a payload that is not whole int32s fails its
// message; the histogram's parameters are checked.
func TestHistogramShape(t *testing.T) {
	e := hpu.New(hpu.Config{Clusters: 1, HPUs: 2})
	defer e.Close()
	host := &region{b: make([]byte, 4*4+24)}
	errs := make(chan error, 1)
	h, err := apps.NewHistogram(e, host, 4, 0, 100, func(_ *hpu.Message, err error) { errs <- err })
	if err != nil {
		t.Fatal(err)
	}
	send(t, e, h.In, hpu.Message{QPN: 17}, make([]byte, 10), 1000)
	if err := <-errs; !errors.Is(err, hpu.ErrHandlerPanic) || !strings.Contains(err.Error(), apps.ErrShape.Error()) {
		t.Errorf("10 bytes: %v, want ErrShape", err)
	}
	send(t, e, h.In, hpu.Message{QPN: 17, MSN: 1}, make([]byte, 12), 6) // packets of 6 bytes
	if err := <-errs; !errors.Is(err, hpu.ErrHandlerPanic) || !strings.Contains(err.Error(), apps.ErrShape.Error()) {
		t.Errorf("packets of 6 bytes: %v, want ErrShape", err)
	}
	if got := host.bytes(); !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("a failed message reached host memory")
	}
	for _, c := range []struct {
		bins   int
		lo, hi int32
		host   int
	}{{0, 0, 1, 100}, {4, 5, 5, 100}, {4, 6, 5, 100}, {4, 0, 10, 4*4 + 23}} {
		if _, err := apps.NewHistogram(e, &region{b: make([]byte, c.host)}, c.bins, c.lo, c.hi, nil); !errors.Is(err, apps.ErrShape) {
			t.Errorf("%+v: %v, want ErrShape", c, err)
		}
	}
}
