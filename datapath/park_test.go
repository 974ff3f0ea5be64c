package datapath

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// A packet parked for its QP's context keeps the port's own buffer (no
// copy), up to heldRxMax of them; beyond that the packets are copied and
// their buffers go back at once. When the contexts come every packet is
// placed, in order, from bytes the port has not overwritten, and the
// port has every buffer back, each once.
func TestParkInPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		qps    int // cold QPs
		each   int // WRITEs parked on each
		inPort int // of them parked in the port's buffers
	}{
		{"two packets", 1, 2, 2},
		{"beyond the port's budget", 3, 30, heldRxMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.cq(0, 256)
			buf := make([]byte, 64<<10)
			rkey, va := h.mr(buf, ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
			var qpns []uint32
			for i := range tc.qps {
				qpn := uint32(17 + i)
				h.rcQP(qpn, 100+qpn, 0, 0, 0)
				qpns = append(qpns, qpn)
			}
			warmUp(h, rkey, va, qpns...)
			e := h.nic.engines[0]
			copies := e.parkPool.Lent()
			for _, qpn := range qpns {
				h.nic.Cache(hostmem.QPC).Invalidate(uint64(qpn))
			}
			total := tc.qps * tc.each
			for i := range tc.each {
				for q, qpn := range qpns {
					h.write(qpn, wire.PSN(1+i), rkey, va+uint64((q*tc.each+i)*8), []byte(fmt.Sprintf("%02d-%04d", q, i)))
				}
			}
			h.turns() // the clock stands: every packet is parked
			if held, copied := len(h.port.lent), e.parkPool.Lent()-copies; held != tc.inPort || copied != total-tc.inPort {
				t.Fatalf("parked %d in the port's buffers and %d copied, want %d and %d", held, copied, tc.inPort, total-tc.inPort)
			}
			h.after(pcieLatency) // the contexts come: the packets run
			h.after(pcieLatency) // the placed bytes reach host memory
			for q := range qpns {
				for i := range tc.each {
					want := []byte(fmt.Sprintf("%02d-%04d", q, i))
					if got := h.read(va+uint64((q*tc.each+i)*8), 7); !bytes.Equal(got, want) {
						t.Fatalf("QP %d's WRITE %d placed %q, want %q", qpns[q], i, got, want)
					}
				}
			}
			if held, copied := len(h.port.lent), e.parkPool.Lent()-copies; held != 0 || copied != 0 || h.port.badRelease != 0 {
				t.Errorf("after the packets ran: %d port buffers and %d copies still held, %d released wrongly", held, copied, h.port.badRelease)
			}
		})
	}
}

// Closing the NIC gives the port back the buffers its parked packets
// held.
func TestParkInPlaceClose(t *testing.T) {
	h := newHarness(t)
	h.cq(0, 16)
	h.rcQP(17, 100, 0, 0, 0)
	rkey, va := h.mr(make([]byte, 64), ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	warmUp(h, rkey, va, 17)
	h.nic.Cache(hostmem.QPC).Invalidate(17)
	h.write(17, 1, rkey, va, []byte("a"))
	h.turns()
	if len(h.port.lent) != 1 {
		t.Fatalf("%d port buffers held, want the parked packet's", len(h.port.lent))
	}
	h.nic.Close()
	if len(h.port.lent) != 0 || h.port.badRelease != 0 {
		t.Errorf("after Close: %d port buffers held, %d released wrongly", len(h.port.lent), h.port.badRelease)
	}
}
