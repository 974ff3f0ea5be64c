package kernelrx_test

import (
	"bytes"
	"net/netip"
	"testing"

	"go.uber.org/goleak"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	nicIP   = netip.MustParseAddr("127.0.0.1")
	peerIP  = netip.MustParseAddr("127.0.0.2")
	nicMAC  = wire.MAC{2, 0, 0, 0, 0x4b, 1}
	peerMAC = wire.MAC{2, 0, 0, 0, 0x4b, 2}
)

// udQP makes a ready UD QP on e.
func udQP(t *testing.T, e *verbstest.End) *verbs.QP {
	t.Helper()
	qp, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.ReadyUD(qp, 0x4b4b); err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestDelivered (kernelrx.Receiver, opened by the device): a UD datagram sent to the NIC's address reaches the
// kernel's UDP stack (the NIC's own port, in-memory here, never sees it,
// as an XSK socket does not see what its XDP program missed), and the
// Receiver hands it to the NIC: the receive completes with the sender's
// bytes, counted in kernel_rx_frames. Loopback only: no root needed.
func TestDelivered(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 256})
	// The device opens the Receiver (DeviceConfig.KernelRx).
	nic := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: nicMAC, IP: nicIP, KernelRx: true}, Port: pa}, 1<<16)
	if !nic.Dev.KernelRx() {
		t.Skipf("cannot bind UDP port 4791 on %v (another RoCEv2 stack holds it?)", nicIP)
	}
	up, err := udpport.Open(udpport.Config{Local: peerIP, LocalMAC: peerMAC})
	if err != nil {
		t.Skipf("cannot bind UDP port 4791 on %v: %v", peerIP, err)
	}
	t.Cleanup(func() { up.Close() }) // registered first, so run after the device that uses it
	peer := verbstest.NewEnd(t, up, peerMAC, peerIP, 1<<16)

	qn, qp := udQP(t, nic), udQP(t, peer)
	const size = 500
	if _, err := qn.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: verbstest.SGL(nic, 0, 40+size)}}); err != nil {
		t.Fatal(err)
	}
	verbstest.Fill(peer.Buf[:size], 9)
	if _, err := qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: verbstest.SGL(peer, 0, size), AH: &verbs.AH{DestMAC: nicMAC, DestGID: nicIP}, RemoteQPN: qn.Num, RemoteQKey: 0x4b4b}}); err != nil {
		t.Fatal(err)
	}
	if wc := verbstest.WaitWC(t, peer.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	wc := verbstest.WaitWC(t, nic.CQ)
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 40+size || wc.SrcQP != qp.Num {
		t.Fatalf("receive completion %+v", wc)
	}
	if !bytes.Equal(nic.Buf[40:40+size], peer.Buf[:size]) {
		t.Error("the datagram's bytes differ")
	}
	c := nic.Dev.NIC().Counters()
	if c.KernelRxFrames.Load() != 1 || c.KernelRxDropped.Load() != 0 {
		t.Errorf("kernel_rx_frames %d, kernel_rx_dropped %d: want 1 and 0", c.KernelRxFrames.Load(), c.KernelRxDropped.Load())
	}
}

// TestDeliverRefused: a NIC opened without KernelRx has no room for what
// Deliver brings: refused and counted, never taken.
func TestDeliverRefused(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 64})
	nic := verbstest.NewEnd(t, pa, nicMAC, nicIP, 1<<12)
	n := nic.Dev.NIC()
	if n.Deliver(make([]byte, 100), true) {
		t.Fatal("Deliver took a frame on a NIC without KernelRx")
	}
	if c := n.Counters(); c.KernelRxFrames.Load() != 1 || c.KernelRxDropped.Load() != 1 {
		t.Errorf("kernel_rx_frames %d, kernel_rx_dropped %d: want 1 and 1", c.KernelRxFrames.Load(), c.KernelRxDropped.Load())
	}
}

// TestDeliverTap: NICConfig.DeliverTap sees every frame Deliver brings,
// taken or refused, before the NIC does (a capture's "kernel rx"
// interface: a frame the NIC had no room for is in the file too).
func TestDeliverTap(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 64})
	var seen [][]byte
	tap := func(f []byte) { seen = append(seen, append([]byte(nil), f...)) }
	nic := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: nicMAC, IP: nicIP, KernelRx: true, Poll: datapath.PollApp, DeliverTap: tap}, Port: pa, Driven: true}, 1<<12)
	n := nic.Dev.NIC()
	frame := make([]byte, 100)
	taken := 0
	for i := 0; i <= datapath.KernelRxBuffers; i++ { // one more than it holds
		frame[0], frame[1] = byte(i), byte(i>>8)
		if n.Deliver(frame, true) {
			taken++
		}
	}
	if taken != datapath.KernelRxBuffers || len(seen) != taken+1 {
		t.Fatalf("%d frames taken, %d seen by the tap: want %d and one more", taken, len(seen), datapath.KernelRxBuffers)
	}
	for i, f := range seen {
		if len(f) != len(frame) || int(f[0])|int(f[1])<<8 != i {
			t.Fatalf("the tap's frame %d is not the %dth delivered (%d bytes, first %v)", i, i, len(f), f[:2])
		}
	}
}

// TestDeliverHoldsAWindow: a NIC with KernelRx holds a window of frames
// that Deliver brings before its engine takes a turn (a peer that sends
// all its traffic through the kernel's stack), and refuses, counted, only
// what is beyond.
func TestDeliverHoldsAWindow(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 64})
	// Driven (PollApp): no goroutine runs the engine, only the
	// application's own calls, so none of the frames is taken before the
	// last is delivered.
	nic := verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: nicMAC, IP: nicIP, KernelRx: true, Poll: datapath.PollApp}, Port: pa, Driven: true}, 1<<12)
	n := nic.Dev.NIC()
	frame := make([]byte, 1100)
	// perftest's window by default: 128 messages of 4 KiB, 4 packets each
	// at an IB MTU of 1024 (a 1500-byte Ethernet MTU).
	const window = 128 * 4096 / 1024
	taken := 0
	for ; n.Deliver(frame, true); taken++ {
		if taken > 1<<16 {
			t.Fatal("Deliver never refuses")
		}
	}
	if taken < window || taken != datapath.KernelRxBuffers {
		t.Errorf("the NIC held %d frames before its engine's turn, want KernelRxBuffers (%d), a window (%d) at least", taken, datapath.KernelRxBuffers, window)
	}
	if c := n.Counters(); c.KernelRxFrames.Load() != uint64(taken)+1 || c.KernelRxDropped.Load() != 1 {
		t.Errorf("kernel_rx_frames %d, kernel_rx_dropped %d: want %d and 1", c.KernelRxFrames.Load(), c.KernelRxDropped.Load(), taken+1)
	}
}
