package apps_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/hpu/apps"
)

// strided places data as layout does, into ref.
func strided(ref []byte, l apps.Strided, data []byte) {
	for i, c := range data {
		ref[l.Offset+i/l.Block*l.Stride+i%l.Block] = c
	}
}

// room is the longest message layout places in n bytes, counted.
func room(l apps.Strided, n int) int {
	i := 0
	for l.Offset+i/l.Block*l.Stride+i%l.Block < n {
		i++
	}
	return i
}

// TestScatter: messages of various lengths, in packets that start
// mid-block and span blocks, land in the strided layout byte for byte;
// the gaps keep what they held; a message longer than the layout's room
// fails and nothing of it lands.
func TestScatter(t *testing.T) {
	for _, c := range []struct {
		layout apps.Strided
		host   int
		mtu    int
	}{
		{apps.Strided{Block: 48, Stride: 80, Offset: 16}, 80*100 + 16 + 30, 1000}, // room ends mid-block
		{apps.Strided{Block: 48, Stride: 80, Offset: 0}, 80 * 40, 1000},           // room ends in a gap
		{apps.Strided{Block: 7, Stride: 1000, Offset: 3}, 20 * 1000, 64},          // packets over many blocks
		{apps.Strided{Block: 64, Stride: 64, Offset: 5}, 4096, 1000},              // contiguous
	} {
		e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
		host := &region{b: fill(c.host, 0xee)}
		errs := make(chan error, 1)
		in, err := apps.NewScatter(e, host, c.layout, func(_ *hpu.Message, err error) { errs <- err })
		if err != nil {
			t.Fatal(err)
		}
		ref := fill(c.host, 0xee)
		fits := room(c.layout, c.host)
		dma := 0
		for m, n := range []int{fits / 2, 1, 47, 48, 49, 1000, 2333, fits, 0, fits / 3} {
			n = min(n, fits)
			dma += n
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(rand.IntN(0xee)) // never the gaps' byte
			}
			send(t, e, in, hpu.Message{QPN: 17, MSN: uint32(m)}, data, c.mtu)
			if err := <-errs; err != nil {
				t.Fatalf("%+v: message of %d bytes: %v", c.layout, n, err)
			}
			strided(ref, c.layout, data)
			if got := host.bytes(); !bytes.Equal(got, ref) {
				t.Fatalf("%+v: message of %d bytes: host memory differs from the layout", c.layout, n)
			}
		}
		if d := in.Stats.DMABytes.Load(); d != uint64(dma) {
			t.Errorf("%+v: %d bytes DMAed", c.layout, d)
		}

		// One byte too many: the message fails, before anything lands.
		send(t, e, in, hpu.Message{QPN: 17, MSN: 100}, fill(fits+1, 1), c.mtu)
		if err := <-errs; !errors.Is(err, hpu.ErrHandlerPanic) || !strings.Contains(err.Error(), apps.ErrShape.Error()) {
			t.Errorf("%+v: %d bytes for a room of %d: %v, want ErrShape", c.layout, fits+1, fits, err)
		}
		if got := host.bytes(); !bytes.Equal(got, ref) {
			t.Errorf("%+v: a message too long landed", c.layout)
		}
		// The same with its length unknown (a SEND's): the packet that
		// overflows fails it; the gaps are still untouched.
		for i, off := 0, 0; off < fits+1; i++ {
			n := min(c.mtu, fits+1-off)
			submit(t, e, in, hpu.Message{QPN: 17, MSN: 101}, hpu.Packet{Payload: fill(n, 2), Offset: uint32(off), Index: i, First: i == 0, Last: off+n == fits+1})
			off += n
		}
		if err := <-errs; !errors.Is(err, hpu.ErrHandlerPanic) || !strings.Contains(err.Error(), apps.ErrShape.Error()) {
			t.Errorf("%+v: %d bytes of unknown length for a room of %d: %v, want ErrShape", c.layout, fits+1, fits, err)
		}
		got := host.bytes()
		strided(got, c.layout, make([]byte, fits)) // zero the layout: the gaps are left
		strided(ref, c.layout, make([]byte, fits))
		if !bytes.Equal(got, ref) {
			t.Errorf("%+v: a message too long wrote outside the layout", c.layout)
		}
		e.Close()
	}
}

// TestScatterLayout: layouts that cannot work are refused.
func TestScatterLayout(t *testing.T) {
	e := hpu.New(hpu.Config{Clusters: 1, HPUs: 1})
	defer e.Close()
	host := &region{b: make([]byte, 100)}
	for _, l := range []apps.Strided{
		{Block: 0, Stride: 10},
		{Block: 10, Stride: 9},
		{Block: 10, Stride: 10, Offset: -1},
		{Block: 10, Stride: 10, Offset: 100}, // no room
	} {
		if _, err := apps.NewScatter(e, host, l, nil); !errors.Is(err, apps.ErrShape) {
			t.Errorf("%+v: %v, want ErrShape", l, err)
		}
	}
	if _, err := apps.NewScatter(e, host, apps.Strided{Block: 10, Stride: 10, Offset: 99}, nil); err != nil {
		t.Errorf("room for one byte: %v", err)
	}
}
