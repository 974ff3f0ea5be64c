package hpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestHelper: a Helper keeps the tasks of a short context for its own
// goroutine (Run), and gives the HPUs those of a context not yet seen
// short, or seen long; Run stops at its budget and gives the HPUs the
// rest, as Flush does.
func TestHelper(t *testing.T) {
	defer func(d time.Duration) { inlineMax = d }(inlineMax)
	inlineMax = time.Second // every task is short here, whatever the machine does meanwhile
	single := Packet{Payload: []byte{1}, First: true, Last: true}
	cases := []struct {
		name     string
		warm     int           // messages through the HPUs first (every task timed)
		then     time.Duration // each handler's run time after the warm-up
		n        int           // messages the helper submits
		wantKept int
		max      int
		budget   time.Duration
		wantRan  int // -1: at least one, not all
		flush    bool
	}{
		{"short: all on the caller", inlineWarmup, 0, 10, 10, 64, time.Second, 10, false},
		{"not yet seen short", inlineWarmup / 2, 0, 10, 0, 64, time.Second, 0, false}, // its own 10 bring it to 26 timed
		{"max", inlineWarmup, 0, 10, 10, 4, time.Second, 4, true},
		{"budget: some, the rest to the HPUs", inlineWarmup, time.Millisecond, 20, 20, 64, 3 * time.Millisecond, -1, false},
		{"flush", inlineWarmup, 0, 5, 5, 0, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Clusters: 2, HPUs: 1, Slots: 32, TimeEvery: 1})
			defer e.Close()
			var done atomic.Int32
			var sleep atomic.Int64
			in, _ := e.Install(Context{
				Payload: func(*Task) Action {
					if d := time.Duration(sleep.Load()); d > 0 {
						time.Sleep(d)
					}
					return Success
				},
				Done: func(*Message, error) { done.Add(1) },
			})
			waitDone := func(n int) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); int(done.Load()) < n; time.Sleep(50 * time.Microsecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d messages done after 5 s", done.Load(), n)
					}
				}
			}
			for i := range tc.warm {
				if err := e.Submit(in, Message{QPN: 1, MSN: uint32(i)}, single); err != nil {
					t.Fatal(err)
				}
				waitDone(i + 1)
			}
			sleep.Store(int64(tc.then))
			h := e.NewHelper()
			defer h.Flush() // before Close, if the test stops early
			for i := range tc.n {
				if err := h.Submit(in, Message{QPN: 2, MSN: uint32(i)}, single); err != nil {
					t.Fatal(err)
				}
			}
			if got := h.Pending(); got != tc.wantKept {
				t.Fatalf("the helper kept %d tasks, want %d", got, tc.wantKept)
			}
			if tc.wantKept > 0 {
				time.Sleep(2 * watchTick)
				if got := int(done.Load()) - tc.warm; got != 0 {
					t.Fatalf("%d messages the helper kept ran elsewhere", got)
				}
			}
			ran := 0
			if tc.max > 0 {
				ran = h.Run(tc.max, tc.budget)
			}
			if tc.wantRan < 0 && ran >= 1 && ran < tc.n {
				tc.wantRan = ran
			}
			if ran != tc.wantRan || int(done.Load())-tc.warm < ran {
				t.Fatalf("Run ran %d (%d done), want %d", ran, int(done.Load())-tc.warm, tc.wantRan)
			}
			if got := e.Stats.Helped.Load(); got != uint64(ran) {
				t.Errorf("Stats.Helped %d, want %d", got, ran)
			}
			if tc.flush {
				h.Flush()
			}
			if h.Pending() != 0 && !tc.flush {
				h.Run(1<<20, time.Hour)
			}
			waitDone(tc.warm + tc.n)
		})
	}
}

// TestHelperSeesLong: a context whose handler waits on the helper's own
// goroutine (inlineStrikes tasks in a row) is not kept by a Helper again
// (for inlineOff).
func TestHelperSeesLong(t *testing.T) {
	defer func(d time.Duration) { inlineMax = d }(inlineMax)
	inlineMax = 50 * time.Microsecond // the warm-up is short, whatever the machine does meanwhile
	e := New(Config{Clusters: 1, HPUs: 1, TimeEvery: 1})
	defer e.Close()
	var sleep atomic.Int64
	in, _ := e.Install(Context{Payload: func(*Task) Action {
		time.Sleep(time.Duration(sleep.Load()))
		return Success
	}})
	h := e.NewHelper()
	defer h.Flush()
	single := Packet{Payload: []byte{1}, First: true, Last: true}
	// Warm up until the context is short, with room for the strikes below:
	// a preempted machine may time a task or two long, so the count of
	// tasks is not fixed.
	warm := func() bool {
		return e.short(in) && in.timedShort.Load() > inlineSlack*(in.timedLong.Load()+inlineStrikes)
	}
	for i, deadline := 0, time.Now().Add(10*time.Second); !warm(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("not short after %d tasks (%d long)", in.timedShort.Load(), in.timedLong.Load())
		}
		if i < 1<<16 {
			if err := e.Submit(in, Message{MSN: uint32(1000 + i)}, single); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	sleep.Store(int64(2 * inlineBlock))
	for i := range inlineStrikes {
		if err := h.Submit(in, Message{MSN: uint32(100 + i)}, single); err != nil || h.Pending() != 1 {
			t.Fatalf("task %d of the handler that waits: kept %d, %v", i, h.Pending(), err)
		}
		h.Run(1, time.Second)
	}
	if got := e.Stats.KeptOff.Load(); got != 1 {
		t.Errorf("KeptOff %d, want 1", got)
	}
	if err := h.Submit(in, Message{MSN: 200}, single); err != nil || h.Pending() != 0 {
		t.Fatalf("after a long task the helper kept %d (%v), want 0", h.Pending(), err)
	}
}
