package verbs_test

import (
	"bytes"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestPollModes runs a SEND, a WRITE and a READ with every way of
// driving the NIC: engines that sleep, poll for a while, poll for ever,
// or leave the polling to the application (CQ.Poll and CQ.Wait run the
// engines).
func TestPollModes(t *testing.T) {
	for _, mode := range []datapath.PollMode{datapath.PollSleep, datapath.PollAdaptive, datapath.PollSpin, datapath.PollApp} {
		t.Run(mode.String(), func(t *testing.T) {
			pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
			cfg := func(p datapath.Port, last byte) verbs.DeviceConfig {
				return verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}), Poll: mode}, Port: p}
			}
			a := verbstest.NewEndConfig(t, cfg(pa, 1), bufSize)
			b := verbstest.NewEndConfig(t, cfg(pb, 2), bufSize)
			verbstest.Connect(t, a, b, 3, 14)
			const size = 100000
			fill(a.Buf[:size], 5)
			if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: sgl(b, 1<<20, size)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, size)},
				writeWR(a, b, 2, 0, size, 0),
				{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: sgl(a, 2<<20, size), RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
					t.Fatalf("completion %+v", wc)
				}
			}
			if wc := waitWC(t, b.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != size {
				t.Fatalf("receive %+v", wc)
			}
			b.Dev.Fence()
			if !bytes.Equal(b.Buf[1<<20:1<<20+size], a.Buf[:size]) || !bytes.Equal(b.Buf[:size], a.Buf[:size]) || !bytes.Equal(a.Buf[2<<20:2<<20+size], a.Buf[:size]) {
				t.Fatal("data differs")
			}
			st := a.Dev.NIC().Engines()[0]
			switch mode {
			case datapath.PollSpin:
				if st.Sleeps.Load() != 0 || st.IdlePolls.Load() == 0 {
					t.Fatalf("a spinning engine slept %d times, polled idle %d", st.Sleeps.Load(), st.IdlePolls.Load())
				}
			case datapath.PollSleep:
				if st.IdlePolls.Load() != 0 {
					t.Fatalf("a sleeping engine polled idle %d times", st.IdlePolls.Load())
				}
			}
		})
	}
}

