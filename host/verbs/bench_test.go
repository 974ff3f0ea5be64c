package verbs_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// BenchmarkRCWrite posts RDMA WRITEs between two NICs on an in-memory port
// pair, 16 in flight, and reports Gbit/s and the heap allocations per work
// request of the whole path: posting, both engines, completion.
func BenchmarkRCWrite(b *testing.B) {
	for _, size := range []int{64, 4096, 64 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
			a := verbstest.NewEnd(b, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<20)
			c := verbstest.NewEnd(b, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<20)
			verbstest.Connect(b, a, c, 3, 14)
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, size), RemoteAddr: c.MR.Addr, RKey: c.MR.RKey}}
			wc := make([]verbs.WC, 16)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			writeN(b, a, wr, wc, b.N)
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(size)*8*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gbit/s")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "allocs/WR")
		})
	}
}

// writeN posts wr n times on a's QP, 16 in flight, and takes every
// completion, failing on an error status. wc is the caller's, so that the
// loop itself allocates nothing.
func writeN(tb testing.TB, a *end, wr []verbs.SendWR, wc []verbs.WC, n int) {
	tb.Helper()
	inflight := 0
	for done := 0; done < n; {
		for inflight < 16 && done+inflight < n {
			if _, err := a.QP.PostSend(wr); err != nil {
				tb.Fatal(err)
			}
			inflight++
		}
		k := a.CQ.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				tb.Fatalf("completion %+v", w)
			}
		}
		inflight -= k
		done += k
		if k == 0 {
			runtime.Gosched()
		}
	}
}

// BenchmarkCalls measures what a data-path verb costs a Go program, per
// call, the engines asleep (the NIC's own goroutine drives it): Poll on
// an empty CQ and PostRecv of one work request. tests/bench/capi.sh
// prints these beside the same calls through softrnic's C libibverbs.
func BenchmarkCalls(b *testing.B) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEndConfig(b, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("10.47.0.1")}, Port: pa}, 4096)
	b.Run("poll-empty", func(b *testing.B) {
		wc := make([]verbs.WC, 16)
		for b.Loop() {
			a.CQ.Poll(wc)
		}
	})
	b.Run("post-recv", func(b *testing.B) {
		wr := []verbs.RecvWR{{SGL: verbstest.SGL(a, 0, 64)}}
		init := func() {
			if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
				b.Fatal(err)
			}
			if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
				b.Fatal(err)
			}
		}
		init()
		posted := 0
		for b.Loop() {
			if _, err := a.QP.PostRecv(wr); err != nil {
				b.StopTimer()
				init()
				posted = 0
				b.StartTimer()
				continue
			}
			posted++
		}
	})
}
