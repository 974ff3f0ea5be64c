package tests

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
	"github.com/softrnic/softrnic/hpu"
)

// TestHandlers runs sPIN handlers on b's NIC across a real veth pair, with
// each port: a 1 MiB WRITE summed by payload handlers (nothing lands, the
// sum reaches b's memory by the completion handler's DMA, the requester's
// completion comes after it), SENDs answered by the header handler with a
// reply from b's NIC, and a WRITE whose handler panics failing on both
// sides.
func TestHandlers(t *testing.T) {
	for _, kind := range []string{"xsk", "udp"} {
		t.Run(kind, func(t *testing.T) {
			a, b := veth(t, kind)
			region, err := b.PD.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 64)
			if _, err := b.QP.AttachHandlers(hpu.Context{
				MemorySize: 8,
				Host:       region.Region(),
				Header: func(t *hpu.Task) hpu.Action {
					if t.Packet.Opcode&0x1f == 0x04 { // SEND_ONLY: a request, answered from the NIC
						if t.Packet.Payload[0] == 'x' {
							panic("bad request")
						}
						if err := t.Send(append([]byte("re:"), t.Packet.Payload...)); err != nil {
							panic(err)
						}
					}
					return hpu.Success
				},
				Payload: func(t *hpu.Task) hpu.Action {
					var s int64
					for _, c := range t.Packet.Payload {
						s += int64(c)
					}
					t.Mem.AddInt64(0, s)
					return hpu.Success
				},
				Completion: func(t *hpu.Task) hpu.Action {
					if t.Message.VA == 0 {
						return hpu.Success // a request: its reply went from the header handler
					}
					var out [8]byte
					binary.LittleEndian.PutUint64(out[:], t.Mem.Load64(0))
					t.DMAToHost(0, out[:])
					return hpu.Success
				},
				Done: func(m *hpu.Message, err error) { done <- err },
			}, verbs.Match{}); err != nil {
				t.Fatal(err)
			}

			const size = 1 << 20
			verbstest.Fill(a.Buf[:size], 11)
			var want int64
			for _, c := range a.Buf[:size] {
				want += int64(c)
			}
			guarded(b.Buf, 4096, size)
			if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: verbstest.SGL(a, 0, size), RemoteAddr: b.MR.Addr + 4096, RKey: b.MR.RKey}}); err != nil {
				t.Fatal(err)
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE: %+v", wc)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := int64(binary.LittleEndian.Uint64(region.Buf)); got != want {
				t.Fatalf("the handlers summed %d, want %d", got, want)
			}
			b.Dev.Fence()
			for i := 4096 - 64; i < 4096+size+64; i++ {
				if b.Buf[i] != guard {
					t.Fatalf("byte %d of b's buffer changed: the handlers consumed the WRITE", i)
				}
			}

			// Requests answered by b's NIC.
			const reqs = 8
			for i := range reqs {
				if _, err := a.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGL: verbstest.SGL(a, 1<<20+i*64, 64)}}); err != nil {
					t.Fatal(err)
				}
				copy(a.Buf[2<<20+i*8:], []byte{'q', byte('0' + i)})
				if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: uint64(10 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGL: verbstest.SGL(a, 2<<20+i*8, 2)}}); err != nil {
					t.Fatal(err)
				}
			}
			replies := map[string]bool{}
			for range 2 * reqs {
				wc := verbstest.WaitWC(t, a.CQ)
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("request: %+v", wc)
				}
				if wc.Opcode == verbs.WCRecv {
					off := 1<<20 + int(wc.WRID-100)*64
					replies[string(a.Buf[off:off+int(wc.ByteLen)])] = true
				}
			}
			for i := range reqs {
				if r := string([]byte{'r', 'e', ':', 'q', byte('0' + i)}); !replies[r] {
					t.Fatalf("no reply %q among %v", r, replies)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}

			// A request the handler cannot take fails on both sides.
			copy(a.Buf[3<<20:], "x")
			if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 3<<20, 1)}}); err != nil {
				t.Fatal(err)
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCRemOpErr {
				t.Fatalf("faulting request: %+v, want a remote operation error", wc)
			}
			if err := <-done; err == nil {
				t.Fatal("the faulting request's Done got no error")
			}
			if n := b.Counts.HPUFaults.Load(); n != 1 {
				t.Fatalf("hpu_faults %d", n)
			}
			if !bytes.Equal(region.Buf[8:], make([]byte, 56)) {
				t.Fatal("the region changed beyond the sum")
			}
		})
	}
}
