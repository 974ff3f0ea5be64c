package xsk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestMain(m *testing.M) {
	if os.Getenv("XSK_HELPER") != "" {
		helperProcess()
		return
	}
	goleak.VerifyTestMain(m)
}

// open opens the device on veth0 of a namespace and closes it when the test
// ends.
func open(t *testing.T, ns *topo.Namespace) *xsk.Device {
	t.Helper()
	var d *xsk.Device
	if err := ns.Do(func() (err error) { d, err = xsk.Open("veth0", xsk.Config{}, t.Logf); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openPair opens a device of cfg on each end of a new veth pair (MTU
// 1500) and returns their sockets, a's and b's.
func openPair(t *testing.T, cfg xsk.Config) (sa, sb *xsk.Socket) {
	t.Helper()
	tp := topo.Pair(t, 1500, 1)
	var devs [2]*xsk.Device
	for i, ns := range []string{"a", "b"} {
		if err := tp.NS(ns).Do(func() (err error) { devs[i], err = xsk.Open("veth0", cfg, nil); return }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	return devs[0].Sockets()[0], devs[1].Sockets()[0]
}

// frameFrom builds a RoCEv2 frame from one end of the pair to the other.
func frameFrom(fromA bool, op wire.Opcode, payload int, seq uint32) []byte {
	f := wiretest.SampleFields(op, payload, false, seq)
	if !fromA {
		f.Ethernet.Src, f.Ethernet.Dst = f.Ethernet.Dst, f.Ethernet.Src
		f.IP4.Src, f.IP4.Dst = f.IP4.Dst, f.IP4.Src
	}
	n, _ := f.FrameLen()
	b := make([]byte, n)
	wire.Encode(b, &f)
	return b
}

func transmit(t *testing.T, p datapath.Port, frames [][]byte) { porttest.SendAll(t, p, frames) }

func receive(t *testing.T, p datapath.Port, want int) [][]byte {
	var got [][]byte
	for _, r := range porttest.ReceiveN(t, p, want) {
		got = append(got, r.Data)
	}
	return got
}

func settle(t *testing.T, socks ...*xsk.Socket) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, s := range socks {
		for s.InFlight() > 0 && time.Now().Before(deadline) {
			s.Flush()
			time.Sleep(time.Millisecond)
		}
		if err := s.Accounting(); err != nil {
			t.Error(err)
		}
	}
}

// TestFramesBothWays sends frames of every size up to a 4096-byte IB MTU
// (netdev MTU 9000, so the largest take two UMEM chunks) both ways across a
// veth pair and checks each arrives intact, in order, and that no UMEM
// buffer is lost.
func TestFramesBothWays(t *testing.T) {
	tp := topo.Pair(t, 9000, 1)
	da, db := open(t, tp.NS("a")), open(t, tp.NS("b"))
	sa, sb := da.Sockets()[0], db.Sockets()[0]
	if !sa.MultiBuffer() {
		t.Fatal("no multi-buffer support: a 4096-byte IB MTU does not fit")
	}
	t.Logf("zero-copy %v, multi-buffer %v, max frame %d, XDP %v", sa.ZeroCopy(), sa.MultiBuffer(), sa.MaxFrameLen(), da.Program().Mode())
	sizes := []int{0, 1, 2, 3, 63, 64, 255, 1023, 1024, 2048, 3000, 4000, 4020, 4030, 4046, 4047, 4096}
	for _, dir := range []struct {
		name     string
		from, to *xsk.Socket
		fromA    bool
	}{{"a->b", sa, sb, true}, {"b->a", sb, sa, false}} {
		var frames [][]byte
		for i, size := range sizes {
			frames = append(frames, frameFrom(dir.fromA, wire.RCRDMAWriteOnly, size, uint32(i)))
		}
		transmit(t, dir.from, frames)
		got := receive(t, dir.to, len(frames))
		if len(got) != len(frames) {
			t.Fatalf("%s: %d of %d frames arrived", dir.name, len(got), len(frames))
		}
		for i := range frames {
			if !bytes.Equal(got[i], frames[i]) {
				t.Errorf("%s: frame %d (%d bytes) differs", dir.name, i, len(frames[i]))
			}
			var p wire.Packet
			if err := wire.Parse(got[i], &p); err != nil {
				t.Errorf("%s: frame %d: %v", dir.name, i, err)
			}
		}
	}
	settle(t, sa, sb)
	if s := sb.Stats(); s.RxFrames.Load() != uint64(len(sizes)) || s.RxDropKernel.Load() != 0 {
		t.Errorf("b: rx %d, kernel drops %d", s.RxFrames.Load(), s.RxDropKernel.Load())
	}
	if st, err := db.Program().Stats(); err != nil || st.Redirected < uint64(len(sizes)) {
		t.Errorf("XDP program counters %+v, %v", st, err)
	}
}

// TestManyFrames pushes more frames than the rings hold, in batches, to
// exercise ring wrap-around and buffer recycling.
func TestManyFrames(t *testing.T) {
	sa, sb := openPair(t, xsk.Config{RxChunks: 64, TxSlots: 32, RingSize: 64})
	total := 0
	for round := range 40 {
		var frames [][]byte
		for i := range 16 {
			frames = append(frames, frameFrom(true, wire.RCSendOnly, 100+i, uint32(round*16+i)))
		}
		transmit(t, sa, frames)
		got := receive(t, sb, len(frames))
		total += len(got)
		for i := range got {
			if !bytes.Equal(got[i], frames[i]) {
				t.Fatalf("round %d frame %d differs", round, i)
			}
		}
	}
	if total != 640 {
		t.Errorf("%d of 640 frames", total)
	}
	settle(t, sa, sb)
}

// TestKernelTrafficUntouched: with sockets bound on both ends, TCP and
// other UDP traffic across the same veth still reach the kernel.
func TestKernelTrafficUntouched(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	open(t, tp.NS("a"))
	open(t, tp.NS("b"))
	var ln net.Listener
	if err := tp.NS("b").Do(func() (err error) { ln, err = net.Listen("tcp", "10.47.0.2:18515"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	var c net.Conn
	if err := tp.NS("a").Do(func() (err error) { c, err = net.DialTimeout("tcp", "10.47.0.2:18515", 5*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("softrnic"), 10000)
	go c.Write(msg)
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("TCP echo across the veth: %v", err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// rawSend sends raw Ethernet frames from veth0 of a namespace.
func rawSend(t *testing.T, ns *topo.Namespace, frames ...[]byte) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("veth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: frames the XDP program steers to the socket but that are
// not whole, well-formed RoCEv2 frames, and frames too long for the UMEM,
// are counted and dropped, never passed up.
func TestBadInput(t *testing.T) {
	tp := topo.Pair(t, 9000, 1)
	db := open(t, tp.NS("b"))
	sb := db.Sockets()[0]
	good := frameFrom(true, wire.RCSendOnly, 64, 1)

	// A runt: Ethernet, IPv4 and UDP to 4791, no room for a BTH.
	runt := append([]byte{}, good[:wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen]...)
	binary.BigEndian.PutUint16(runt[wire.EthernetLen+2:], wire.IPv4MinLen+wire.UDPLen)
	binary.BigEndian.PutUint16(runt[wire.EthernetLen+wire.IPv4MinLen+4:], wire.UDPLen)
	ip := wire.IPv4(runt[wire.EthernetLen:])
	ip.SetChecksum(ip.ComputeChecksum())
	// Not RoCE: an IPv4 EtherType with IP version 5.
	notIP := append([]byte{}, good...)
	notIP[wire.EthernetLen] = 0x55
	// Malformed: a reserved opcode.
	badOp := append([]byte{}, good...)
	badOp[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen] = 0x15
	// Cut short: the frame ends inside the BTH, its IP and UDP lengths
	// the whole frame's.
	cut := append([]byte{}, good[:wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen+6]...)
	// A fragment: the first of an IPv4 datagram to 4791 (MF set).
	frag := append([]byte{}, good...)
	frag[wire.EthernetLen+6] |= 0x20
	fip := wire.IPv4(frag[wire.EthernetLen:])
	fip.SetChecksum(fip.ComputeChecksum())
	rawSend(t, tp.NS("a"), runt, notIP, badOp, cut, frag, good)

	// Too long: a 9000-byte UDP datagram to port 4791 spans three chunks.
	var c *net.UDPConn
	if err := tp.NS("a").Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.47.0.2:4791")))
		return
	}); err != nil {
		t.Fatal(err)
	}
	c.Write(make([]byte, 8900))
	c.Close()
	rawSend(t, tp.NS("a"), good)

	got := receive(t, sb, 2)
	if len(got) != 2 || !bytes.Equal(got[0], good) || !bytes.Equal(got[1], good) {
		t.Fatalf("passed up %d frames, want the 2 good ones", len(got))
	}
	s := sb.Stats()
	if s.RxDropRunt.Load() != 2 || s.RxDropNotRoCE.Load() != 1 || s.RxDropMalformed.Load() != 1 || s.RxDropTooLong.Load() != 1 || s.RxDropFragment.Load() != 1 {
		t.Errorf("drops: runt %d (want 2), not RoCE %d, malformed %d, too long %d, fragment %d (want 1 each)",
			s.RxDropRunt.Load(), s.RxDropNotRoCE.Load(), s.RxDropMalformed.Load(), s.RxDropTooLong.Load(), s.RxDropFragment.Load())
	}
	settle(t, sb)
}

// TestMultiQueue: on a two-queue veth, Open binds a socket per queue and a
// frame sent on queue q of one end arrives on queue q of the other.
func TestMultiQueue(t *testing.T) {
	tp := topo.Pair(t, 1500, 2)
	da, db := open(t, tp.NS("a")), open(t, tp.NS("b"))
	if len(da.Sockets()) != 2 || len(db.Sockets()) != 2 {
		t.Fatalf("%d and %d sockets, want 2 each", len(da.Sockets()), len(db.Sockets()))
	}
	for q := range 2 {
		f := frameFrom(true, wire.RCSendOnly, 32, uint32(q))
		transmit(t, da.Sockets()[q], [][]byte{f})
		got := receive(t, db.Sockets()[q], 1)
		if len(got) != 1 || !bytes.Equal(got[0], f) {
			t.Errorf("queue %d: got %d frames", q, len(got))
		}
	}
	settle(t, append(da.Sockets(), db.Sockets()...)...)
}

func xdpAttached(t *testing.T, ns *topo.Namespace) bool {
	t.Helper()
	l, err := ns.Link("veth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
}

// TestCloseAndKill: closing the device, or killing the process that holds
// it, leaves no XDP program attached and no socket bound, and the interface
// can be opened again.
func TestCloseAndKill(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	b := tp.NS("b")
	for range 2 {
		var d *xsk.Device
		if err := b.Do(func() (err error) { d, err = xsk.Open("veth0", xsk.Config{}, nil); return }); err != nil {
			t.Fatal(err)
		}
		if !xdpAttached(t, b) {
			t.Fatal("no XDP program while open")
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if xdpAttached(t, b) {
			t.Fatal("XDP program left attached after Close")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := b.Command(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "XSK_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q, %v", line, err)
	}
	if !xdpAttached(t, b) {
		t.Error("no XDP program while the helper holds the device")
	}
	// ip netns exec runs the helper in place (exec), so this is its PID.
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for xdpAttached(t, b) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if xdpAttached(t, b) {
		t.Fatal("XDP program left attached after the process was killed")
	}
	open(t, b) // the queue is free again once the kernel has torn the dead socket down
}

// helperProcess opens the device in its namespace and waits to be killed.
func helperProcess() {
	d, err := xsk.Open("veth0", xsk.Config{}, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	_ = d
	fmt.Println("ready")
	time.Sleep(time.Minute)
	os.Exit(2)
}

// TestNoAllocs: a steady-state send and receive allocates nothing.
func TestNoAllocs(t *testing.T) {
	tp := topo.Pair(t, 9000, 1)
	sa, sb := open(t, tp.NS("a")).Sockets()[0], open(t, tp.NS("b")).Sockets()[0]
	f := frameFrom(true, wire.RCRDMAWriteOnly, 4096, 1)
	tx := make([]datapath.Frame, 8)
	rx := make([]datapath.Frame, 8)
	allocs := testing.AllocsPerRun(200, func() {
		n := sa.Alloc(tx)
		for i := range n {
			tx[i].Data = tx[i].Data[:copy(tx[i].Data, f)]
		}
		m, _ := sa.Send(tx[:n])
		sa.Free(tx[m:n])
		for got := 0; got < m; {
			sb.Wait(100 * time.Millisecond)
			k, _ := sb.Recv(rx)
			sb.Release(rx[:k])
			got += k
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of 8 frames", allocs)
	}
	settle(t, sa, sb)
}

// TestWarmStock: the fill ring lends the kernel RxWarm chunks at first,
// so that frames one at a time (a ping-pong) cycle through those and no
// others; a Recv of rxBulk frames or more lends it the rest
// (rx_fill_grown), and every chunk stays accounted for.
func TestWarmStock(t *testing.T) {
	sa, sb := openPair(t, xsk.Config{RxChunks: 64, RxWarm: 16, TxSlots: 32, RingSize: 64})
	seq := uint32(0)
	// send sends k frames a->b and receives them on b in one Recv where
	// they all arrived before it, returning the chunks they came in.
	bufs := make([]datapath.Frame, 64)
	send := func(k int) (chunks []uint64) {
		t.Helper()
		var frames [][]byte
		for range k {
			frames = append(frames, frameFrom(true, wire.RCSendOnly, 100, seq))
			seq++
		}
		transmit(t, sa, frames)
		for deadline := time.Now().Add(5 * time.Second); len(chunks) < k && time.Now().Before(deadline); {
			n, err := sb.Recv(bufs)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range bufs[:n] {
				chunks = append(chunks, f.Handle)
			}
			sb.Release(bufs[:n])
			if n == 0 {
				sb.Wait(time.Millisecond)
			}
		}
		if len(chunks) != k {
			t.Fatalf("%d of %d frames arrived", len(chunks), k)
		}
		return chunks
	}
	seen := map[uint64]bool{}
	for range 40 {
		for _, c := range send(1) {
			seen[c] = true
		}
	}
	if len(seen) != 16 {
		t.Errorf("40 frames one at a time came in %d chunks, want the 16 of the warm stock", len(seen))
	}
	if g := sb.Stats().RxFillGrown.Load(); g != 0 {
		t.Errorf("rx_fill_grown %d after frames one at a time, want 0", g)
	}
	settle(t, sa, sb)
	send(12) // a bulk batch: fewer than the stock, so none is dropped
	if g := sb.Stats().RxFillGrown.Load(); g != 1 {
		t.Errorf("rx_fill_grown %d after a Recv of 12 frames, want 1", g)
	}
	for range 4 { // now more than the warm stock at a time fit
		send(24)
	}
	if d := sb.Stats().RxDropKernel.Load(); d != 0 {
		t.Errorf("%d frames dropped by the kernel", d)
	}
	settle(t, sa, sb)
}
