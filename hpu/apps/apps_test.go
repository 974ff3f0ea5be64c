package apps_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/hpu/apps"
)

var le = binary.LittleEndian

// region is host memory for a context.
type region struct {
	mu sync.Mutex
	b  []byte
}

func (r *region) Len() uint64 { return uint64(len(r.b)) }
func (r *region) WriteAt(p []byte, off uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	copy(r.b[off:], p)
	return nil
}
func (r *region) ReadAt(p []byte, off uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	copy(p, r.b[off:])
	return nil
}
func (r *region) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.b...)
}

// send submits a message as packets of at most mtu bytes, retrying while
// the buffers are full.
func send(t *testing.T, e *hpu.Engine, in *hpu.Installed, msg hpu.Message, data []byte, mtu int) {
	t.Helper()
	msg.Length = uint32(len(data))
	for i, off := 0, 0; off < len(data) || i == 0; i++ {
		n := min(mtu, len(data)-off)
		submit(t, e, in, msg, hpu.Packet{Payload: data[off : off+n], Offset: uint32(off), Index: i, First: i == 0, Last: off+n == len(data)})
		off += n
	}
}

// submit submits one packet, retrying while the buffers are full.
func submit(t *testing.T, e *hpu.Engine, in *hpu.Installed, msg hpu.Message, pkt hpu.Packet) {
	t.Helper()
	for {
		err := e.Submit(in, msg, pkt)
		if err == nil {
			return
		}
		if !errors.Is(err, hpu.ErrFull) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
}

// TestAggregate: four senders' int32 and float32 vectors summed on the
// NIC; the host gets the sum, once, byte for byte what it computes itself.
func TestAggregate(t *testing.T) {
	const elems, senders = 3000, 4 // 12000 bytes: three packets of 4096 and one shorter
	for _, float := range []bool{false, true} {
		e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
		host := &region{b: make([]byte, elems*4)}
		notified := make(chan struct{}, 2)
		a, err := apps.NewAggregate(e, host, elems, senders, float, func() { notified <- struct{}{} })
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, elems*4)
		isum := make([]int32, elems)
		fsum := make([]float32, elems)
		for s := range senders {
			v := make([]byte, elems*4)
			for i := range elems {
				if float {
					x := float32(rand.IntN(2000)-1000) / 4 // exact in float32: sums do not depend on order
					fsum[i] += x
					le.PutUint32(v[i*4:], math.Float32bits(x))
				} else {
					x := rand.Int32() - math.MaxInt32/2
					isum[i] += x
					le.PutUint32(v[i*4:], uint32(x))
				}
			}
			send(t, e, a.In, hpu.Message{QPN: 17 + uint32(s), MSN: 0, Flow: uint32(s)}, v, 4096)
		}
		wait(t, notified)
		for i := range elems {
			if float {
				le.PutUint32(want[i*4:], math.Float32bits(fsum[i]))
			} else {
				le.PutUint32(want[i*4:], uint32(isum[i]))
			}
		}
		if got := host.bytes(); !bytes.Equal(got, want) {
			t.Errorf("float %v: the sum in host memory differs from the host's own", float)
		}
		e.Close()
		if len(notified) != 0 {
			t.Error("the host was notified more than once")
		}
	}
}

// randomVector returns len(sum) random int32 elements, little-endian,
// and adds them into sum.
func randomVector(sum []int32) []byte {
	v := make([]byte, 4*len(sum))
	for i := range sum {
		x := rand.Int32() - math.MaxInt32/2
		sum[i] += x
		le.PutUint32(v[i*4:], uint32(x))
	}
	return v
}

// int32Bytes is v little-endian, as the host memory holds it.
func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		le.PutUint32(b[i*4:], uint32(x))
	}
	return b
}

