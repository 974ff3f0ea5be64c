package datapath

import (
	"testing"

	"github.com/softrnic/softrnic/host/ibv"
)

// TestOneCPUYields: on a single CPU an application's idle polls sleep on
// the port after a few in a row (NIC.Progress, counted in app_yields),
// the sleep the engine's goroutine would take, so that the process that
// answers gets the processor; a poll that finds work starts the count
// again, and with more CPUs than one the polls never sleep.
func TestOneCPUYields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		oneCPU    bool
		polls     int
		work      bool // a peer's WRITE arrives before the last poll
		wantWaits int
	}{
		{"one CPU, idle", true, oneCPUIdlePolls, false, 1},
		{"one CPU, idle twice as long", true, 2 * oneCPUIdlePolls, false, 2},
		{"one CPU, a frame before the count is reached", true, oneCPUIdlePolls, true, 0},
		{"two CPUs, idle", false, 64, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.nic.oneCPU = tc.oneCPU
			h.cq(0, 64)
			h.rcQP(17, 30, 0, 0, 0)
			buf := make([]byte, 64)
			rkey, va := h.mr(buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
			warmUp(h, rkey, va, 17) // contexts cached: the WRITE below needs no fetch
			h.nic.idlePolls.Store(0)
			waits0, yields0 := h.port.waits, h.nic.counters.AppYields.Load()
			for i := range tc.polls {
				if tc.work && i == tc.polls-1 {
					h.write(17, 1, rkey, va, []byte("hello"))
				}
				h.nic.Progress()
			}
			if got := h.port.waits - waits0; got != tc.wantWaits {
				t.Errorf("slept on the port %d times, want %d", got, tc.wantWaits)
			}
			if got := h.nic.counters.AppYields.Load() - yields0; got != uint64(tc.wantWaits) {
				t.Errorf("app_yields moved by %d, want %d", got, tc.wantWaits)
			}
			if tc.work {
				for range 4 {
					h.after(pcieLatency) // the placement's host write lands
				}
				if string(h.read(va, 5)) != "hello" {
					t.Error("the WRITE was not placed")
				}
			}
		})
	}
}
