package hpu_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/hpu"
)

// checkLeaks fails the test if goroutines started during it outlive it.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines before, %d after", before, n)
		}
	})
}

// submitAll submits every packet of a message, retrying while the
// buffers are full (as a peer retransmits what was not acknowledged).
func submitAll(t *testing.T, e *hpu.Engine, in *hpu.Installed, msg hpu.Message, payloads [][]byte) {
	t.Helper()
	off := uint32(0)
	for i, p := range payloads {
		pkt := hpu.Packet{Payload: p, Offset: off, Index: i, First: i == 0, Last: i == len(payloads)-1}
		for {
			err := e.Submit(in, msg, pkt)
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
		off += uint32(len(p))
	}
}

// TestOrdering: a header handler runs before any payload handler of its
// message, payload handlers of one message run in parallel, and the
// completion handler runs after all of them; each message is reported
// done once.
func TestOrdering(t *testing.T) {
	checkLeaks(t)
	const msgs, pkts = 64, 16
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 4, Slots: 8, Messages: 16})
	defer e.Close()
	// Handler memory per message: [0] header ran, [4] payloads run, [8] completion saw.
	var bad atomic.Int32
	var done sync.Map
	var wg sync.WaitGroup
	wg.Add(msgs)
	in, err := e.Install(hpu.Context{
		Name:       "order",
		MemorySize: msgs * 16,
		Header: func(t *hpu.Task) hpu.Action {
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			t.Mem.Store32(int(t.Message.MSN)*16, 1)
			return hpu.Proceed
		},
		Payload: func(t *hpu.Task) hpu.Action {
			if t.Mem.Load32(int(t.Message.MSN)*16) != 1 {
				bad.Add(1)
			}
			time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
			t.Mem.AddInt32(int(t.Message.MSN)*16+4, 1)
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action {
			t.Mem.Store32(int(t.Message.MSN)*16+8, t.Mem.Load32(int(t.Message.MSN)*16+4))
			return hpu.Success
		},
		Done: func(m *hpu.Message, err error) {
			if _, dup := done.LoadOrStore(m.MSN, true); dup || err != nil {
				bad.Add(1)
			}
			wg.Done()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([][]byte, pkts)
	for i := range payload {
		payload[i] = []byte{byte(i)}
	}
	for m := range msgs {
		submitAll(t, e, in, hpu.Message{QPN: 17, MSN: uint32(m)}, payload)
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d payload handlers ran before their header, or messages reported twice or in error", bad.Load())
	}
	for m := range msgs {
		if got := in.Memory().Load32(m*16 + 8); got != pkts {
			t.Errorf("message %d: completion saw %d payload handlers, want %d", m, got, pkts)
		}
	}
	if in.Stats.Messages.Load() != msgs || in.Stats.Packets.Load() != msgs*pkts {
		t.Errorf("stats: %d messages, %d packets", in.Stats.Messages.Load(), in.Stats.Packets.Load())
	}
}

// TestHomeAndSpill: a message's packets go to its home cluster; when that
// buffer is full they spill to the least loaded cluster; when every buffer
// is full Submit refuses (ErrFull) and keeps nothing; released, every
// packet is handled once.
func TestHomeAndSpill(t *testing.T) {
	checkLeaks(t)
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 1, Slots: 2, Messages: 8})
	defer e.Close()
	gate := make(chan struct{})
	var seen [8]atomic.Int32
	var clusters sync.Map
	in, _ := e.Install(hpu.Context{Payload: func(t *hpu.Task) hpu.Action {
		<-gate
		seen[t.Packet.Index].Add(1)
		clusters.Store(t.Packet.Index, t.Cluster)
		return hpu.Success
	}})
	msg := hpu.Message{QPN: 17, MSN: 1}
	accepted := 0
	for i := range 8 {
		err := e.Submit(in, msg, hpu.Packet{Payload: []byte{1}, Index: i, First: i == 0, Last: i == 7})
		if errors.Is(err, hpu.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted++
	}
	// Two clusters of two slots: four packets held, the fifth refused.
	if accepted != 4 {
		t.Fatalf("accepted %d packets before ErrFull, want 4 (2 clusters x 2 slots)", accepted)
	}
	if e.Stats.Spills.Load() != 2 || e.Stats.Full.Load() != 1 {
		t.Errorf("spills %d, refusals %d; want 2, 1", e.Stats.Spills.Load(), e.Stats.Full.Load())
	}
	close(gate)
	for i := accepted; i < 8; i++ {
		for {
			err := e.Submit(in, msg, hpu.Packet{Payload: []byte{1}, Index: i, First: i == 0, Last: i == 7})
			if err == nil {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.Stats.Messages.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Errorf("packet %d handled %d times", i, n)
		}
	}
	home, _ := clusters.Load(0)
	other := 0
	clusters.Range(func(_, c any) bool {
		if c != home {
			other++
		}
		return true
	})
	if other == 0 {
		t.Error("no packet ran away from the home cluster")
	}
}

// memRegion is a Region over a byte slice.
type memRegion []byte

func (r memRegion) Len() uint64 { return uint64(len(r)) }
func (r memRegion) WriteAt(p []byte, off uint64) error {
	copy(r[off:], p)
	return nil
}
func (r memRegion) ReadAt(p []byte, off uint64) error {
	copy(p, r[off:])
	return nil
}

// TestFaults: a handler that panics, overruns its handler memory or DMAs
// outside its region is stopped; its message completes with that error,
// and the engine and another context keep running.
func TestFaults(t *testing.T) {
	checkLeaks(t)
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	for _, tc := range []struct {
		name    string
		handler hpu.Handler
		want    error
	}{
		{"panic", func(t *hpu.Task) hpu.Action { panic("boom") }, hpu.ErrHandlerPanic},
		{"memory overrun", func(t *hpu.Task) hpu.Action { t.Mem.Store32(64, 1); return hpu.Success }, hpu.ErrMemoryOverrun},
		{"bytes overrun", func(t *hpu.Task) hpu.Action { t.Mem.Bytes(60, 8)[0] = 1; return hpu.Success }, hpu.ErrMemoryOverrun},
		{"DMA outside region", func(t *hpu.Task) hpu.Action { t.DMAToHost(4090, make([]byte, 8)); return hpu.Success }, hpu.ErrOutsideRegion},
		{"index out of range", func(t *hpu.Task) hpu.Action { _ = t.Packet.Payload[100]; return hpu.Success }, hpu.ErrHandlerPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			region := make(memRegion, 4096)
			errs := make(chan error, 2)
			bad, _ := e.Install(hpu.Context{MemorySize: 64, Host: region, Payload: tc.handler,
				Done: func(_ *hpu.Message, err error) { errs <- err }})
			good, _ := e.Install(hpu.Context{MemorySize: 64, Host: region, Payload: func(t *hpu.Task) hpu.Action {
				t.DMAToHost(0, t.Packet.Payload)
				return hpu.Success
			}, Done: func(_ *hpu.Message, err error) { errs <- err }})
			submitAll(t, e, bad, hpu.Message{QPN: 17, MSN: 1}, [][]byte{{1}, {2}})
			submitAll(t, e, good, hpu.Message{QPN: 18, MSN: 1}, [][]byte{{7}})
			var got []error
			for range 2 {
				select {
				case err := <-errs:
					got = append(got, err)
				case <-time.After(5 * time.Second):
					t.Fatal("a message never completed")
				}
			}
			faulted := 0
			for _, err := range got {
				if err != nil {
					faulted++
					if !errors.Is(err, tc.want) {
						t.Errorf("fault %v, want %v", err, tc.want)
					}
				}
			}
			if faulted != 1 || bad.Stats.Faults.Load() == 0 || good.Stats.Faults.Load() != 0 {
				t.Errorf("faulted messages %d (want 1), faults bad %d good %d", faulted, bad.Stats.Faults.Load(), good.Stats.Faults.Load())
			}
			if region[0] != 7 {
				t.Error("the good context's DMA did not land")
			}
			for i := 1; i < len(region); i++ {
				if region[i] != 0 {
					t.Fatalf("byte %d of the region written", i)
				}
			}
		})
	}
}

// TestOverlong: a handler that runs past its budget is counted (every
// task timed here), and its message still completes.
func TestOverlong(t *testing.T) {
	checkLeaks(t)
	e := hpu.New(hpu.Config{Clusters: 1, HPUs: 2, TimeEvery: 1})
	defer e.Close()
	done := make(chan error, 4)
	slow, _ := e.Install(hpu.Context{Budget: time.Millisecond, Payload: func(t *hpu.Task) hpu.Action {
		if t.Packet.Index == 1 {
			time.Sleep(3 * time.Millisecond)
		}
		return hpu.Success
	}, Done: func(_ *hpu.Message, err error) { done <- err }})
	submitAll(t, e, slow, hpu.Message{QPN: 17, MSN: 1}, [][]byte{{1}, {2}, {3}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := slow.Stats.Overlong.Load(); n != 1 {
		t.Fatalf("overlong %d, want 1", n)
	}
	if n := e.Stats.Overlong.Load(); n != 1 {
		t.Fatalf("engine overlong %d, want 1", n)
	}
}

// TestBackpressure: handlers slower than the packets: Submit refuses
// while every buffer is full, the sender tries again, and every message
// is delivered exactly once.
func TestBackpressure(t *testing.T) {
	checkLeaks(t)
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2, Slots: 4, Messages: 8})
	defer e.Close()
	const msgs, pkts = 40, 8
	var got [msgs][pkts]atomic.Int32
	var finished atomic.Int32
	in, _ := e.Install(hpu.Context{Payload: func(t *hpu.Task) hpu.Action {
		time.Sleep(200 * time.Microsecond)
		got[t.Message.MSN][t.Packet.Index].Add(1)
		return hpu.Success
	}, Done: func(*hpu.Message, error) { finished.Add(1) }})
	payload := make([][]byte, pkts)
	for i := range payload {
		payload[i] = make([]byte, 64)
	}
	for m := range msgs {
		submitAll(t, e, in, hpu.Message{QPN: 17 + uint32(m%3), MSN: uint32(m)}, payload)
	}
	deadline := time.Now().Add(10 * time.Second)
	for finished.Load() != msgs && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for m := range got {
		for p := range got[m] {
			if n := got[m][p].Load(); n != 1 {
				t.Fatalf("message %d packet %d handled %d times", m, p, n)
			}
		}
	}
	if e.Stats.Full.Load() == 0 {
		t.Error("the buffers never filled: the test did not exercise backpressure")
	}
}

// TestLongHandlerHoldsOnlyItsTask: a handler that does not return (here:
// until the test lets it) holds up its own task only. An HPU that spins
// for work keeps spinning while it runs what it found, so queueing wakes
// no other HPU; when that HPU is stuck in a long handler, the tasks
// queued meanwhile still run (the watchdog wakes the sleeping HPUs of a
// queue that does not move). Each round first keeps an HPU spinning with
// a stream of short messages, so that the long handler lands on it.
func TestLongHandlerHoldsOnlyItsTask(t *testing.T) {
	checkLeaks(t)
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2, Slots: 64})
	defer e.Close()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow, _ := e.Install(hpu.Context{Payload: func(*hpu.Task) hpu.Action {
		started <- struct{}{}
		<-release
		return hpu.Success
	}})
	done := make(chan uint32, 4096)
	fast, _ := e.Install(hpu.Context{
		Payload: func(*hpu.Task) hpu.Action { return hpu.Success },
		Done:    func(m *hpu.Message, err error) { done <- m.MSN },
	})
	msn := uint32(0)
	for round := range 8 {
		for range 256 { // a steady stream: an HPU spins
			submitAll(t, e, fast, hpu.Message{QPN: 1, MSN: msn}, [][]byte{{1}})
			msn++
		}
		submitAll(t, e, slow, hpu.Message{QPN: 2, MSN: uint32(round)}, [][]byte{{1}})
		<-started
		for k := range 4 { // messages on both clusters while the long handler runs
			submitAll(t, e, fast, hpu.Message{QPN: uint32(3 + k), MSN: msn}, [][]byte{{1}})
			msn++
		}
		deadline := time.After(2 * time.Second)
		for got := 0; got < 256+4; {
			select {
			case <-done:
				got++
			case <-deadline:
				close(release) // the engine can close
				t.Fatalf("round %d: %d of %d messages done while a long handler ran (nudges %d)", round, got, 260, e.Stats.Nudges.Load())
			}
		}
		release <- struct{}{}
	}
	t.Logf("watchdog nudges: %d", e.Stats.Nudges.Load())
}
