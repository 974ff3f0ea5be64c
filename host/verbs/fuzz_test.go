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

// hostile is a NIC (b) with one RC QP facing a peer that the test plays
// by hand on the other port of the link: it crafts any frame it likes.
type hostile struct {
	pa     *porttest.Port
	b      *verbstest.End
	nic    *datapath.NIC
	mem    []byte // region with guard bytes on both sides
	region []byte
	mr     *verbs.MR
	frames []datapath.Frame
	// noRecvs: readyOpts posts no receives (the application waits for
	// WRITEs, polling memory).
	noRecvs bool
}

const (
	hostileQPN, hostilePSN = 0x77, 100         // the peer's QP and first PSN
	bPSN                   = 1000              // b's first PSN
	guardByte              = 0xa5              // what lies around the region
	regionLo, regionHi     = 4096, 2*4096 - 64 // the region in mem
)

var (
	macA, macB = wire.MAC{2, 0, 0, 0, 0, 1}, wire.MAC{2, 0, 0, 0, 0, 2}
	ipA, ipB   = netip.MustParseAddr("10.48.0.1"), netip.MustParseAddr("10.48.0.2")
)

func newHostile(f testing.TB) *hostile {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	h := &hostile{pa: pa, b: verbstest.NewEnd(f, pb, macB, ipB, 4096), frames: make([]datapath.Frame, 16)}
	h.nic = h.b.Dev.NIC()
	// The region ends 64 bytes short of a page: the guard bytes after it
	// share its last page, so only the NIC's checks keep them.
	h.mem = make([]byte, 3*4096)
	h.region = h.mem[regionLo:regionHi]
	var err error
	if h.mr, err = h.b.PD.RegMR(h.region, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		f.Fatal(err)
	}
	for i := range h.mem {
		if i < regionLo || i >= regionHi {
			h.mem[i] = guardByte
		}
	}
	h.ready(f)
	return h
}

// ready takes b's QP (back) to RTS facing the peer, with receives posted
// into the region.
func (h *hostile) ready(t testing.TB) { h.readyWith(t, 8) }

// readyWith is ready with the QP's local ACK timeout exponent.
func (h *hostile) readyWith(t testing.TB, timeout uint8) { h.readyPeer(t, timeout, 0) }

// readyPeer is readyWith, the QP told the peer's RNR retry count
// (QPAttr.PeerRNRRetry) unless it is 0.
func (h *hostile) readyPeer(t testing.TB, timeout, peerRNRRetry uint8) {
	h.readyOpts(t, timeout, peerRNRRetry, false)
}

// readyOpts is readyPeer, with the idle probe (QPAttr.IdleProbe) if idle.
func (h *hostile) readyOpts(t testing.TB, timeout, peerRNRRetry uint8, idle bool) {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DestMAC: macA, DestGID: ipA}, PathMTU: 3, DestQPN: hostileQPN, RQPSN: hostilePSN,
			MaxDestRdAtomic: 16, MinRNRTimer: 1},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: bPSN, Timeout: timeout, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 16},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	if peerRNRRetry != 0 {
		steps[3].attr.PeerRNRRetry = peerRNRRetry
		steps[3].mask |= verbs.AttrPeerRNRRetry
	}
	if idle {
		steps[3].attr.IdleProbe = true
		steps[3].mask |= verbs.AttrIdleProbe
	}
	for _, s := range steps {
		if err := h.b.QP.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	var wc [16]verbs.WC
	for h.b.CQ.Poll(wc[:]) > 0 { // the flushed work requests
	}
	recvs := 4
	if h.noRecvs {
		recvs = 0
	}
	for i := range recvs {
		if _, err := h.b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{{Addr: h.mr.Addr + uint64(i*960), Length: 960, LKey: h.mr.LKey}}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// exchange sends one crafted frame (none if fr is nil) and returns the
// packets the NIC sends back: it waits up to 5 s for want of them, then
// until the NIC has been quiet for 2 ms. ok is false if the fields make
// no frame. Every frame the NIC sends must parse.
func (h *hostile) exchange(t testing.TB, fr *wire.FrameFields, want int) (got []wire.Packet, ok bool) {
	if fr != nil {
		fr.Ethernet = wire.EthernetFields{Dst: macB, Src: macA}
		fr.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: ipA, Dst: ipB}
		fr.UDP = wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port}
		if !h.send(t, fr) {
			return nil, false
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for quiet := time.Now(); time.Since(quiet) < 2*time.Millisecond || len(got) < want && time.Now().Before(deadline); {
		n, err := h.pa.Recv(h.frames)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range h.frames[:n] {
			var p wire.Packet
			if err := wire.Parse(append([]byte(nil), fr.Data...), &p); err != nil {
				t.Errorf("the NIC sent a malformed frame: %v", err)
				continue
			}
			got = append(got, p)
		}
		h.pa.Release(h.frames[:n])
		if n > 0 {
			quiet = time.Now()
		}
	}
	return got, true
}

// send sends crafted frames to the NIC in one batch, addressed as from
// the peer (with the default P_Key unless one is set). It reports false,
// sending nothing, if a frame's fields make no frame.
func (h *hostile) send(t testing.TB, frs ...*wire.FrameFields) bool {
	t.Helper()
	out := make([]datapath.Frame, len(frs))
	if h.pa.Alloc(out) != len(out) {
		t.Fatal("no transmit buffers")
	}
	for i, fr := range frs {
		fr.Ethernet = wire.EthernetFields{Dst: macB, Src: macA}
		fr.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: ipA, Dst: ipB}
		fr.UDP = wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port}
		if fr.BTH.PKey == 0 {
			fr.BTH.PKey = wire.DefaultPKey
		}
		if fr.BTH.DestQP == 0 {
			fr.BTH.DestQP = h.b.QP.Num
		}
		k, err := wire.Encode(out[i].Data, fr)
		if err != nil {
			h.pa.Free(out)
			return false
		}
		out[i].Data = out[i].Data[:k]
	}
	if n, err := h.pa.Send(out); n != len(out) || err != nil {
		t.Fatalf("send: %d of %d, %v", n, len(out), err)
	}
	return true
}

