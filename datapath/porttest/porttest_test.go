package porttest_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sendFrames(t *testing.T, p datapath.Port, frames [][]byte) { porttest.SendAll(t, p, frames) }

func drain(t *testing.T, p datapath.Port) [][]byte {
	var got [][]byte
	for _, r := range porttest.Drain(t, p) {
		got = append(got, r.Data)
	}
	return got
}

func frames(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, wiretest.SampleFrame(wire.RCSendOnly, i%300, false, uint32(i)))
	}
	return out
}

// TestClean: on a clean link every frame arrives once, in order, intact,
// and every buffer comes back.
func TestClean(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 64})
	defer a.Close()
	defer b.Close()
	want := frames(50)
	sendFrames(t, a, want)
	got := drain(t, b)
	if len(got) != len(want) {
		t.Fatalf("%d frames arrived, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if err := porttest.CheckNoLeaks(a, b); err != nil {
		t.Error(err)
	}
	if s := b.Stats(); s.RxFrames.Load() != 50 || a.Stats().TxFrames.Load() != 50 {
		t.Errorf("rx %d tx %d", s.RxFrames.Load(), a.Stats().TxFrames.Load())
	}
}

// TestFaults: the link's counters account for every frame, corrupted frames
// fail the ICRC, and the same seed gives the same run.
func TestFaults(t *testing.T) {
	run := func() ([][]byte, *porttest.Port) {
		a, b := porttest.NewPair(porttest.Config{Buffers: 512, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1, Seed: 42})
		defer a.Close()
		defer b.Close()
		sendFrames(t, a, frames(300))
		got := drain(t, b)
		if err := porttest.CheckNoLeaks(a, b); err != nil {
			t.Error(err)
		}
		return got, a
	}
	got, a := run()
	l := &a.Link
	if l.Delivered.Load() != 300-l.Lost.Load()+l.Duplicated.Load() {
		t.Errorf("delivered %d, lost %d, duplicated %d of 300", l.Delivered.Load(), l.Lost.Load(), l.Duplicated.Load())
	}
	if l.Lost.Load() == 0 || l.Duplicated.Load() == 0 || l.Reordered.Load() == 0 || l.Corrupted.Load() == 0 {
		t.Errorf("a fault never happened: %+v", l)
	}
	bad := 0
	for _, f := range got {
		var p wire.Packet
		if wire.Parse(f, &p) != nil {
			bad++
		}
	}
	if bad == 0 || bad > int(l.Corrupted.Load()*2) {
		t.Errorf("%d frames fail to parse, %d corrupted", bad, l.Corrupted.Load())
	}
	again, _ := run()
	if len(again) != len(got) {
		t.Fatalf("same seed, %d then %d frames", len(got), len(again))
	}
	for i := range got {
		if !bytes.Equal(got[i], again[i]) {
			t.Fatalf("same seed, frame %d differs", i)
		}
	}
}

// TestBadInput: frames that are not whole RoCEv2 frames are counted and
// dropped, never passed up.
func TestBadInput(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 16, MaxFrameLen: 2048})
	defer a.Close()
	defer b.Close()
	good := wiretest.SampleFrame(wire.RCAcknowledge, 0, false, 1)
	arp := append([]byte{}, good...)
	arp[12], arp[13] = 0x08, 0x06
	sendFrames(t, a, [][]byte{good[:30], arp, good})
	got := drain(t, b)
	if len(got) != 1 || !bytes.Equal(got[0], good) {
		t.Fatalf("got %d frames", len(got))
	}
	if s := b.Stats(); s.RxDropRunt.Load() != 1 || s.RxDropNotRoCE.Load() != 1 {
		t.Errorf("runt %d, not RoCE %d", s.RxDropRunt.Load(), s.RxDropNotRoCE.Load())
	}
	buf := make([]datapath.Frame, 1)
	a.Alloc(buf)
	buf[0].Data = make([]byte, 4096)
	if n, err := a.Send(buf); n != 0 || err == nil || a.Stats().TxDropTooLong.Load() != 1 {
		t.Errorf("oversized Send = %d, %v", n, err)
	}
}

