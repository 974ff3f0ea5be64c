package hpu

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSubmitterModel submits interleaved messages of several QPs through
// a Submitter, publishing at random points, beside a model of what was
// accepted: every packet accepted is handled once, after its message's
// header handler, every message completes once without a fault, and
// after Publish the counters hold every packet accepted.
func TestSubmitterModel(t *testing.T) {
	for _, tc := range []struct {
		name           string
		clusters, hpus int
		slots          int
		publishOneIn   int // a Publish after one packet in this many, on average
	}{
		{"one cluster, rare publishes", 1, 1, 64, 50},
		{"four clusters, frequent publishes", 4, 2, 16, 3},
		{"few slots: refusals", 2, 1, 4, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Clusters: tc.clusters, HPUs: tc.hpus, Slots: tc.slots, SlotSize: 64, Messages: 64, TimeEvery: 3})
			var mu sync.Mutex
			handled := map[[3]uint32]int{}   // (qpn, msn, index) -> times
			headerOf := map[[2]uint32]bool{} // header handler ran
			var errs []string
			var done atomic.Int32
			in, _ := e.Install(Context{
				Header: func(t *Task) Action {
					mu.Lock()
					headerOf[[2]uint32{t.Message.QPN, t.Message.MSN}] = true
					mu.Unlock()
					return Proceed
				},
				Payload: func(t *Task) Action {
					mu.Lock()
					defer mu.Unlock()
					if !headerOf[[2]uint32{t.Message.QPN, t.Message.MSN}] {
						errs = append(errs, "a payload handler before its header's")
					}
					k := [3]uint32{t.Message.QPN, t.Message.MSN, uint32(t.Packet.Index)}
					handled[k]++
					if len(t.Packet.Payload) != 1 || t.Packet.Payload[0] != byte(t.Packet.Index) {
						errs = append(errs, "payload not the packet's")
					}
					return Success
				},
				Done: func(m *Message, err error) {
					if err != nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
					done.Add(1)
				},
			})
			s := e.NewSubmitter()
			const qps, msgsPerQP = 5, 40
			next := make([]int, qps) // each QP's next message
			index := make([]int, qps)
			length := make([]int, qps)
			x := uint32(7)
			rnd := func(n int) int { x = x*1664525 + 1013904223; return int(x>>8) % n }
			accepted, messages := 0, 0
			for {
				var open []int
				for q := range qps {
					if next[q] < msgsPerQP {
						open = append(open, q)
					}
				}
				if len(open) == 0 {
					break
				}
				q := open[rnd(len(open))]
				if index[q] == 0 {
					length[q] = 1 + rnd(12)
				}
				i := index[q]
				pkt := Packet{Payload: []byte{byte(i)}, Index: i, First: i == 0, Last: i == length[q]-1}
				err := s.Submit(in, Message{QPN: uint32(q), MSN: uint32(next[q])}, pkt)
				if errors.Is(err, ErrFull) {
					s.Publish() // room comes as the HPUs run what it held
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				accepted++
				if index[q]++; index[q] == length[q] {
					index[q] = 0
					next[q]++
					messages++
				}
				if rnd(tc.publishOneIn) == 0 {
					s.Publish()
				}
			}
			s.Publish()
			if s.Held() != 0 {
				t.Fatalf("%d tasks held after Publish", s.Held())
			}
			if got := e.Stats.Packets.Load(); got != uint64(accepted) {
				t.Errorf("Stats.Packets %d after Publish, accepted %d", got, accepted)
			}
			if got := in.Stats.Packets.Load(); got != uint64(accepted) {
				t.Errorf("ContextStats.Packets %d after Publish, accepted %d", got, accepted)
			}
			e.Close() // every task accepted runs
			if int(done.Load()) != messages {
				t.Errorf("%d messages done, %d submitted", done.Load(), messages)
			}
			for k, n := range handled {
				if n != 1 {
					t.Errorf("packet %v handled %d times", k, n)
				}
			}
			if len(handled) != accepted {
				t.Errorf("%d packets handled, %d accepted", len(handled), accepted)
			}
			if len(errs) > 0 {
				t.Errorf("%d faults, first: %s", len(errs), errs[0])
			}
			if len(s.index) != 0 {
				t.Errorf("the Submitter's index keeps %d messages after their last packets", len(s.index))
			}
		})
	}
}

