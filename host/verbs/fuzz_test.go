package verbs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// FuzzResponder sends a NIC's RC QP requests a hostile peer crafts: any
// opcode, PSN, R_Key, address, length, payload and atomic operands, as
// well-formed frames with a correct ICRC. Whatever they say, the NIC must
// go on running, answer only with well-formed frames, and write nothing
// outside its registered region (guard pages on both sides are checked).
func FuzzResponder(f *testing.F) {
	const peerQPN, peerPSN = 0x77, 100
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	macA, macB := wire.MAC{2, 0, 0, 0, 0, 1}, wire.MAC{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("10.48.0.1"), netip.MustParseAddr("10.48.0.2")
	b := verbstest.NewEnd(f, pb, macB, ipB, 4096)
	nic := b.Dev.NIC()
	// The region ends 64 bytes short of a page: the guard bytes after it
	// share its last page, so only the NIC's bounds checks keep them.
	const page, lo, hi = 4096, 4096, 2*4096 - 64
	mem := make([]byte, 3*page)
	region := mem[lo:hi]
	mr, err := b.PD.RegMR(region, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		f.Fatal(err)
	}
	const guard = 0xa5
	for i := range mem {
		if i < lo || i >= hi {
			mem[i] = guard
		}
	}
	// ready takes b's QP to RTS facing the crafted peer, with receives
	// posted into the region.
	ready := func(t testing.TB) {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState},
			{verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DestMAC: macA, DestGID: ipA}, PathMTU: 3, DestQPN: peerQPN, RQPSN: peerPSN,
				MaxDestRdAtomic: 16, MinRNRTimer: 1},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := b.QP.Modify(&s.attr, s.mask); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{{Addr: mr.Addr + uint64(i*960), Length: 960, LKey: mr.LKey}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ready(f)
	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(0), uint8(0), uint32(16), []byte("sixteen bytes!!!"), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAReadRequest), uint16(0), int64(8), uint8(0), uint32(3000), []byte(nil), uint64(0), uint64(0))
	f.Add(uint8(wire.RCCompareSwap), uint16(0), int64(64), uint8(0), uint32(0), []byte(nil), uint64(1), uint64(0))
	f.Add(uint8(wire.RCFetchAdd), uint16(0), int64(4095), uint8(0), uint32(0), []byte(nil), uint64(1), uint64(0))
	f.Add(uint8(wire.RCSendOnly), uint16(0), int64(0), uint8(0), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCSendFirst), uint16(0), int64(0), uint8(0), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteFirst), uint16(0), int64(-8), uint8(0), uint32(4096), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(hi-lo-8), uint8(0), uint32(16), make([]byte, 16), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(0), uint8(1), uint32(16), make([]byte, 16), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteMiddle), uint16(5), int64(0), uint8(2), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAReadRequest), uint16(0xffff), int64(0), uint8(0), uint32(0xffffffff), []byte(nil), uint64(0), uint64(0))

	// exchange sends one crafted frame and returns the syndromes of the
	// acknowledgements the NIC answers with: it waits up to 5 s for want
	// of them, then until the NIC has been quiet for 2 ms; ok is false if
	// the fields make no frame.
	frames := make([]datapath.Frame, 16)
	exchange := func(t testing.TB, fr *wire.FrameFields, want int) (syndromes []wire.Syndrome, ok bool) {
		fr.Ethernet = wire.EthernetFields{Dst: macB, Src: macA}
		fr.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: ipA, Dst: ipB}
		fr.UDP = wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port}
		fr.BTH.PKey, fr.BTH.DestQP, fr.BTH.AckReq = wire.DefaultPKey, b.QP.Num, true
		if pa.Alloc(frames[:1]) != 1 {
			t.Fatal("no transmit buffer")
		}
		k, err := wire.Encode(frames[0].Data, fr)
		if err != nil {
			pa.Free(frames[:1])
			return nil, false
		}
		frames[0].Data = frames[0].Data[:k]
		if n, err := pa.Send(frames[:1]); n != 1 || err != nil {
			t.Fatalf("send: %d, %v", n, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for quiet := time.Now(); time.Since(quiet) < 2*time.Millisecond || len(syndromes) < want && time.Now().Before(deadline); {
			n, err := pa.Recv(frames)
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames[:n] {
				var p wire.Packet
				if err := wire.Parse(fr.Data, &p); err != nil {
					t.Errorf("the NIC sent a malformed frame: %v", err)
				} else if p.Info.Has(wire.HdrAETH) {
					syndromes = append(syndromes, p.AETH().Syndrome())
				}
			}
			pa.Release(frames[:n])
			if n > 0 {
				quiet = time.Now()
			}
		}
		return syndromes, true
	}
	// The crafted peer is heard: a good WRITE is acknowledged and lands,
	// a WRITE with a wrong key is refused with a NAK.
	good := []byte("heard by the NIC")
	s1, _ := exchange(f, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: peerPSN},
		RETH: wire.RETHFields{VA: mr.Addr, RKey: mr.RKey, DMALen: uint32(len(good))}, Payload: good}, 1)
	nic.Command(func() {}) // the engine has written: its memory is ours to read
	if len(s1) != 1 || !s1[0].IsACK() || string(region[:len(good)]) != string(good) {
		f.Fatalf("good WRITE: syndromes %v, region %q", s1, region[:len(good)])
	}
	s2, _ := exchange(f, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: peerPSN + 1},
		RETH: wire.RETHFields{VA: mr.Addr, RKey: mr.RKey ^ 1, DMALen: uint32(len(good))}, Payload: good}, 1)
	if len(s2) != 1 || !s2[0].IsNAK() {
		f.Fatalf("WRITE with a bad R_Key: syndromes %v, want one NAK", s2)
	}
	ready(f)

	var psn wire.PSN = peerPSN // the PSN b expects next, as far as the peer knows
	f.Fuzz(func(t *testing.T, op uint8, psnOff uint16, vaOff int64, keySel uint8, dmaLen uint32, payload []byte, swap, compare uint64) {
		if nic.QPErrored(b.QP.Num) {
			ready(t)
			psn = peerPSN
		}
		rkey := mr.RKey
		switch keySel % 4 {
		case 1:
			rkey ^= 1 // wrong key byte
		case 2:
			rkey = b.MR.RKey // another region
		case 3:
			rkey = uint32(swap) // anything
		}
		va := mr.Addr + uint64(vaOff)
		fr := wire.FrameFields{
			BTH:            wire.BTHFields{Opcode: wire.Opcode(op), PSN: psn.Add(uint32(psnOff)) & wire.PSNMask},
			RETH:           wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen},
			AtomicETH:      wire.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: swap, Compare: compare},
			InvalidateRKey: rkey,
		}
		if wire.Opcode(op).Info().Flags&wire.OpPayload != 0 {
			fr.Payload = payload[:min(len(payload), 1024)]
		}
		if _, ok := exchange(t, &fr, 0); !ok {
			return // not a frame: nothing to send
		}
		if psnOff == 0 {
			psn = psn.Next()
		}
		alive := make(chan struct{})
		go func() { nic.Command(func() {}); close(alive) }()
		select {
		case <-alive:
		case <-time.After(10 * time.Second):
			t.Fatal("the NIC stopped answering commands")
		}
		for i := range mem {
			if (i < lo || i >= hi) && mem[i] != guard {
				t.Fatalf("byte %d outside the region was written", i-lo)
			}
		}
	})
}