// post posts a work request on b's QP and returns the PSN of the first
// packet the NIC sends for it, which must have opcode op (retries may
// follow it).
func (h *hostile) post(t testing.TB, wr verbs.SendWR, op wire.Opcode) wire.PSN {
	t.Helper()
	if _, err := h.b.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	got, _ := h.exchange(t, nil, 1)
	if len(got) == 0 || got[0].BTH().Opcode() != op {
		t.Fatalf("got %d packets, want %v first", len(got), op)
	}
	return got[0].BTH().PSN()
}

// drain returns what the NIC has sent and not yet been read.
func (h *hostile) drain(t testing.TB) []wire.Packet {
	got, _ := h.exchange(t, nil, 0)
	return got
}

// check asserts the NIC still answers commands and wrote nothing outside
// the region. The command also hands the engine's writes to this
// goroutine.
func (h *hostile) check(t testing.TB) {
	alive := make(chan struct{})
	go func() { h.nic.Command(func() {}); close(alive) }()
	select {
	case <-alive:
	case <-time.After(10 * time.Second):
		t.Fatal("the NIC stopped answering commands")
	}
	for i := range h.mem {
		if (i < regionLo || i >= regionHi) && h.mem[i] != guardByte {
			t.Fatalf("byte %d outside the region was written", i-regionLo)
		}
	}
}

