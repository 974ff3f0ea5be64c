package verbs_test

import (
	"bytes"
	"net/netip"
	"testing"

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
				return verbs.DeviceConfig{Port: p, MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}), Poll: mode}
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
