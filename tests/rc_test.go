package tests

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const bufSize = 20 << 20 // room for two 8 MiB messages and guards

// openPort opens a port of the given kind on veth0 of a namespace.
func openPort(t *testing.T, ns *topo.Namespace, end topo.End, kind string) datapath.Port {
	t.Helper()
	var p datapath.Port
	err := ns.Do(func() error {
		switch kind {
		case "xsk":
			d, err := xsk.Open(end.Name, xsk.Config{}, nil)
			if err != nil {
				return err
			}
			t.Cleanup(func() { d.Close() })
			p = d.Sockets()[0]
		case "udp":
			u, err := udpport.Open(udpport.Config{Local: end.Addrs[0].Addr(), LocalMAC: wire.MAC(end.MAC), Buffers: 8192})
			if err != nil {
				return err
			}
			t.Cleanup(func() { u.Close() })
			p = u
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// veth builds two NICs in two namespaces joined by a veth pair (MTU 1500,
// so the path MTU is 1024) and connects an RC QP between them.
func veth(t *testing.T, kind string) (*verbstest.End, *verbstest.End) {
	a, b := vethEnds(t, kind)
	verbstest.Connect(t, a, b, 3, 14)
	return a, b
}

// vethEnds builds the two NICs without connecting their QPs.
func vethEnds(t *testing.T, kind string) (*verbstest.End, *verbstest.End) {
	spec := topo.PairSpec(1500, 1)
	tp := topo.New(t, spec)
	l := spec.Links[0]
	pa := openPort(t, tp.NS("a"), l.A, kind)
	pb := openPort(t, tp.NS("b"), l.B, kind)
	a := verbstest.NewEnd(t, pa, wire.MAC(l.A.MAC), l.A.Addrs[0].Addr(), bufSize)
	b := verbstest.NewEnd(t, pb, wire.MAC(l.B.MAC), l.B.Addrs[0].Addr(), bufSize)
	return a, b
}

// guard is the pattern around every destination: it must survive.
const guard = 0xa5

func guarded(b []byte, off, size int) {
	for i := off - 64; i < off+size+64; i++ {
		b[i] = guard
	}
}

func checkGuards(t *testing.T, what string, b []byte, off, size int) {
	t.Helper()
	for i := off - 64; i < off; i++ {
		if b[i] != guard {
			t.Fatalf("%s: byte before the destination changed", what)
		}
	}
	for i := off + size; i < off+size+64; i++ {
		if b[i] != guard {
			t.Fatalf("%s: byte after the destination changed", what)
		}
	}
}

// TestRC runs every RC operation at the sizes a user would try, across a
// real veth pair, with both the AF_XDP port and the kernel-UDP port, and
// checks every byte, the guard bytes around every destination, immediate
// data and the completions.
func TestRC(t *testing.T) {
	const pmtu = 1024
	sizes := []int{0, 1, pmtu - 1, pmtu, pmtu + 1, 64 << 10, 1 << 20, 8 << 20}
	for _, kind := range []string{"xsk", "udp"} {
		t.Run(kind, func(t *testing.T) {
			a, b := veth(t, kind)
			const src, dst = 4096, 10 << 20
			for i, size := range sizes {
				verbstest.Fill(a.Buf[src:src+size], uint64(i))
				for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead} {
					name := fmt.Sprintf("%s op %d size %d", kind, op, size)
					guarded(b.Buf, dst, size)
					wr := verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, src, size),
						Imm: 0x1234 + uint32(i), RemoteAddr: b.MR.Addr + dst, RKey: b.MR.RKey}
					wantRecv := op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRSendWithInv || op == verbs.WRRDMAWriteWithImm
					if wantRecv {
						if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 77, SGL: verbstest.SGL(b, dst, size)}}); err != nil {
							t.Fatal(err)
						}
					}
					if op == verbs.WRRDMARead { // read b's destination (holding the last write) into a
						copy(b.Buf[dst:dst+size], a.Buf[src:src+size])
						guarded(a.Buf, dst, size)
						wr.SGL = verbstest.SGL(a, dst, size)
					}
					b.Dev.Fence() // hand b's memory over to b's NIC
					if _, err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
						t.Fatal(err)
					}
					if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
						t.Fatalf("%s: requester completion %+v", name, wc)
					}
					if wantRecv {
						wc := verbstest.WaitWC(t, b.CQ)
						if wc.Status != verbs.WCSuccess || wc.WRID != 77 {
							t.Fatalf("%s: responder completion %+v", name, wc)
						}
						flag := verbs.WCWithImm
						if op == verbs.WRSendWithInv {
							flag = verbs.WCWithInv // the R_Key to invalidate, delivered
						}
						if op != verbs.WRSend && (wc.Flags&flag == 0 || wc.Imm != 0x1234+uint32(i)) {
							t.Fatalf("%s: immediate data or invalidated R_Key %+v", name, wc)
						}
					}
					b.Dev.Fence() // b's NIC wrote b's memory
					got, gb := b.Buf[dst:dst+size], b.Buf
					if op == verbs.WRRDMARead {
						got, gb = a.Buf[dst:dst+size], a.Buf
					}
					if !bytes.Equal(got, a.Buf[src:src+size]) {
						t.Fatalf("%s: data differs", name)
					}
					checkGuards(t, name, gb, dst, size)
				}
			}
			t.Logf("%s: a sent %d packets, retransmitted %d times; b received %d, duplicates %d, out of sequence %d",
				kind, a.Counts.SentPkts.Load(), a.Counts.Retransmits.Load(), b.Counts.RcvdPkts.Load(),
				b.Counts.DuplicateRequest.Load(), b.Counts.OutOfSeqRequest.Load())
		})
	}
}

