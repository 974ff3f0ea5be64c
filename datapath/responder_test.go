package datapath

import (
	"bytes"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// respTest is a responder under test: an RC QP expecting PSN 0 with a
// region the peer may write, read and use atomically, and one it may
// only write; a receive WQE is posted when the case asks for one.
type respTest struct {
	*harness
	q           hostmem.QPCEntry
	rkey, roKey uint32 // the region's key; the write-only region's
	va, roVA    uint64
	ring        uint64 // CQ 0's
	recvBuf     []byte // what receive WQEs name
	recvKey     uint32
	recvVA      uint64
	postedRecvs uint32
}

const respQP, respPeer = 17, 200

func newRespTest(t *testing.T) *respTest {
	h := newHarness(t)
	rt := &respTest{harness: h, ring: h.cq(0, 64)}
	rt.q = h.rcQP(respQP, respPeer, 0, 0, 8)
	rt.rkey, rt.va = h.mr(make([]byte, 8192), ibv.AccessRemoteWrite|ibv.AccessRemoteRead|ibv.AccessRemoteAtomic|ibv.AccessLocalWrite)
	rt.roKey, rt.roVA = h.mr(make([]byte, 4096), ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
	rt.recvBuf = make([]byte, 64)
	rt.recvKey, rt.recvVA = h.mr(rt.recvBuf, ibv.AccessLocalWrite)
	return rt
}

func (rt *respTest) recv(wrid uint64, n uint32) {
	w := hostmem.RecvWQE{WRID: wrid, NumSGE: 1, SGE: [hostmem.MaxRecvSGE]hostmem.SGE{{Addr: rt.recvVA, Length: n, LKey: rt.recvKey}}}
	rt.postRecv(respQP, &rt.q, rt.postedRecvs, w)
	rt.postedRecvs++
}

// counters takes the NIC's counters by name.
func (rt *respTest) counters() map[string]uint64 {
	m := map[string]uint64{}
	rt.nic.counters.Each(func(name string, v uint64) { m[name] = v })
	return m
}

// settle lets every fetch and host write complete.
func (rt *respTest) settle() {
	rt.t.Helper()
	for range 8 {
		rt.after(pcieLatency)
	}
}

func bth(op wire.Opcode, psn wire.PSN) wire.BTHFields {
	return wire.BTHFields{Opcode: op, DestQP: respQP, AckReq: true, PSN: psn}
}

// Each named check of the responder, by the request that fails it (or
// passes every one): the answer on the wire, the counter that moves, and
// that the QP goes on: the next request in sequence (a WRITE_ONLY of
// "next" at the PSN the answer expects) is executed and acknowledged.
func TestResponderChecks(t *testing.T) {
	const nak, rnr = true, true
	for _, tc := range []struct {
		name    string
		recv    bool                        // post a receive WQE of 8 bytes first
		send    func(rt *respTest)          // the requests, after a WRITE_ONLY at PSN 0 was executed
		want    []reply                     // the NIC's answers to them
		counter string                      // the counter that moves ("" for none)
		moves   uint64                      // by how much (0: by one)
		next    wire.PSN                    // the PSN the QP expects afterwards
		check   func(*testing.T, *respTest) // what else holds
	}{
		{name: "execute and acknowledge", send: func(rt *respTest) {
			rt.write(respQP, 1, rt.rkey, rt.va+10, []byte("data"))
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1}}, next: 2,
			check: func(t *testing.T, rt *respTest) {
				if got := rt.read(rt.va+10, 4); !bytes.Equal(got, []byte("data")) {
					t.Errorf("placed %q", got)
				}
			}},
		{name: "acknowledge only when asked", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, DestQP: respQP, PSN: 1},
				RETH: wire.RETHFields{VA: rt.va, RKey: rt.rkey, DMALen: 2}, Payload: []byte("ok")})
		}, next: 2},
		{name: "QP not ready", send: func(rt *respTest) {
			q := rt.q
			q.State = ibv.QPSInit
			var b [128]byte
			q.Encode(b[:])
			rt.hostWrite(hostmem.QPC, respQP, b[:])
			rt.write(respQP, 1, rt.rkey, rt.va, []byte("x"))
			q.State = ibv.QPSRTS
			q.Encode(b[:])
			rt.turns()
			rt.hostWrite(hostmem.QPC, respQP, b[:])
		}, counter: "rcvd_unknown_qp", next: 1},
		{name: "transport not the QP's", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.UCRDMAWriteOnly, DestQP: respQP, PSN: 1},
				RETH: wire.RETHFields{VA: rt.va, RKey: rt.rkey, DMALen: 1}, Payload: []byte("x")})
		}, counter: "rcvd_wrong_transport", next: 1},
		{name: "address not the peer's", send: func(rt *respTest) {
			rt.requestFrom(netip.MustParseAddr("10.9.0.66"), wire.FrameFields{BTH: bth(wire.RCRDMAWriteOnly, 1),
				RETH: wire.RETHFields{VA: rt.va + 100, RKey: rt.rkey, DMALen: 6}, Payload: []byte("forged")})
			rt.requestFrom(netip.MustParseAddr("10.9.0.66"), wire.FrameFields{BTH: wire.BTHFields{Opcode: wire.CNP, DestQP: respQP, BECN: true}})
		}, counter: "rcvd_bad_addr", moves: 2, next: 1,
			check: func(t *testing.T, rt *respTest) {
				if got := rt.read(rt.va+100, 6); bytes.Equal(got, []byte("forged")) {
					t.Error("a forged WRITE was placed")
				}
				if n := rt.nic.counters.RPCNPHandled.Load(); n != 0 {
					t.Errorf("a forged CNP was handled (rp_cnp_handled %d)", n)
				}
			}},
		{name: "PSN duplicate", send: func(rt *respTest) {
			rt.write(respQP, 0, rt.rkey, rt.va, []byte("again"))
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 0}}, counter: "duplicate_request", next: 1,
			check: func(t *testing.T, rt *respTest) {
				if got := rt.read(rt.va, 5); bytes.Equal(got, []byte("again")) {
					t.Error("a duplicate WRITE was placed again")
				}
			}},
		{name: "PSN ahead", send: func(rt *respTest) {
			rt.write(respQP, 5, rt.rkey, rt.va, []byte("ahead"))
		}, // the NAK goes behind an ACK of what came in order (rxe heeds it during a retry only so)
			want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 0}, {qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKPSNSequenceError}}, counter: "out_of_seq_request", next: 1},
		{name: "opcode sequence: MIDDLE without FIRST", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAWriteMiddle, 1), Payload: make([]byte, 1024)})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKInvalidRequest}}, counter: "rcvd_op_seq_err", next: 1},
		{name: "opcode sequence: SEND inside a WRITE", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAWriteFirst, 1), RETH: wire.RETHFields{VA: rt.va, RKey: rt.rkey, DMALen: 2048}, Payload: make([]byte, 1024)})
			rt.request(wire.FrameFields{BTH: bth(wire.RCSendLast, 2), Payload: []byte("x")})
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAWriteLast, 2), Payload: make([]byte, 1024)})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1}, {qpn: respPeer, op: wire.RCAcknowledge, psn: 2, nak: nak, code: wire.NAKInvalidRequest},
			{qpn: respPeer, op: wire.RCAcknowledge, psn: 2}}, counter: "rcvd_op_seq_err", next: 3},
		{name: "length: more than the path MTU", send: func(rt *respTest) {
			rt.write(respQP, 1, rt.rkey, rt.va, make([]byte, 1025))
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKInvalidRequest}}, counter: "rcvd_length_err", next: 1},
		{name: "length: not the RETH's", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAWriteOnly, 1), RETH: wire.RETHFields{VA: rt.va, RKey: rt.rkey, DMALen: 9}, Payload: []byte("short")})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKInvalidRequest}}, counter: "rcvd_length_err", next: 1},
		{name: "key: wrong key byte", send: func(rt *respTest) {
			rt.write(respQP, 1, rt.rkey^0xff, rt.va, []byte("x"))
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKRemoteAccessError}}, counter: "rcvd_rkey_err", next: 1},
		{name: "key: beyond the region", send: func(rt *respTest) {
			rt.write(respQP, 1, rt.rkey, rt.va+8190, []byte("xyz"))
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKRemoteAccessError}}, counter: "rcvd_rkey_err", next: 1},
		{name: "key: READ of a write-only region", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAReadRequest, 1), RETH: wire.RETHFields{VA: rt.roVA, RKey: rt.roKey, DMALen: 8}})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKRemoteAccessError}}, counter: "rcvd_rkey_err", next: 1},
		{name: "key: misaligned atomic", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCFetchAdd, 1), AtomicETH: wire.AtomicETHFields{VA: rt.va + 4, RKey: rt.rkey, SwapAdd: 1}})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, nak: nak, code: wire.NAKInvalidRequest}}, counter: "rcvd_misaligned_atomic", next: 1},
		{name: "resources: SEND without a receive WQE", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, 1), Payload: []byte("hello")})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1, rnr: rnr, code: 1}}, counter: "send_rnr_err", next: 1},
		{name: "execute: SEND into its receive WQE", recv: true, send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, 1), Payload: []byte("hello")})
		}, want: []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: 1}}, counter: "rdma_recvs", next: 2,
			check: func(t *testing.T, rt *respTest) {
				cqes := rt.cqes(rt.ring, 64)
				if len(cqes) != 1 || cqes[0].Status != ibv.WCSuccess || cqes[0].Opcode != ibv.WCRecv || cqes[0].ByteLen != 5 || cqes[0].WRID != 1 {
					t.Errorf("CQEs %+v, want one successful receive of 5 bytes", cqes)
				}
				if !bytes.Equal(rt.recvBuf[:5], []byte("hello")) {
					t.Errorf("received %q", rt.recvBuf[:5])
				}
			}},
		{name: "execute: atomic fetch and add", send: func(rt *respTest) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCFetchAdd, 1), AtomicETH: wire.AtomicETHFields{VA: rt.va + 8, RKey: rt.rkey, SwapAdd: 5}})
		}, want: []reply{{qpn: respPeer, op: wire.RCAtomicAcknowledge, psn: 1}}, next: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRespTest(t)
			if tc.recv {
				rt.recv(1, 8)
			}
			warmUp(rt.harness, rt.rkey, rt.va, respQP) // PSN 0, so that every context is cached
			before := rt.counters()
			tc.send(rt)
			rt.settle()
			if got := rt.replies(); !slices.Equal(got, tc.want) {
				t.Errorf("answers %+v, want %+v", got, tc.want)
			}
			after := rt.counters()
			if tc.moves == 0 {
				tc.moves = 1
			}
			if tc.counter != "" && after[tc.counter] != before[tc.counter]+tc.moves {
				t.Errorf("%s moved by %d, want %d", tc.counter, after[tc.counter]-before[tc.counter], tc.moves)
			}
			for name, v := range after {
				switch name {
				case tc.counter, "rcvd_pkts", "sent_pkts", "duplicate_request", "rdma_recvs":
					continue
				}
				if len(name) > 12 && name[:12] == "ctx_lookups_" || len(name) > 7 && name[:7] == "replay_" {
					continue
				}
				if v != before[name] && (name[:5] == "rcvd_" || name == "send_rnr_err" || name == "out_of_seq_request") {
					t.Errorf("%s moved by %d as well", name, v-before[name])
				}
			}
			if tc.check != nil {
				tc.check(t, rt)
			}
			// The QP goes on: the request in sequence is executed.
			rt.write(respQP, tc.next, rt.rkey, rt.va+100, []byte("next"))
			rt.settle()
			want := []reply{{qpn: respPeer, op: wire.RCAcknowledge, psn: tc.next}}
			if got := rt.replies(); !slices.Equal(got, want) {
				t.Errorf("the next request in sequence (PSN %d) got %+v, want %+v", tc.next, got, want)
			}
			if got := rt.read(rt.va+100, 4); !bytes.Equal(got, []byte("next")) {
				t.Errorf("the next request placed %q", got)
			}
			if w := rt.nic.counters.CtxWaits.Load(); w != 0 {
				t.Errorf("ctx_waits %d", w)
			}
		})
	}
}