// TestSubmitterHoldsUntilPublish: the tasks of a cluster wait in the
// Submitter until a line of them (popBatch) is ready or Publish is
// called, and reach the HPUs then.
func TestSubmitterHoldsUntilPublish(t *testing.T) {
	e := New(Config{Clusters: 1, HPUs: 1, Slots: 32})
	defer e.Close()
	var ran atomic.Int32
	in, _ := e.Install(Context{Payload: func(*Task) Action { ran.Add(1); return Success }})
	s := e.NewSubmitter()
	submit := func(msn int) {
		t.Helper()
		if err := s.Submit(in, Message{QPN: 1, MSN: uint32(msn)}, Packet{Payload: []byte{1}, First: true, Last: true}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ran.Load() < n; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d tasks ran after 5 s", ran.Load(), n)
			}
		}
	}
	for i := range popBatch - 1 {
		submit(i)
	}
	if s.Held() != popBatch-1 {
		t.Fatalf("held %d, want %d", s.Held(), popBatch-1)
	}
	time.Sleep(20 * time.Millisecond) // the HPU would have run them by now
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tasks ran before they were published", n)
	}
	if n := e.Stats.Packets.Load(); n != 0 {
		t.Fatalf("Stats.Packets %d before the publish", n)
	}
	submit(popBatch - 1) // a line's worth: published at once
	if s.Held() != 0 {
		t.Fatalf("held %d after a line of tasks", s.Held())
	}
	wait(popBatch)
	submit(popBatch)
	s.Publish()
	wait(popBatch + 1)
	if n := e.Stats.Packets.Load(); n != popBatch+1 {
		t.Fatalf("Stats.Packets %d, want %d", n, popBatch+1)
	}
}

// TestSubmitterAbort: a message the Submitter has under way ends with
// Abort's error once its packets accepted have run; Abort then finds it
// no more, and a packet of it is refused.
func TestSubmitterAbort(t *testing.T) {
	e := New(Config{Clusters: 2, HPUs: 1, Slots: 32})
	defer e.Close()
	var got atomic.Pointer[error]
	var ran atomic.Int32
	in, _ := e.Install(Context{
		Payload: func(*Task) Action { ran.Add(1); return Success },
		Done:    func(_ *Message, err error) { got.Store(&err) },
	})
	s := e.NewSubmitter()
	msg := Message{QPN: 3, MSN: 9}
	for i := range 3 {
		if err := s.Submit(in, msg, Packet{Payload: []byte{1}, Index: i, First: i == 0}); err != nil {
			t.Fatal(err)
		}
	}
	broken := errors.New("the QP failed")
	if !s.Abort(in, msg.QPN, msg.MSN, broken) {
		t.Fatal("Abort did not find the message under way")
	}
	s.Publish()
	for deadline := time.Now().Add(5 * time.Second); got.Load() == nil; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the aborted message did not complete in 5 s")
		}
	}
	if err := *got.Load(); !errors.Is(err, broken) {
		t.Fatalf("Done got %v, want %v", err, broken)
	}
	if s.Abort(in, msg.QPN, msg.MSN, broken) {
		t.Fatal("a second Abort found the message")
	}
	if err := s.Submit(in, msg, Packet{Payload: []byte{1}, Index: 3, Last: true}); err == nil {
		t.Fatal("a packet of the aborted message was accepted")
	}
	if st := e.Stats.Aborted.Load(); st != 1 {
		t.Fatalf("Stats.Aborted %d, want 1", st)
	}
}

// TestRetake: an HPU takes a line of tasks at once; when the first one's
// handler waits (here: until the test lets it), the watchdog gives the
// queue back the others within a tick or two, and another HPU runs them.
func TestRetake(t *testing.T) {
	e := New(Config{Clusters: 1, HPUs: 2, Slots: 32})
	defer e.Close()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow, _ := e.Install(Context{Payload: func(*Task) Action {
		started <- struct{}{}
		<-release
		return Success
	}})
	done := make(chan uint32, popBatch)
	fast, _ := e.Install(Context{
		Payload: func(*Task) Action { return Success },
		Done:    func(m *Message, err error) { done <- m.MSN },
	})
	time.Sleep(20 * time.Millisecond) // the HPUs have stopped spinning: the one woken takes the whole line
	s := e.NewSubmitter()
	one := Packet{Payload: []byte{1}, First: true, Last: true}
	if err := s.Submit(slow, Message{QPN: 1}, one); err != nil {
		t.Fatal(err)
	}
	for i := range popBatch - 1 {
		if err := s.Submit(fast, Message{QPN: 2, MSN: uint32(i)}, one); err != nil {
			t.Fatal(err)
		}
	}
	if s.Held() != 0 {
		t.Fatalf("%d tasks held: a line of them is published at once", s.Held())
	}
	<-started
	deadline := time.After(2 * time.Second)
	for got := 0; got < popBatch-1; got++ {
		select {
		case <-done:
		case <-deadline:
			close(release)
			t.Fatalf("%d of %d tasks ran while the long handler waited (retaken %d)", got, popBatch-1, e.Stats.Retaken.Load())
		}
	}
	close(release)
	t.Logf("retaken %d, nudges %d", e.Stats.Retaken.Load(), e.Stats.Nudges.Load())
	if n := e.Stats.Retaken.Load(); n != popBatch-1 {
		t.Errorf("retaken %d tasks, want the %d taken with the long one", n, popBatch-1)
	}
}
