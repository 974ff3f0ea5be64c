package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
	"github.com/softrnic/softrnic/hpu"
)

// writeWR is a signaled RDMA WRITE of size bytes of a's buffer at off to
// b's buffer at remoteOff.
func writeWR(a, b *end, id uint64, off, size, remoteOff int) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl(a, off, size),
		RemoteAddr: b.MR.Addr + uint64(remoteOff), RKey: b.MR.RKey}
}

// TestHandlersSumWrite: a 64 KiB WRITE to a QP with a context runs
// through its handlers (header once, payload per packet, completion after
// them), lands nowhere by default, and its sender's completion comes only
// after the completion handler has returned.
func TestHandlersSumWrite(t *testing.T) {
	a, b := pair(t)
	const size = 64 << 10
	fill(a.Buf[:size], 7)
	var want int64
	for i := 0; i < size; i += 4 {
		want += int64(int32(binary.LittleEndian.Uint32(a.Buf[i:])))
	}
	release := make(chan struct{})
	var headers, payloads, completions atomic.Int32
	var order []string
	var mu sync.Mutex
	done := make(chan error, 1)
	inst, err := b.QP.AttachHandlers(hpu.Context{
		Name:       "sum",
		MemorySize: 64,
		Header: func(t *hpu.Task) hpu.Action {
			headers.Add(1)
			mu.Lock()
			order = append(order, "header")
			mu.Unlock()
			return hpu.Success
		},
		Payload: func(t *hpu.Task) hpu.Action {
			payloads.Add(1)
			var s int64
			for i := 0; i+4 <= len(t.Packet.Payload); i += 4 {
				s += int64(int32(binary.LittleEndian.Uint32(t.Packet.Payload[i:])))
			}
			t.Mem.AddInt64(0, s)
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action {
			completions.Add(1)
			mu.Lock()
			order = append(order, "completion")
			mu.Unlock()
			<-release
			return hpu.Success
		},
		Done: func(m *hpu.Message, err error) { done <- err },
	}, verbs.Match{})
	if err != nil {
		t.Fatal(err)
	}
	clear(b.Buf[:size])
	if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, 1, 0, size, 0)}); err != nil {
		t.Fatal(err)
	}
	// The completion handler holds: the WRITE must not complete yet.
	var wc [1]verbs.WC
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if a.CQ.Poll(wc[:]) > 0 {
			t.Fatalf("the WRITE completed (%+v) before its completion handler returned", wc[0])
		}
	}
	close(release)
	if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 1 {
		t.Fatalf("write completion %+v", wc)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h, p, c := headers.Load(), payloads.Load(), completions.Load(); h != 1 || p != size/1024 || c != 1 {
		t.Fatalf("handlers ran %d, %d, %d times; want 1 header, %d payload, 1 completion", h, p, c, size/1024)
	}
	if order[0] != "header" || order[1] != "completion" {
		t.Fatalf("order %v", order)
	}
	if got := int64(inst.Memory().Load64(0)); got != want {
		t.Fatalf("handlers summed %d, want %d", got, want)
	}
	if got := inst.Stats.Messages.Load(); got != 1 {
		t.Fatalf("context completed %d messages", got)
	}
	b.Dev.Fence()
	if !bytes.Equal(b.Buf[:size], make([]byte, size)) {
		t.Fatal("the WRITE's data landed although every handler returned Success")
	}
}

// TestHandlersProceedAndMatch: a handler's Proceed lands the data where
// the RETH says; messages the match does not take land as usual, and a
// SEND the context takes needs no receive WQE.
func TestHandlersProceedAndMatch(t *testing.T) {
	a, b := pair(t)
	region := make([]byte, 8192)
	rmr, err := b.PD.RegMR(region, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var taken atomic.Int32
	if _, err := b.QP.AttachHandlers(hpu.Context{
		Host:    rmr.Region(),
		Payload: func(t *hpu.Task) hpu.Action { taken.Add(1); return hpu.Proceed },
	}, verbs.Match{Tag: []byte("HPU!")}); err != nil {
		t.Fatal(err)
	}
	const size = 5000
	fill(a.Buf[:size], 3)
	copy(a.Buf, "HPU!")
	fill(a.Buf[size:2*size], 4) // no tag: not taken
	if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, 1, 0, size, 100), writeWR(a, b, 2, size, size, 20000)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	b.Dev.Fence()
	if !bytes.Equal(b.Buf[100:100+size], a.Buf[:size]) || !bytes.Equal(b.Buf[20000:20000+size], a.Buf[size:2*size]) {
		t.Fatal("data differs")
	}
	if got := taken.Load(); got != 5 {
		t.Fatalf("the handler ran %d times, want 5 (one message of 5 packets)", got)
	}
	// A tagged SEND proceeds into the host region, without a receive WQE.
	if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, 0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	if !bytes.Equal(region[:3000], a.Buf[:3000]) {
		t.Fatal("the SEND's data is not in the host region")
	}
}