// TestAggregateRounds: one installed aggregation, three rounds of four
// senders' vectors; each round's host sum is that round's alone (the sum
// starts again from zero after each notification), one notification a
// round.
func TestAggregateRounds(t *testing.T) {
	const elems, senders, rounds = 3000, 4, 3
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	host := &region{b: make([]byte, elems*4)}
	notified := make(chan struct{}, 2)
	a, err := apps.NewAggregateRounds(e, host, elems, senders, false, func() { notified <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	for r := range rounds {
		sum := make([]int32, elems)
		for s := range senders {
			send(t, e, a.In, hpu.Message{QPN: 17 + uint32(s), MSN: uint32(r), Flow: uint32(s)}, randomVector(sum), 4096)
		}
		wait(t, notified)
		if got := host.bytes(); !bytes.Equal(got, int32Bytes(sum)) {
			t.Fatalf("round %d: the sum in host memory is not the round's own", r)
		}
		if len(notified) != 0 {
			t.Fatalf("round %d: the host was notified more than once", r)
		}
	}
}

// TestAggregateMessagesOfOneQP: the four vectors come as four messages
// of one QP, their packets interleaved, so that several HPUs may run two
// messages' packets for the same elements at once: each message has its
// own partial sum, and the sum is right. A fifth message, beyond the
// senders, fails and changes nothing.
func TestAggregateMessagesOfOneQP(t *testing.T) {
	const elems, senders, mtu = 4096, 4, 1024
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	host := &region{b: make([]byte, elems*4)}
	notified := make(chan struct{}, 2)
	a, err := apps.NewAggregate(e, host, elems, senders, false, func() { notified <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	sum := make([]int32, elems)
	vecs := make([][]byte, senders)
	for m := range vecs {
		vecs[m] = randomVector(sum)
	}
	packets := elems * 4 / mtu
	for k := range packets { // packet k of every message, then packet k+1
		for m := range senders {
			off := k * mtu
			pkt := hpu.Packet{Payload: vecs[m][off : off+mtu], Offset: uint32(off), Index: k, First: k == 0, Last: k == packets-1}
			submit(t, e, a.In, hpu.Message{QPN: 17, MSN: uint32(m), Length: elems * 4}, pkt)
		}
	}
	wait(t, notified)
	want := int32Bytes(sum)
	if got := host.bytes(); !bytes.Equal(got, want) {
		t.Fatal("the sum in host memory differs from the host's own")
	}
	send(t, e, a.In, hpu.Message{QPN: 17, MSN: senders}, vecs[0], mtu)
	deadline := time.Now().Add(10 * time.Second)
	for a.In.Stats.Faults.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a message beyond the senders did not fail")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if got := host.bytes(); !bytes.Equal(got, want) || len(notified) != 0 {
		t.Error("a message beyond the senders changed the sum or notified")
	}
}

// TestReduce: messages reduced to a scalar on the NIC; only the 8-byte
// result reaches host memory.
func TestReduce(t *testing.T) {
	for _, op := range []apps.ReduceOp{apps.Sum, apps.Min, apps.Max} {
		e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
		const msgs = 8
		host := &region{b: make([]byte, msgs*8)}
		var wg sync.WaitGroup
		wg.Add(msgs)
		in, err := apps.NewReduce(e, host, op, msgs, func(_ *hpu.Message, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int64, msgs)
		for m := range msgs {
			n := 1 + rand.IntN(5000)
			v := make([]byte, n*4)
			var sum int64
			lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
			for i := range n {
				x := rand.Int32() - math.MaxInt32/2
				le.PutUint32(v[i*4:], uint32(x))
				sum += int64(x)
				lo, hi = min(lo, x), max(hi, x)
			}
			want[m] = map[apps.ReduceOp]int64{apps.Sum: sum, apps.Min: int64(lo), apps.Max: int64(hi)}[op]
			send(t, e, in, hpu.Message{QPN: 17, MSN: uint32(m)}, v, 1024)
		}
		wg.Wait()
		got := host.bytes()
		for m := range msgs {
			if r := int64(le.Uint64(got[m*8:])); r != want[m] {
				t.Errorf("op %d message %d: %d, want %d", op, m, r, want[m])
			}
		}
		if d := in.Stats.DMABytes.Load(); d != msgs*8 {
			t.Errorf("op %d: %d bytes reached host memory, want %d", op, d, msgs*8)
		}
		e.Close()
	}
}

// TestFilter: messages whose first byte is 0xff are dropped on the NIC;
// the rest land byte for byte.
func TestFilter(t *testing.T) {
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	const msgs, size = 20, 9000
	host := make([]byte, msgs*size)
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(msgs)
	in, err := apps.NewFilter(e, func(first []byte) bool { return len(first) > 0 && first[0] == 0xff },
		func(msg *hpu.Message, pkt *hpu.Packet) error {
			mu.Lock()
			copy(host[msg.VA+uint64(pkt.Offset):], pkt.Payload)
			mu.Unlock()
			return nil
		}, func(*hpu.Message, error) { wg.Done() })
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(host))
	kept := 0
	for m := range msgs {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte(rand.IntN(255))
		}
		if m%3 == 0 {
			v[0] = 0xff
		} else {
			copy(want[m*size:], v)
			kept++
		}
		send(t, e, in, hpu.Message{QPN: 17, MSN: uint32(m), VA: uint64(m * size)}, v, 4096)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(host, want) {
		t.Error("host memory differs: a dropped message landed or a kept one did not")
	}
	if p := in.Stats.Proceeded.Load(); p != uint64(kept*3) {
		t.Errorf("%d packets landed, want %d", p, kept*3)
	}
}

// TestAggregateShapes: the sum is the host's own whatever the packets'
// shape: packets of any size, packets handed over twice (a packet placed
// ahead and sent again adds nothing twice), a sender whose vector is
// shorter (its missing elements add nothing), one sender, many.
func TestAggregateShapes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		elems, senders int
		mtu            int
		twice          bool // every packet but a message's last handed over twice
		short          int  // this sender's vector is half as long (-1: none)
	}{
		{"packets of 1024", 4096, 4, 1024, false, -1},
		{"packets of 100", 3000, 4, 100, false, -1},
		{"packets handed over twice", 4096, 4, 1024, true, -1},
		{"a shorter vector", 4096, 4, 1024, false, 2},
		{"one sender", 1000, 1, 256, false, -1},
		{"64 senders", 512, 64, 512, false, -1},
		{"70 senders, twice, one shorter", 512, 70, 512, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := hpu.Config{Clusters: 2, HPUs: 2}
			if tc.twice {
				// One HPU: a packet handed over again comes after the
				// first has run, as a resent one does.
				cfg = hpu.Config{Clusters: 1, HPUs: 1}
			}
			e := hpu.New(cfg)
			defer e.Close()
			host := &region{b: make([]byte, tc.elems*4)}
			for i := range host.b {
				host.b[i] = 0xee // the sum must overwrite all of it
			}
			notified := make(chan struct{}, 2)
			a, err := apps.NewAggregate(e, host, tc.elems, tc.senders, false, func() { notified <- struct{}{} })
			if err != nil {
				t.Fatal(err)
			}
			sum := make([]int32, tc.elems)
			for s := range tc.senders {
				part := make([]int32, tc.elems)
				v := randomVector(part)
				if s == tc.short {
					v = v[:len(v)/2]
					clear(part[tc.elems/2:])
				}
				for i := range sum {
					sum[i] += part[i]
				}
				msg := hpu.Message{QPN: 17 + uint32(s), Flow: uint32(s), Length: uint32(len(v))}
				for k, off := 0, 0; off < len(v); k, off = k+1, off+tc.mtu {
					n := min(tc.mtu, len(v)-off)
					last := off+n == len(v)
					pkt := hpu.Packet{Payload: v[off : off+n], Offset: uint32(off), Index: k, First: k == 0, Last: last}
					for range 1 + btoi(tc.twice && !last) {
						submit(t, e, a.In, msg, pkt)
					}
				}
			}
			wait(t, notified)
			if got := host.bytes(); !bytes.Equal(got, int32Bytes(sum)) {
				t.Fatal("the sum in host memory differs from the host's own")
			}
			if len(notified) != 0 {
				t.Error("the host was notified more than once")
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