// TestPollLingers: with the application's polling driving the NIC, a
// poll whose send completion leaves its QP with nothing posted drives
// the NIC on until the next frame (CQ.Poll, datapath.NIC.Linger). In a
// ping-pong of WRITEs, as perftest's write_lat runs it, the peer's WRITE
// is that frame, and the lingers see it (a poll that finds the peer's
// WRITE placed already does not linger); a program whose peer stays
// quiet (a stream of WRITEs, one at a time) makes them miss, and the CQ
// soon lingers at few of its polls.
func TestPollLingers(t *testing.T) {
	ends := func(t *testing.T, budget time.Duration) (a, b *verbstest.End) {
		pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
		cfg := func(p datapath.Port, last byte) verbs.DeviceConfig {
			return verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}), Poll: datapath.PollApp, PollBudget: budget}, Port: p}
		}
		a = verbstest.NewEndConfig(t, cfg(pa, 1), bufSize)
		b = verbstest.NewEndConfig(t, cfg(pb, 2), bufSize)
		verbstest.Connect(t, a, b, 3, 14)
		return a, b
	}
	// write puts one byte, v, at off in the peer's buffer through qp and
	// polls for its completion.
	write := func(t *testing.T, from, to *verbstest.End, qp *verbs.QP, off int, v byte) {
		from.Buf[off] = v
		if _, err := qp.PostSend([]verbs.SendWR{writeWR(from, to, uint64(v), off, 1, off)}); err != nil {
			t.Error(err)
			return
		}
		if wc := waitWC(t, from.CQ); wc.Status != verbs.WCSuccess {
			t.Errorf("completion %+v", wc)
		}
	}
	// await waits until a WRITE has placed v at off of e's buffer,
	// polling e's CQ, or without a verb call if spin (the count of WRITEs
	// placed is a counter's read); seen is the count of WRITEs placed
	// that the last await read.
	await := func(t *testing.T, e *verbstest.End, off int, v byte, seen *uint64, spin bool) {
		var wc [1]verbs.WC
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
			if k := e.Dev.WritesPlaced(); k != *seen {
				if *seen = k; e.Buf[off] == v {
					return
				}
			}
			if spin {
				runtime.Gosched()
			} else {
				e.CQ.Poll(wc[:])
			}
		}
		t.Errorf("no WRITE of %d came", v)
	}
	// pingpong runs rounds of a ping-pong of WRITEs between a's QP qa and
	// b's qb, b's side in a goroutine, and returns a's lingers and the
	// lingers that saw the peer's frame. b sleeps for late before its
	// first answer.
	pingpong := func(t *testing.T, a, b *verbstest.End, qa, qb *verbs.QP, rounds int, spin bool, late time.Duration) (lingers, hits uint64) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			var seen uint64
			for i := 1; i <= rounds; i++ {
				await(t, b, 0, byte(i), &seen, spin)
				if i == 1 {
					time.Sleep(late)
				}
				write(t, b, a, qb, 1, byte(i))
			}
		}()
		var seen uint64
		for i := 1; i <= rounds; i++ {
			write(t, a, b, qa, 0, byte(i))
			await(t, a, 1, byte(i), &seen, spin)
		}
		<-done
		c := a.Dev.NIC().Counters()
		return c.AppLingers.Load(), c.AppLingerHits.Load()
	}

	t.Run("pingpong", func(t *testing.T) {
		a, b := ends(t, 20*time.Millisecond)
		// Enough rounds that the lingers' count does not rest on a few
		// rounds whose peer answered before the poll (two goroutines of
		// one process, scheduled as the machine allows).
		const rounds = 200
		lingers, hits := pingpong(t, a, b, a.QP, b.QP, rounds, false, 0)
		t.Logf("%d rounds: %d lingers, %d saw the peer's frame", rounds, lingers, hits)
		if lingers == 0 || 3*hits < 2*lingers {
			t.Fatalf("%d rounds of a ping-pong lingered %d times, %d of them seeing a frame", rounds, lingers, hits)
		}
	})

	// A UC ping-pong of WRITEs, as perftest's write_lat -c UC runs it:
	// a UC send completes as it leaves, and the program then waits for
	// the peer's WRITE without a verb call. Each poll's linger must wait
	// for that WRITE, though the peer's last one came after the last
	// linger (taken by the NIC's goroutine, after one the peer answered
	// late): counted from there, every linger after that one was skipped
	// and each WRITE waited for the goroutine's lease, 2.5 ms a half
	// round trip.
	t.Run("UC pingpong", func(t *testing.T) {
		a, b := ends(t, 20*time.Millisecond)
		qa, qb := verbstest.ConnectedUC(t, a, b)
		// Once, an answer later than a linger lasts (four budgets): that
		// linger misses, and the NIC's goroutine takes the WRITE.
		const rounds = 200
		lingers, hits := pingpong(t, a, b, qa, qb, rounds, true, 100*time.Millisecond)
		t.Logf("%d rounds: %d lingers, %d saw the peer's frame", rounds, lingers, hits)
		if lingers < rounds/2 || 3*hits < 2*lingers {
			t.Fatalf("%d rounds of a UC ping-pong, one answered late, lingered %d times, %d of them seeing a frame", rounds, lingers, hits)
		}
	})

	// A peer that only answers (a READ test's, or one that sends nothing)
	// is not lingered for for ever: each linger would cost the poll four
	// budgets, a read-lat's p99.
	t.Run("quiet peer", func(t *testing.T) {
		a, b := ends(t, 100*time.Microsecond)
		const writes = 400
		for i := 1; i <= writes; i++ {
			write(t, a, b, a.QP, 0, byte(i))
		}
		c := a.Dev.NIC().Counters()
		lingers, hits := c.AppLingers.Load(), c.AppLingerHits.Load()
		t.Logf("%d writes to a quiet peer: %d lingers, %d saw a frame", writes, lingers, hits)
		// The misses stop the lingers: a handful at first, none once the
		// CQ has seen lingerMissMax (8) of them with the peer sending
		// nothing of its own accord.
		if lingers == 0 || lingers > 10 {
			t.Fatalf("%d writes, one at a time, to a peer that sends nothing lingered %d times", writes, lingers)
		}
	})
}