// TestScenarios runs the atomics (8 QPs on one counter), SRQ, UC and UD
// scenarios across the veth pair with each port.
func TestScenarios(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, *verbstest.End, *verbstest.End)
	}{{"atomics", verbstest.Atomics}, {"SRQ", verbstest.SRQ}, {"UC", verbstest.UC}, {"UD", verbstest.UD}}
	for _, kind := range []string{"xsk", "udp"} {
		for _, s := range scenarios {
			t.Run(kind+"/"+s.name, func(t *testing.T) {
				a, b := vethEnds(t, kind)
				s.run(t, a, b)
			})
		}
	}
}

// TestMultiQueue runs the atomics and SRQ scenarios, and a 1 MiB SEND,
// WRITE and READ on each of 4 QPs, between two NICs whose veth has two
// queues, with one AF_XDP socket and one engine per queue. a's QP numbers
// are one ahead of b's, so frames arrive on a queue whose engine does not
// own their QP and are handed over.
func TestMultiQueue(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, *verbstest.End, *verbstest.End)
	}{{"atomics", verbstest.Atomics}, {"SRQ", verbstest.SRQ}, {"RC", multiQP}}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			spec := topo.PairSpec(1500, 2)
			tp := topo.New(t, spec)
			l := spec.Links[0]
			a := verbstest.NewEndQueues(t, openQueues(t, tp.NS("a"), l.A), wire.MAC(l.A.MAC), l.A.Addrs[0].Addr(), bufSize, 1)
			b := verbstest.NewEndQueues(t, openQueues(t, tp.NS("b"), l.B), wire.MAC(l.B.MAC), l.B.Addrs[0].Addr(), bufSize, 0)
			s.run(t, a, b)
			// The scenario waits for its data, not for every ACK (the
			// senders' work requests are unsignalled): those come within
			// moments.
			busy := func(e *verbstest.End) bool {
				for _, st := range e.Dev.NIC().Engines() {
					if st.RxFrames.Load()+st.HandoffIn.Load() == 0 {
						return false
					}
				}
				return e.Counts.HandedOff.Load() > 0
			}
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && !(busy(a) && busy(b)); {
				time.Sleep(5 * time.Millisecond)
			}
			for side, e := range map[string]*verbstest.End{"a": a, "b": b} {
				engines := e.Dev.NIC().Engines()
				if len(engines) != 2 {
					t.Fatalf("%s: %d engines, want 2", side, len(engines))
				}
				for q, st := range engines {
					t.Logf("%s queue %d: rx %d, handed in %d, out %d", side, q, st.RxFrames.Load(), st.HandoffIn.Load(), st.HandoffOut.Load())
					if st.RxFrames.Load()+st.HandoffIn.Load() == 0 {
						t.Errorf("%s: engine %d had no work", side, q)
					}
				}
				if e.Counts.HandedOff.Load() == 0 {
					t.Errorf("%s: no frame was handed to its QP's engine", side)
				}
			}
		})
	}
}

// openQueues opens an AF_XDP socket on every queue of a namespace's veth.
func openQueues(t *testing.T, ns *topo.Namespace, end topo.End) []datapath.Port {
	t.Helper()
	var ports []datapath.Port
	err := ns.Do(func() error {
		d, err := xsk.Open(end.Name, xsk.Config{}, nil)
		if err != nil {
			return err
		}
		t.Cleanup(func() { d.Close() })
		for _, s := range d.Sockets() {
			ports = append(ports, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// multiQP connects 4 QP pairs and moves 1 MiB each way on every one at
// once: a SEND, a WRITE and a READ, verified byte for byte.
func multiQP(t *testing.T, a, b *verbstest.End) {
	const qps, size = 4, 1 << 20
	var pairs [][2]*verbs.QP
	for i := range qps {
		qa, qb := a.QP, b.QP
		if i > 0 {
			qa, _ = a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			qb, _ = b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		}
		if err := verbs.ConnectRC(qa, qb, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, 3, 14); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, [2]*verbs.QP{qa, qb})
	}
	// a's buffer: sources at i*size; b's: SEND targets at i*size, WRITE
	// targets at (4+i)*size; READs come back to a at (8+i)*size.
	verbstest.Fill(a.Buf[:qps*size], 5)
	verbstest.Fill(b.Buf[12*size:16*size], 6)
	for i, p := range pairs {
		if _, err := p[1].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(b, i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range pairs {
		wrs := []verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, i*size, size)},
			{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, i*size, size), RemoteAddr: b.MR.Addr + uint64((4+i)*size), RKey: b.MR.RKey},
			{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, (8+i)*size, size), RemoteAddr: b.MR.Addr + uint64((12+i)*size), RKey: b.MR.RKey},
		}
		if _, err := p[0].PostSend(wrs); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 * qps {
		if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("requester completion %+v", wc)
		}
	}
	for range qps {
		if wc := verbstest.WaitWC(t, b.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != size {
			t.Fatalf("receive completion %+v", wc)
		}
	}
	b.Dev.Fence()
	for i := range qps {
		src := a.Buf[i*size : (i+1)*size]
		if !bytes.Equal(b.Buf[i*size:(i+1)*size], src) || !bytes.Equal(b.Buf[(4+i)*size:(5+i)*size], src) {
			t.Fatalf("QP %d: SEND or WRITE data differs", i)
		}
		if !bytes.Equal(a.Buf[(8+i)*size:(9+i)*size], b.Buf[(12+i)*size:(13+i)*size]) {
			t.Fatalf("QP %d: READ data differs", i)
		}
	}
}
