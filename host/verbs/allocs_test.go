package verbs_test

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestSteadyStateAllocations: WRITEs between two NICs allocate nothing on
// the way (posting, both engines, completion): over 3000 work requests
// the heap sees fewer than one allocation in ten (the runtime's own
// background work). A stack buffer that escapes through an interface once
// cost 400 allocations per 64 KiB WRITE.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<20)
	c := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<20)
	verbstest.Connect(t, a, c, 3, 14)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 16<<10), RemoteAddr: c.MR.Addr, RKey: c.MR.RKey}}
	wc := make([]verbs.WC, 16)
	run := func(n int) { writeN(t, a, wr, wc, n) }
	run(200) // warm up: caches filled, buffers grown
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 3000
	run(n)
	runtime.ReadMemStats(&m1)
	if per := float64(m1.Mallocs-m0.Mallocs) / n; per > 0.1 {
		t.Fatalf("%.2f heap allocations per WRITE, want none", per)
	}
}