// ACKs carry end-to-end credits where the responder counts them (a
// receive queue in use: the WQEs posted and not yet taken) and the
// invalid code 0x1f otherwise, as rxe sends, never "no credits" for a QP
// that only takes WRITEs.
func TestACKCredits(t *testing.T) {
	rt := newRespTest(t)
	credits := func() uint8 {
		t.Helper()
		rt.settle()
		for _, f := range rt.port.tx {
			var p wire.Packet
			if err := wire.Parse(f, &p); err == nil && p.Opcode == wire.RCAcknowledge {
				rt.port.tx = rt.port.tx[:0]
				return p.AETH().Syndrome().Value()
			}
		}
		t.Fatal("no ACK")
		return 0
	}
	rt.write(respQP, 0, rt.rkey, rt.va, []byte("w"))
	if c := credits(); c != wire.CreditsInvalid {
		t.Errorf("a QP without receives posted: credit code %#x, want %#x", c, wire.CreditsInvalid)
	}
	rt.recv(1, 8)
	rt.recv(2, 8)
	rt.write(respQP, 1, rt.rkey, rt.va, []byte("w"))
	if c, want := credits(), wire.CreditCode(2); c != want {
		t.Errorf("two receives posted: credit code %#x, want %#x", c, want)
	}
	rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, 2), Payload: []byte("s")})
	if c, want := credits(), wire.CreditCode(1); c != want {
		t.Errorf("one receive left: credit code %#x, want %#x", c, want)
	}
}