// FuzzResponder sends the NIC's RC QP requests a hostile peer crafts: any
// opcode, PSN, R_Key, address, length, payload and atomic operands, as
// well-formed frames with a correct ICRC. Whatever they say, the NIC must
// go on running, answer only with well-formed frames, and write nothing
// outside its registered region.
func FuzzResponder(f *testing.F) {
	h := newHostile(f)
	// The crafted peer is heard: a good WRITE is acknowledged and lands,
	// a WRITE with a wrong key is refused with a NAK.
	good := []byte("heard by the NIC")
	for _, tc := range []struct {
		rkey uint32
		ack  bool
	}{{h.mr.RKey, true}, {h.mr.RKey ^ 1, false}} {
		got, _ := h.exchange(f, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PSN: hostilePSN, AckReq: true},
			RETH: wire.RETHFields{VA: h.mr.Addr, RKey: tc.rkey, DMALen: uint32(len(good))}, Payload: good}, 1)
		h.check(f)
		if len(got) != 1 || !got[0].Info.Has(wire.HdrAETH) || got[0].AETH().Syndrome().IsACK() != tc.ack {
			f.Fatalf("WRITE with R_Key %#x: got %d packets, want one with an ACK %v", tc.rkey, len(got), tc.ack)
		}
		if tc.ack && string(h.region[:len(good)]) != string(good) {
			f.Fatalf("the WRITE did not land: %q", h.region[:len(good)])
		}
		h.ready(f)
	}

	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(0), uint8(0), uint32(16), []byte("sixteen bytes!!!"), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAReadRequest), uint16(0), int64(8), uint8(0), uint32(3000), []byte(nil), uint64(0), uint64(0))
	f.Add(uint8(wire.RCCompareSwap), uint16(0), int64(64), uint8(0), uint32(0), []byte(nil), uint64(1), uint64(0))
	f.Add(uint8(wire.RCFetchAdd), uint16(0), int64(4095), uint8(0), uint32(0), []byte(nil), uint64(1), uint64(0))
	f.Add(uint8(wire.RCSendOnly), uint16(0), int64(0), uint8(0), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCSendFirst), uint16(0), int64(0), uint8(0), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteFirst), uint16(0), int64(-8), uint8(0), uint32(4096), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(regionHi-regionLo-8), uint8(0), uint32(16), make([]byte, 16), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteOnly), uint16(0), int64(0), uint8(1), uint32(16), make([]byte, 16), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAWriteMiddle), uint16(5), int64(0), uint8(2), uint32(0), make([]byte, 1024), uint64(0), uint64(0))
	f.Add(uint8(wire.RCRDMAReadRequest), uint16(0xffff), int64(0), uint8(0), uint32(0xffffffff), []byte(nil), uint64(0), uint64(0))

	var psn wire.PSN = hostilePSN // the PSN b expects next, as far as the peer knows
	f.Fuzz(func(t *testing.T, op uint8, psnOff uint16, vaOff int64, keySel uint8, dmaLen uint32, payload []byte, swap, compare uint64) {
		if h.nic.QPErrored(h.b.QP.Num) {
			h.ready(t)
			psn = hostilePSN
		}
		rkey := h.mr.RKey
		switch keySel % 4 {
		case 1:
			rkey ^= 1 // wrong key byte
		case 2:
			rkey = h.b.MR.RKey // another region
		case 3:
			rkey = uint32(swap) // anything
		}
		va := h.mr.Addr + uint64(vaOff)
		fr := wire.FrameFields{
			BTH:            wire.BTHFields{Opcode: wire.Opcode(op), PSN: psn.Add(uint32(psnOff)) & wire.PSNMask, AckReq: true},
			RETH:           wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen},
			AtomicETH:      wire.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: swap, Compare: compare},
			InvalidateRKey: rkey,
		}
		if wire.Opcode(op).Info().Flags&wire.OpPayload != 0 {
			fr.Payload = payload[:min(len(payload), 1024)]
		}
		if _, ok := h.exchange(t, &fr, 0); !ok {
			return // not a frame: nothing to send
		}
		if psnOff == 0 {
			psn = psn.Next()
		}
		h.check(t)
	})
}