// TestHandlersFault: a handler that panics, or writes outside its host
// region, fails its message on both sides (the requester's remote error,
// the context's Done), and the NIC and another QP go on.
func TestHandlersFault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler hpu.Handler
		status  verbs.WCStatus
		fault   error
	}{
		{"panic", func(t *hpu.Task) hpu.Action { panic("boom") }, verbs.WCRemOpErr, hpu.ErrHandlerPanic},
		{"outside region", func(t *hpu.Task) hpu.Action { t.DMAToHost(1<<20, t.Packet.Payload); return hpu.Success }, verbs.WCRemAccessErr, hpu.ErrOutsideRegion},
		{"memory overrun", func(t *hpu.Task) hpu.Action { t.Mem.Store64(64, 1); return hpu.Success }, verbs.WCRemOpErr, hpu.ErrMemoryOverrun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			region := make([]byte, 4096)
			rmr, _ := b.PD.RegMR(region, verbs.AccessLocalWrite)
			faults := make(chan error, 4)
			if _, err := b.QP.AttachHandlers(hpu.Context{MemorySize: 64, Host: rmr.Region(), Payload: tc.handler,
				Done: func(m *hpu.Message, err error) { faults <- err }}, verbs.Match{}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, 1, 0, 2048, 0)}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.CQ); wc.Status != tc.status {
				t.Fatalf("requester's completion %+v, want %v", wc, tc.status)
			}
			if err := <-faults; !errors.Is(err, tc.fault) {
				t.Fatalf("Done got %v, want %v", err, tc.fault)
			}
			if b.Counts.HPUFaults.Load() != 1 {
				t.Fatalf("hpu_faults %d", b.Counts.HPUFaults.Load())
			}
			// Another QP of the same NICs still works.
			qas, _ := twoQPs(t, a, b, 14)
			fill(a.Buf[:4096], 9)
			if _, err := qas[0].PostSend([]verbs.SendWR{writeWR(a, b, 2, 0, 4096, 8192)}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("other QP: %+v", wc)
			}
			b.Dev.Fence()
			if !bytes.Equal(b.Buf[8192:8192+4096], a.Buf[:4096]) {
				t.Fatal("other QP: data differs")
			}
		})
	}
}

// TestHandlersReply: a header handler answers a request with a SEND back
// on the QP, from the NIC; the requester's host receives it.
func TestHandlersReply(t *testing.T) {
	a, b := pair(t)
	if _, err := b.QP.AttachHandlers(hpu.Context{
		Header: func(t *hpu.Task) hpu.Action {
			reply := append([]byte("re:"), t.Packet.Payload...)
			if err := t.Send(reply); err != nil {
				panic(err)
			}
			return hpu.Success
		},
	}, verbs.Match{Ops: verbs.MatchSend}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := a.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGL: sgl(a, 8192+i*256, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		req := []byte{byte('a' + i), 'x', 'y'}
		copy(a.Buf[i*16:], req)
		if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl(a, i*16, 3)}}); err != nil {
			t.Fatal(err)
		}
	}
	recvs := 0
	replies := map[string]bool{}
	for range 40 {
		wc := waitWC(t, a.CQ)
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
		if wc.Opcode == verbs.WCRecv {
			i := int(wc.WRID - 100)
			replies[string(a.Buf[8192+i*256:8192+i*256+int(wc.ByteLen)])] = true
			recvs++
		}
	}
	if recvs != 20 || b.Counts.HPUCommands.Load() != 20 {
		t.Fatalf("%d replies, %d commands", recvs, b.Counts.HPUCommands.Load())
	}
	for i := range 20 { // handlers of different messages run in parallel: replies come in any order
		if want := string([]byte{'r', 'e', ':', byte('a' + i), 'x', 'y'}); !replies[want] {
			t.Fatalf("no reply %q among %v", want, replies)
		}
	}
}