// TestFullReceiver: when the receiver holds all its buffers, new frames are
// dropped and counted, and none is lost track of.
func TestFullReceiver(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 8})
	defer a.Close()
	defer b.Close()
	sendFrames(t, a, frames(8))
	held := make([]datapath.Frame, 8)
	n, _ := b.Recv(held)
	if n != 8 {
		t.Fatalf("received %d", n)
	}
	sendFrames(t, a, frames(3))
	if d := b.Stats().RxDropKernel.Load(); d != 3 {
		t.Errorf("%d drops, want 3", d)
	}
	b.Release(held)
	if err := porttest.CheckNoLeaks(a, b); err != nil {
		t.Error(err)
	}
}

// TestConcurrent sends both ways at once (run with -race).
func TestConcurrent(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 256})
	defer a.Close()
	defer b.Close()
	var wg sync.WaitGroup
	for _, p := range []*porttest.Port{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := make([]datapath.Frame, 8)
			f := wiretest.SampleFrame(wire.RCSendOnly, 64, false, 1)
			for range 200 {
				n := p.Alloc(bufs)
				for i := range n {
					bufs[i].Data = bufs[i].Data[:copy(bufs[i].Data, f)]
				}
				p.Send(bufs[:n])
				m, _ := p.Recv(bufs)
				p.Release(bufs[:m])
			}
		}()
	}
	wg.Wait()
	drain(t, a)
	drain(t, b)
	if err := porttest.CheckNoLeaks(a, b); err != nil {
		t.Error(err)
	}
}

// TestDelayRateQueue: with Delay a frame is never received sooner than
// Delay after it was sent; with Rate and QueueBytes the link holds no
// more bytes than the queue and drops, counted, what does not fit.
func TestDelayRateQueue(t *testing.T) {
	const delay = 30 * time.Millisecond
	a, b := porttest.NewPair(porttest.Config{Buffers: 64, Delay: delay})
	fs := frames(5)
	sent := time.Now()
	sendFrames(t, a, fs)
	got := porttest.ReceiveN(t, b, 5)
	if took := time.Since(sent); len(got) != 5 || took < delay {
		t.Errorf("%d frames after %v, want 5 and no sooner than %v", len(got), took, delay)
	}
	a.Close()
	b.Close()

	// 8 kbit/s: a 1000-byte frame takes a second on the link, so the
	// queue of 3000 bytes takes three and drops the rest at once.
	a, b = porttest.NewPair(porttest.Config{Buffers: 64, Rate: 8000, QueueBytes: 3000})
	defer a.Close()
	defer b.Close()
	big := make([][]byte, 10)
	for i := range big {
		big[i] = wiretest.SampleFrame(wire.RCSendOnly, 1000-78, false, uint32(i))
	}
	sendFrames(t, a, big)
	if q, d := a.Link.QueueDropped.Load(), a.Link.Delivered.Load(); q != 7 || d != 3 {
		t.Errorf("queue dropped %d, delivered %d; want 7 and 3", q, d)
	}
	if n, _ := b.Recv(make([]datapath.Frame, 4)); n != 0 {
		t.Errorf("%d frames received before the link carried them", n)
	}
}

// The delay histogram against the exact quantiles of random samples: each
// quantile is the upper bound of the sample's bucket, at or above the
// exact value and within a quarter of it.
func TestDelayHistogram(t *testing.T) {
	var h porttest.DelayHistogram
	if h.Quantile(0.99) != 0 {
		t.Fatal("a quantile of nothing")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var xs []time.Duration
	for range 10000 {
		d := time.Duration(r.ExpFloat64() * float64(time.Duration(1+r.IntN(3))*time.Millisecond))
		xs = append(xs, d)
		h.Add(d)
	}
	slices.Sort(xs)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 1} {
		exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
		if got := h.Quantile(q); got < exact || float64(got) > 1.25*float64(exact)+4 {
			t.Errorf("q%.2f: %v, exact %v", q, got, exact)
		}
	}
	if h.Count() != 10000 {
		t.Errorf("count %d", h.Count())
	}
}

// TestWakeBeforeWait: a Wake that comes before Wait (an engine rang its
// doorbell between looking at its queues and sleeping on the port) ends
// that Wait at once, as a real port's eventfd does, and is answered
// once: the Wait after it sleeps its timeout.
func TestWakeBeforeWait(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 64})
	defer a.Close()
	defer b.Close()
	a.Wake()
	start := time.Now()
	if err := a.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait after a Wake slept %v: the Wake was lost", d)
	}
	start = time.Now()
	a.Wait(20 * time.Millisecond)
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Fatalf("a second Wait returned after %v: one Wake ended two", d)
	}
}