// FuzzRequester answers the NIC's READ requests with whatever a hostile
// peer crafts: any response opcode, PSN, syndrome, MSN, payload and atomic
// value. The NIC must go on running, send only well-formed frames, write
// nothing outside the READ's destination region, and complete every work
// request it completes with a status from the verbs list, each once.
func FuzzRequester(f *testing.F) {
	h := newHostile(f)
	const readLen = 1500 // two packets at an IB MTU of 1024
	// readWithin posts a READ and returns its request's PSN when it comes
	// within d (earlier requests may come first: retries).
	readWithin := func(t testing.TB, wrid uint64, d time.Duration) (wire.PSN, bool) {
		if _, err := h.b.QP.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: h.mr.Addr, Length: readLen, LKey: h.mr.LKey}}, RemoteAddr: 0x1000, RKey: 0x1234}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(d); time.Now().Before(deadline); {
			got, _ := h.exchange(t, nil, 0)
			for _, p := range got {
				if p.BTH().Opcode() == wire.RCRDMAReadRequest && p.RETH().DMALen() == readLen {
					return p.BTH().PSN(), true
				}
			}
		}
		return 0, false
	}
	read := func(t testing.TB, wrid uint64) wire.PSN {
		psn, ok := readWithin(t, wrid, 5*time.Second)
		if !ok {
			t.Fatal("the READ request never came")
		}
		return psn
	}
	// The crafted peer is heard: a right answer completes the READ.
	data := make([]byte, readLen)
	verbstest.Fill(data, 7)
	psn := read(f, 1)
	h.exchange(f, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseFirst, PSN: psn},
		AETH: wire.AETHFields{MSN: 0}, Payload: data[:1024]}, 0)
	h.exchange(f, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseLast, PSN: psn.Next()},
		AETH: wire.AETHFields{MSN: 1}, Payload: data[1024:]}, 0)
	if wc := verbstest.WaitWC(f, h.b.CQ); wc.WRID != 1 || wc.Status != verbs.WCSuccess || string(h.region[:readLen]) != string(data) {
		f.Fatalf("READ answered right: %+v", wc)
	}
	h.check(f)
	f.Add(uint8(wire.RCRDMAReadResponseOnly), uint16(0), uint8(0), uint32(1), make([]byte, 100), uint64(0))
	f.Add(uint8(wire.RCRDMAReadResponseFirst), uint16(0), uint8(0), uint32(1), make([]byte, 1024), uint64(0))
	f.Add(uint8(wire.RCRDMAReadResponseLast), uint16(1), uint8(0), uint32(1), make([]byte, 4000), uint64(0))
	f.Add(uint8(wire.RCAcknowledge), uint16(0), uint8(0x60), uint32(1), []byte(nil), uint64(0))    // NAK: PSN sequence error
	f.Add(uint8(wire.RCAcknowledge), uint16(0), uint8(0x63), uint32(1), []byte(nil), uint64(0))    // NAK: remote operational error
	f.Add(uint8(wire.RCAcknowledge), uint16(0), uint8(0x20), uint32(1), []byte(nil), uint64(0))    // RNR NAK
	f.Add(uint8(wire.RCAtomicAcknowledge), uint16(0), uint8(0), uint32(1), []byte(nil), uint64(7)) // an atomic answer to a READ
	f.Add(uint8(wire.RCAcknowledge), uint16(0xfff0), uint8(0), uint32(0xffffff), []byte(nil), uint64(0))

	outstanding := map[uint64]bool{}
	next := uint64(999) // READs are numbered from 1000, receives below
	var reqPSN wire.PSN
	f.Fuzz(func(t *testing.T, op uint8, psnOff uint16, syndrome uint8, msn uint32, payload []byte, orig uint64) {
		if h.nic.QPErrored(h.b.QP.Num) {
			h.ready(t)
			clear(outstanding)
		}
		if len(outstanding) == 0 { // keep one READ outstanding, and learn its PSN
			next++
			psn, ok := readWithin(t, next, 20*time.Millisecond)
			if !ok {
				// The last input left the requester waiting (an RNR NAK's
				// timer, up to 655 ms, a backed-off timeout): a new QP
				// state rather than a wait, so that the fuzzer keeps its
				// rate.
				h.ready(t)
				next++
				psn = read(t, next)
			}
			reqPSN = psn
			outstanding[next] = true
		}
		fr := wire.FrameFields{
			BTH:            wire.BTHFields{Opcode: wire.Opcode(op), PSN: reqPSN.Add(uint32(psnOff)) & wire.PSNMask},
			AETH:           wire.AETHFields{Syndrome: wire.Syndrome(syndrome), MSN: msn & 0xffffff},
			AtomicOrigData: orig,
		}
		if wire.Opcode(op).Info().Flags&wire.OpPayload != 0 {
			fr.Payload = payload[:min(len(payload), 1024)]
		}
		if _, ok := h.exchange(t, &fr, 0); !ok {
			return
		}
		h.check(t)
		var wc [16]verbs.WC
		for n := h.b.CQ.Poll(wc[:]); n > 0; n = h.b.CQ.Poll(wc[:]) {
			for _, c := range wc[:n] {
				if c.WRID < 1000 {
					continue // a receive, flushed
				}
				if c.Status > verbs.WCGeneralErr {
					t.Errorf("completion %d with status %d", c.WRID, c.Status)
				}
				if !outstanding[c.WRID] {
					t.Errorf("completion of work request %d, which is not outstanding", c.WRID)
				}
				delete(outstanding, c.WRID)
			}
		}
	})
}

// TestShortReadResponse: a READ answered with a response too short for
// it (found by FuzzRequester) is not completed; the response is dropped
// and counted, and the right answer then completes the READ.
func TestShortReadResponse(t *testing.T) {
	h := newHostile(t)
	psn := h.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: h.mr.Addr, Length: 1500, LKey: h.mr.LKey}}, RemoteAddr: 0x1000, RKey: 0x1234}, wire.RCRDMAReadRequest)
	h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PSN: psn}, AETH: wire.AETHFields{MSN: 1}, Payload: make([]byte, 100)}, 0)
	h.check(t)
	var wc [1]verbs.WC
	if n := h.b.CQ.Poll(wc[:]); n != 0 {
		t.Fatalf("a 100-byte answer completed a 1500-byte READ: %+v", wc[0])
	}
	if h.nic.Counters().RcvdBadResponse.Load() != 1 {
		t.Errorf("bad responses counted: %d, want 1", h.nic.Counters().RcvdBadResponse.Load())
	}
	data := make([]byte, 1500)
	verbstest.Fill(data, 3)
	h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseFirst, PSN: psn}, AETH: wire.AETHFields{MSN: 0}, Payload: data[:1024]}, 0)
	h.exchange(t, &wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseLast, PSN: psn.Next()}, AETH: wire.AETHFields{MSN: 1}, Payload: data[1024:]}, 0)
	if c := verbstest.WaitWC(t, h.b.CQ); c.WRID != 1 || c.Status != verbs.WCSuccess || string(h.region[:1500]) != string(data) {
		t.Fatalf("after the right answer: %+v", c)
	}
}