// TestHandlersBackpressure: handlers far slower than the link, with one
// HPU and two packet buffers: the NIC refuses what it has no room for,
// the peer sends it again, and every message is handled exactly once.
func TestHandlersBackpressure(t *testing.T) {
	link := porttest.Config{Buffers: 8192}
	pa, pb := porttest.NewPair(link)
	small := hpu.Config{Clusters: 1, HPUs: 1, Slots: 2, SlotSize: 1024, Messages: 4}
	a := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("10.47.0.1"), HPU: small}, Port: pa}, bufSize)
	b := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("10.47.0.2"), HPU: small}, Port: pb}, bufSize)
	verbstest.Connect(t, a, b, 3, 14)
	const msgs = 40
	var seen [msgs]atomic.Int32
	var total atomic.Int64
	if _, err := b.QP.AttachHandlers(hpu.Context{
		Payload: func(t *hpu.Task) hpu.Action {
			time.Sleep(200 * time.Microsecond)
			total.Add(int64(len(t.Packet.Payload)))
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action { return hpu.Success },
		Done: func(m *hpu.Message, err error) {
			if err == nil {
				seen[(m.VA-b.MR.Addr)/4096].Add(1)
			}
		},
	}, verbs.Match{}); err != nil {
		t.Fatal(err)
	}
	var wrs []verbs.SendWR
	for i := range msgs {
		wrs = append(wrs, writeWR(a, b, uint64(i), 0, 3000, i*4096))
	}
	if _, err := a.QP.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for range msgs {
		if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("message %d handled %d times", i, n)
		}
	}
	if total.Load() != msgs*3000 {
		t.Fatalf("handlers saw %d bytes, want %d", total.Load(), msgs*3000)
	}
	if b.Counts.HPURefused.Load() == 0 {
		t.Fatal("nothing was refused: the test did not press the handlers")
	}
	t.Logf("refused %d packets, %d retransmitted", b.Counts.HPURefused.Load(), a.Counts.RetransmittedPkts.Load())
}

// TestHandlersOnTheEngine: once a context's handlers have shown
// themselves short, the receiving NIC's engine runs them in its own turn
// (hpu_helped); every WRITE still completes once, after its handler. A
// handler that then starts to wait (two tasks in a row on the engine
// over 100 us) sends the context back to the HPUs (hpu_kept_off), and
// the WRITEs behind it still complete.
func TestHandlersOnTheEngine(t *testing.T) {
	a, b := pair(t)
	var calls atomic.Int64
	var wait atomic.Int64
	_, err := b.QP.AttachHandlers(hpu.Context{Name: "count", Payload: func(*hpu.Task) hpu.Action {
		calls.Add(1)
		if d := time.Duration(wait.Load()); d > 0 {
			time.Sleep(d)
		}
		return hpu.Success
	}}, verbs.Match{})
	if err != nil {
		t.Fatal(err)
	}
	stream := func(n, depth int) {
		t.Helper()
		posted, done := 0, 0
		wc := make([]verbs.WC, 32)
		for deadline := time.Now().Add(time.Minute); done < n; {
			for posted < n && posted-done < depth {
				if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(posted), 0, 64, 0)}); err != nil {
					t.Fatal(err)
				}
				posted++
			}
			k := a.CQ.Poll(wc)
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					t.Fatalf("WRITE %d: %v", c.WRID, c.Status)
				}
			}
			done += k
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d WRITEs complete after a minute", done, n)
			}
		}
	}
	const n = 3000 // well past the warm-up: 32 tasks timed, one in 16
	stream(n, 16)
	if got := calls.Load(); got != n {
		t.Fatalf("the handler ran %d times for %d WRITEs", got, n)
	}
	st := &b.Dev.NIC().HPU().Stats
	helped := st.Helped.Load()
	if helped == 0 {
		if raceEnabled {
			t.Skip("no task ran on the engine: under the race detector an empty handler's tasks may run longer than the 2 us a short context's do")
		}
		t.Fatalf("no task of %d ran on the engine", n)
	}
	t.Logf("%d of %d tasks ran on the engine", helped, n)
	wait.Store(int64(300 * time.Microsecond))
	stream(20, 1) // one at a time: the engine has each, until the context is kept off
	if got := st.KeptOff.Load(); got == 0 {
		t.Errorf("a handler that waits 300 us was not kept off the engine (helped %d -> %d)", helped, st.Helped.Load())
	}
	if got := calls.Load(); got != n+20 {
		t.Fatalf("the handler ran %d times for %d WRITEs", got, n+20)
	}
}