// A CQE whose CQ's context misses holds the later CQEs of its QP on the
// QP's other CQ behind it, so that the host hears of the QP's
// completions in the order the engine made them (a program waiting on
// one channel for both CQs polls the CQ whose event came first); another
// QP's CQE on a third CQ goes at once.
func TestCQEOrderPerQP(t *testing.T) {
	var mu sync.Mutex
	var notices []uint32 // the CQs the host is told of, in order
	h := newHarnessOn(t, &testPort{}, func(c *NICConfig) {
		c.Notify = func(cqn uint32) { mu.Lock(); notices = append(notices, cqn); mu.Unlock() }
	})
	rings := []uint64{h.cq(0, 16), h.cq(1, 16), h.cq(2, 16)}
	e := h.nic.engines[0]
	complete := func(cqn, qpn uint32, wrid uint64) {
		h.nic.Command(func() { e.complete(cqn, &hostmem.CQE{QPN: qpn, WRID: wrid}) })
	}
	wrids := func(cqn int) []uint64 {
		var out []uint64
		for _, c := range h.cqes(rings[cqn], 16) {
			out = append(out, c.WRID)
		}
		return out
	}
	for cqn := range uint32(3) { // every CQ's context cached
		complete(cqn, 5, 100+uint64(cqn))
	}
	for range 4 {
		h.after(pcieLatency)
	}
	mu.Lock()
	notices = nil
	mu.Unlock()
	h.nic.Cache(hostmem.CQC).Invalidate(0)
	held := h.nic.counters.CQEsHeld.Load()
	complete(0, 5, 1) // a send completion: its CQ's context misses
	complete(1, 5, 2) // the same QP's receive completion after it
	complete(2, 6, 3) // another QP's
	h.turns()
	if got := h.nic.counters.CQEsHeld.Load() - held; got != 2 {
		t.Errorf("cqes_held went up by %d, want 2: QP 5's send completion and its receive completion behind it", got)
	}
	for range 4 {
		h.after(pcieLatency)
	}
	mu.Lock()
	got := slices.Clone(notices)
	mu.Unlock()
	if want := []uint32{2, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("the host was told of CQs %v, want %v: QP 6's at once, QP 5's in the order made", got, want)
	}
	for cqn, want := range [][]uint64{{100, 1}, {101, 2}, {102, 3}} {
		if got := wrids(cqn); !slices.Equal(got, want) {
			t.Errorf("CQ %d holds %v, want %v", cqn, got, want)
		}
	}
}
