package verbs_test

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// TestForgedFramesOnLiveConnection runs WRITEs and READs between two NICs
// while an off-path attacker, who sees the traffic but cannot stop it,
// slips forged frames into both NICs: READ requests (and WRITEs) to the
// responder with stale, future and random PSNs and wrong or right keys,
// and NAKs, RNR NAKs, READ responses and atomic ACKs to the requester
// with PSNs outside its window. The connection must keep running, every
// work request must complete successfully and every byte must arrive.
// (A forged answer inside the requester's window of unacknowledged PSNs
// is indistinguishable from the peer's, on rxe as on any RoCE NIC; the
// random PSNs here avoid the 8192 around the live ones.)
func TestForgedFramesOnLiveConnection(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
	var reqPSN, ackPSN atomic.Uint32 // newest request PSN a sent, and answer PSN b sent
	var reqSeen atomic.Bool
	tapA := porttest.NewTap(pa, 256, func(f []byte, rx bool) {
		var p wire.Packet
		if rx || wire.ParseNoICRC(f, &p) != nil {
			return
		}
		reqPSN.Store(uint32(p.BTH().PSN()))
		reqSeen.Store(true)
	})
	tapB := porttest.NewTap(pb, 256, func(f []byte, rx bool) {
		var p wire.Packet
		if rx || wire.ParseNoICRC(f, &p) != nil {
			return
		}
		ackPSN.Store(uint32(p.BTH().PSN()))
	})
	macA, macB := wire.MAC{2, 0, 0, 0, 0, 1}, wire.MAC{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("10.47.0.1"), netip.MustParseAddr("10.47.0.2")
	const size = 4 << 20
	a := verbstest.NewEnd(t, tapA, macA, ipA, size)
	b := verbstest.NewEnd(t, tapB, macB, ipB, size)
	verbstest.Connect(t, a, b, 3, 14)

	// The attacker.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var forged atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(10, 11))
		buf := make([]byte, 9216)
		psnNear := func(live wire.PSN) wire.PSN {
			switch rng.IntN(3) {
			case 0:
				return live.Sub(5000) // stale
			case 1:
				return live.Add(5000) // future
			}
			for { // random, away from the live window
				p := wire.PSN(rng.Uint32()) & wire.PSNMask
				if d := p.Diff(live); d > 4096 || d < -4096 {
					return p
				}
			}
		}
		keys := []uint32{b.MR.RKey, b.MR.RKey ^ 1, 0, rng.Uint32()}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Microsecond):
			}
			if !reqSeen.Load() {
				continue
			}
			var f wire.FrameFields
			var to *porttest.Tap
			if rng.IntN(2) == 0 { // a request to the responder (b)
				to = tapB
				f.Ethernet = wire.EthernetFields{Dst: macB, Src: macA}
				f.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: ipA, Dst: ipB}
				f.BTH = wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PKey: wire.DefaultPKey, DestQP: b.QP.Num,
					PSN: psnNear(wire.PSN(reqPSN.Load())), AckReq: true}
				f.RETH = wire.RETHFields{VA: b.MR.Addr + uint64(rng.IntN(size)), RKey: keys[rng.IntN(len(keys))], DMALen: uint32(rng.IntN(8192))}
				if rng.IntN(4) == 0 {
					f.BTH.Opcode = wire.RCRDMAWriteOnly
					f.RETH = wire.RETHFields{VA: b.MR.Addr + size - 64, RKey: keys[rng.IntN(len(keys))], DMALen: 16}
					f.Payload = []byte("forged forged!!!")
				}
			} else { // an answer to the requester (a)
				to = tapA
				f.Ethernet = wire.EthernetFields{Dst: macA, Src: macB}
				f.IP4 = wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: ipB, Dst: ipA}
				f.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: a.QP.Num, PSN: psnNear(wire.PSN(reqPSN.Load()))}
				switch rng.IntN(6) {
				case 0:
					f.AETH.Syndrome = wire.NAKSyndrome(wire.NAKRemoteAccessError)
				case 1:
					f.AETH.Syndrome = wire.NAKSyndrome(wire.NAKInvalidRequest)
				case 2:
					f.AETH.Syndrome = wire.NAKSyndrome(wire.NAKPSNSequenceError)
				case 3:
					f.AETH.Syndrome = wire.RNRNAKSyndrome(uint8(rng.IntN(32)))
				case 4:
					f.BTH.Opcode = wire.RCRDMAReadResponseOnly
					f.Payload = make([]byte, 64)
				case 5:
					f.BTH.Opcode = wire.RCAtomicAcknowledge
					f.AtomicOrigData = rng.Uint64()
				}
				f.AETH.MSN = rng.Uint32() & 0xffffff
			}
			f.UDP = wire.UDPFields{SrcPort: 0xc000 | uint16(rng.IntN(0x4000)), DstPort: wire.RoCEv2Port}
			f.BTH.PSN &= wire.PSNMask
			k, err := wire.Encode(buf, &f)
			if err != nil {
				panic(err)
			}
			if to.Inject(buf[:k]) {
				forged.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// The traffic: WRITEs of a's first half into b's first half, READs of
	// b's second half into a's second half, 16 in flight.
	const msg = 64 << 10
	verbstest.Fill(a.Buf[:size/2], 1)
	verbstest.Fill(b.Buf[size/2:], 2)
	var wrs []verbs.SendWR
	for i := range size / 2 / msg {
		off := uint64(i * msg)
		wrs = append(wrs,
			verbs.SendWR{WRID: uint64(2 * i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: a.MR.Addr + off, Length: msg, LKey: a.MR.LKey}}, RemoteAddr: b.MR.Addr + off, RKey: b.MR.RKey},
			verbs.SendWR{WRID: uint64(2*i + 1), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: a.MR.Addr + size/2 + off, Length: msg, LKey: a.MR.LKey}}, RemoteAddr: b.MR.Addr + size/2 + off, RKey: b.MR.RKey})
	}
	// Rounds until the attacker has forged enough (and at least 3).
	for round := 0; round < 3 || forged.Load() < 1000 && round < 100; round++ {
		posted, done := 0, 0
		for done < len(wrs) {
			for posted < len(wrs) && posted-done < 16 {
				if _, err := a.QP.PostSend(wrs[posted : posted+1]); err != nil {
					t.Fatal(err)
				}
				posted++
			}
			wc := verbstest.WaitWC(t, a.CQ)
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(done) {
				t.Fatalf("round %d, completion %d: %+v (forged frames so far: %d)", round, done, wc, forged.Load())
			}
			done++
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	b.Dev.NIC().Command(func() {}) // b's writes, ordered before these reads
	if !bytes.Equal(b.Buf[:size/2], a.Buf[:size/2]) {
		t.Error("the WRITEs' bytes differ at the responder")
	}
	if !bytes.Equal(a.Buf[size/2:], b.Buf[size/2:]) {
		t.Error("the READs' bytes differ at the requester")
	}
	ca, cb := a.Counts, b.Counts
	t.Logf("forged %d frames; requester: rcvd_stale_response %d retransmits %d; responder: duplicate_request %d duplicate_dropped %d out_of_seq_request %d seq_nak_suppressed %d",
		forged.Load(), ca.RcvdStaleResponse.Load(), ca.Retransmits.Load(), cb.DuplicateRequest.Load(), cb.DuplicateDropped.Load(),
		cb.OutOfSeqRequest.Load(), cb.SeqNAKSuppressed.Load())
	if forged.Load() < 1000 || ca.RcvdStaleResponse.Load() == 0 || cb.DuplicateDropped.Load() == 0 || cb.OutOfSeqRequest.Load() == 0 {
		t.Error("the attack did not reach both NICs")
	}
	if a.QP.State() != verbs.QPSRTS || b.QP.State() != verbs.QPSRTS {
		t.Errorf("QP states %v and %v, want RTS", a.QP.State(), b.QP.State())
	}
}