// TestLingerCountsFromTheRequest: a linger (datapath.NIC.Linger) waits
// unless something came since the program's last request, whatever came
// between the last linger and that request: the program saw it, and
// answered with that request.
func TestLingerCountsFromTheRequest(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
	cfg := func(p datapath.Port, last byte) verbs.DeviceConfig {
		return verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}),
			Poll: datapath.PollApp, PollBudget: 50 * time.Microsecond}, Port: p, Driven: true}
	}
	a := verbstest.NewEndConfig(t, cfg(pa, 1), bufSize)
	b := verbstest.NewEndConfig(t, cfg(pb, 2), bufSize)
	verbstest.Connect(t, a, b, 3, 14)
	na, nb := a.Dev.NIC(), b.Dev.NIC()
	// write posts a WRITE from one end to the other and runs both NICs
	// until it has completed and been placed.
	write := func(from, to *verbstest.End) {
		t.Helper()
		placed := to.Dev.WritesPlaced()
		if _, err := from.QP.PostSend([]verbs.SendWR{writeWR(from, to, 1, 0, 8, 0)}); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		for end := time.Now().Add(10 * time.Second); from.CQ.PollNoDrive(wc[:]) == 0 || to.Dev.WritesPlaced() == placed; {
			if time.Now().After(end) {
				t.Fatal("the WRITE did not complete")
			}
			na.Progress()
			nb.Progress()
		}
	}
	if lingered, hit := na.Linger(); !lingered || hit {
		t.Fatalf("with nothing coming, Linger = %v, %v; want it to wait in vain", lingered, hit)
	}
	write(b, a) // comes after that linger, before the request below
	write(a, b)
	if lingered, hit := na.Linger(); !lingered || hit {
		t.Fatalf("after a request, with nothing since: Linger = %v, %v; want it to wait (in vain: the peer is quiet)", lingered, hit)
	}
	write(a, b)
	write(b, a) // the answer came before the poll
	if lingered, _ := na.Linger(); lingered {
		t.Fatal("Linger waited with the answer to the last request here already")
	}
}

// TestLingerTakesAWholeMessage: a linger that sees the first packets of
// the peer's WRITE goes on until the WRITE is placed, so that the program
// that spins on its buffer next finds it there; ended by the first
// frame, it left the rest for the NIC's goroutine's lease (perftest's
// write_lat at 64 KiB took 4.6 ms a half round trip, 0.14 ms since).
func TestLingerTakesAWholeMessage(t *testing.T) {
	// Frames of 1 KiB spaced 20 us apart by the link's rate: the WRITE's
	// four come in four turns.
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192, Rate: 430e6})
	cfg := func(p datapath.Port, last byte, mode datapath.PollMode, driven bool) verbs.DeviceConfig {
		return verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}),
			Poll: mode, PollBudget: 5 * time.Millisecond}, Port: p, Driven: driven} // a linger waits 20 ms for a first frame
	}
	a := verbstest.NewEndConfig(t, cfg(pa, 1, datapath.PollApp, true), bufSize) // only this test's calls drive it
	b := verbstest.NewEndConfig(t, cfg(pb, 2, datapath.PollSleep, false), bufSize)
	verbstest.Connect(t, a, b, 3, 14)
	na := a.Dev.NIC()
	var wc [1]verbs.WC
	if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, 1, 0, 8, 0)}); err != nil { // a request first: the linger waits for its answer
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); a.CQ.PollNoDrive(wc[:]) == 0; na.Progress() {
		if time.Now().After(end) {
			t.Fatal("the WRITE did not complete")
		}
	}
	const size = 4096 // four packets at MTU 1024
	placed := a.Dev.WritesPlaced()
	if _, err := b.QP.PostSend([]verbs.SendWR{writeWR(b, a, 2, 0, size, 0)}); err != nil {
		t.Fatal(err)
	}
	lingered, hit := na.Linger()
	if !lingered || !hit {
		t.Fatalf("Linger = %v, %v with the peer's WRITE on its way; want it to see it", lingered, hit)
	}
	if got := a.Dev.WritesPlaced(); got == placed {
		t.Fatalf("a linger that saw the peer's WRITE returned before it was placed (%d frames taken)", na.Engines()[0].RxFrames.Load())
	}
}

// TestDriven: a Driven device runs no goroutine of its own; only the
// application's polling moves it. Two such devices, polled by the test's
// one thread, complete a WRITE, and close at once. Driven without
// PollApp is refused.
func TestDriven(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 256})
	defer pa.Close()
	defer pb.Close()
	if _, err := verbs.Open(verbs.DeviceConfig{Port: pa, Driven: true}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Driven with PollSleep: %v, want ErrInvalid", err)
	}
	before := runtime.NumGoroutine()
	var devs [2]*verbs.Device
	var qps [2]*verbs.QP
	var cqs [2]*verbs.CQ
	var mrs [2]*verbs.MR
	var bufs [2][]byte
	ahs := [2]verbs.AH{{DestMAC: wire.MAC{2, 0, 0, 0, 7, 1}, DestGID: netip.MustParseAddr("10.48.0.1")}, {DestMAC: wire.MAC{2, 0, 0, 0, 7, 2}, DestGID: netip.MustParseAddr("10.48.0.2")}}
	for i, p := range []*porttest.Port{pa, pb} {
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: ahs[i].DestMAC, IP: ahs[i].DestGID, Poll: datapath.PollApp}, Port: p, Driven: true})
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = d
		pd, _ := d.AllocPD()
		if cqs[i], err = d.CreateCQ(16); err != nil {
			t.Fatal(err)
		}
		bufs[i] = make([]byte, 4096)
		if mrs[i], err = pd.RegMR(bufs[i], verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
		if qps[i], err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cqs[i], RecvCQ: cqs[i], Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines more with two Driven devices open", n-before)
	}
	if err := verbs.ConnectRC(qps[0], qps[1], ahs[0], ahs[1], 5, 14); err != nil {
		t.Fatal(err)
	}
	copy(bufs[0], "driven")
	if _, err := qps[0].PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: mrs[0].Addr, Length: 6, LKey: mrs[0].LKey}}, RemoteAddr: mrs[1].Addr, RKey: mrs[1].RKey}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for cqs[0].PollNoDrive(wc) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no completion: nothing drove the devices")
		}
		devs[0].NIC().Progress()
		devs[1].NIC().Progress()
	}
	if wc[0].Status != verbs.WCSuccess || string(bufs[1][:6]) != "driven" {
		t.Fatalf("completion %v, remote buffer %q", wc[0].Status, bufs[1][:6])
	}
	for _, d := range devs {
		d.Close()
	}
}

// TestAdaptiveIdleSleeps: an adaptive engine with nothing to do sleeps
// on its port, woken by the timers' tick at most a millisecond apart, and
// after such a wake it sleeps again after a few idle turns instead of
// polling a whole budget: an idle engine (a queue of a multi-queue port
// that carries no traffic) holds no core, however long its budget.
func TestAdaptiveIdleSleeps(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 64})
	d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 9}, IP: netip.MustParseAddr("10.47.0.9"),
		Poll: datapath.PollAdaptive, PollBudget: 20 * time.Millisecond}, Port: pa})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	time.Sleep(50 * time.Millisecond) // past the first budget
	s := d.NIC().Engines()[0]
	polls0, sleeps0 := s.IdlePolls.Load(), s.Sleeps.Load()
	time.Sleep(100 * time.Millisecond)
	polls, sleeps := s.IdlePolls.Load()-polls0, s.Sleeps.Load()-sleeps0
	t.Logf("100 ms idle: %d sleeps, %d idle polls", sleeps, polls)
	if sleeps < 10 {
		t.Fatalf("%d sleeps in 100 ms of idleness (the tick wakes it every millisecond)", sleeps)
	}
	// A budget polled after every wake would be 20 ms of turns each time;
	// a few dozen turns a wake are expected.
	if polls > 1000*sleeps {
		t.Fatalf("%d idle polls for %d sleeps: the engine polls its budget after every wake", polls, sleeps)
	}
}
