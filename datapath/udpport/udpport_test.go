package udpport_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sizes = []int{0, 1, 3, 64, 1023, 1024, 2048, 4000, 4096}

// frame builds a RoCEv2 frame between two addresses with the sample
// header values (IPv4 ID and UDP source port not what the kernel uses, so
// the port must fix them and the ICRC).
func frame(src, dst netip.Addr, payload int, seq uint32) []byte {
	f := wiretest.SampleFields(wire.RCRDMAWriteOnlyWithImmediate, payload, src.Is6(), seq)
	f.IP4.Src, f.IP4.Dst, f.IP6.Src, f.IP6.Dst = src, dst, src, dst
	f.IP4.ID = 0x1234 + uint16(seq)
	n, _ := f.FrameLen()
	b := make([]byte, n)
	wire.Encode(b, &f)
	return b
}

// exchange sends a frame of every size from a to b and checks what arrives:
// the same transport headers and payload, a header the ICRC verifies over
// (the port made the sent headers match the kernel's), and NoICRC set.
func exchange(t *testing.T, a, b *udpport.Port, srcIP, dstIP netip.Addr) {
	t.Helper()
	var frames [][]byte
	for i, size := range sizes {
		frames = append(frames, frame(srcIP, dstIP, size, uint32(i)))
	}
	porttest.SendAll(t, a, frames)
	got := porttest.ReceiveN(t, b, len(frames))
	if len(got) != len(frames) {
		t.Fatalf("%v -> %v: %d of %d frames", srcIP, dstIP, len(got), len(frames))
	}
	for i := range frames {
		var sent, rcvd wire.Packet
		if err := wire.ParseNoICRC(frames[i], &sent); err != nil {
			t.Fatal(err)
		}
		if err := wire.Parse(got[i].Data, &rcvd); err != nil {
			t.Errorf("frame %d (%d bytes): %v", i, sizes[i], err)
			continue
		}
		if !got[i].NoICRC {
			t.Errorf("frame %d: NoICRC not set", i)
		}
		if !bytes.Equal(sent.Frame[sent.BTHOff:sent.ICRCOff], rcvd.Frame[rcvd.BTHOff:rcvd.ICRCOff]) {
			t.Errorf("frame %d: transport headers or payload differ", i)
		}
		if rcvd.IPv4Header() != nil && (rcvd.IPv4Header().Src() != srcIP || rcvd.IPv4Header().Dst() != dstIP) {
			t.Errorf("frame %d: addresses %v -> %v", i, rcvd.IPv4Header().Src(), rcvd.IPv4Header().Dst())
		}
	}
	if a.Outstanding() != 0 || b.Outstanding() != 0 {
		t.Errorf("buffers lent out: %d and %d", a.Outstanding(), b.Outstanding())
	}
}

func openIn(t *testing.T, ns *topo.Namespace, addr string) *udpport.Port {
	t.Helper()
	var p *udpport.Port
	do := func() (err error) { p, err = udpport.Open(udpport.Config{Local: netip.MustParseAddr(addr)}); return }
	var err error
	if ns == nil {
		err = do()
	} else {
		err = ns.Do(do)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestLoopback runs without root: two ports on two loopback addresses.
func TestLoopback(t *testing.T) {
	a, b := openIn(t, nil, "127.0.0.1"), openIn(t, nil, "127.0.0.2")
	exchange(t, a, b, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	exchange(t, b, a, netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"))
}

// TestVeth runs across a veth pair with a 9000-byte MTU, over IPv4 and IPv6,
// both ways.
func TestVeth(t *testing.T) {
	tp := topo.Pair(t, 9000, 1)
	for _, fam := range [][2]string{{"10.47.0.1", "10.47.0.2"}, {"fd47::1", "fd47::2"}} {
		a, b := openIn(t, tp.NS("a"), fam[0]), openIn(t, tp.NS("b"), fam[1])
		ipA, ipB := netip.MustParseAddr(fam[0]), netip.MustParseAddr(fam[1])
		exchange(t, a, b, ipA, ipB)
		exchange(t, b, a, ipB, ipA)
		// A run of one flow's frames: GSO messages out, GRO back in.
		frames := gsoFrames(ipA, ipB, 40, 4096, 1000)
		seg0 := a.Stats().TxSegmented.Load()
		porttest.SendAll(t, a, frames)
		got := porttest.ReceiveN(t, b, len(frames))
		if len(got) != len(frames) {
			t.Fatalf("%v: %d of %d frames of one flow", ipA, len(got), len(frames))
		}
		for i := range frames {
			var sent, rcvd wire.Packet
			wire.ParseNoICRC(frames[i], &sent)
			if err := wire.Parse(got[i].Data, &rcvd); err != nil || !bytes.Equal(sent.Frame[sent.BTHOff:sent.ICRCOff], rcvd.Frame[rcvd.BTHOff:rcvd.ICRCOff]) {
				t.Fatalf("%v: frame %d of one flow: %v, or not the one sent", ipA, i, err)
			}
		}
		if a.Stats().TxSegmented.Load() == seg0 {
			t.Errorf("%v: no frame went in a GSO message", ipA)
		}
	}
}

// TestBadInput: datagrams to port 4791 that are not RoCEv2 frames are
// counted and dropped.
func TestBadInput(t *testing.T) {
	p, err := udpport.Open(udpport.Config{Local: netip.MustParseAddr("127.0.0.3"), MaxFrameLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.3:4791")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good := frame(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3"), 100, 1)
	var pkt wire.Packet
	wire.ParseNoICRC(good, &pkt)
	payload := pkt.Frame[pkt.BTHOff:]
	badOp := append([]byte{}, payload...)
	badOp[0] = 0x15
	for _, d := range [][]byte{{1, 2, 3, 4, 5}, badOp, make([]byte, 4000), payload} {
		c.Write(d)
	}
	got := porttest.ReceiveN(t, p, 1)
	time.Sleep(50 * time.Millisecond)
	bufs := make([]datapath.Frame, 8)
	if n, _ := p.Recv(bufs); n != 0 || len(got) != 1 {
		t.Fatalf("passed up %d frames, want 1", len(got)+n)
	}
	s := p.Stats()
	if s.RxDropRunt.Load() != 1 || s.RxDropMalformed.Load() != 1 || s.RxDropTooLong.Load() != 1 {
		t.Errorf("drops: runt %d malformed %d too long %d", s.RxDropRunt.Load(), s.RxDropMalformed.Load(), s.RxDropTooLong.Load())
	}
	if p.Outstanding() != 0 {
		t.Errorf("%d buffers lent out", p.Outstanding())
	}
}

// TestNoAllocs: a steady-state send and receive allocates nothing.
func TestNoAllocs(t *testing.T) {
	a, b := openIn(t, nil, "127.0.0.4"), openIn(t, nil, "127.0.0.5")
	f := frame(netip.MustParseAddr("127.0.0.4"), netip.MustParseAddr("127.0.0.5"), 1024, 1)
	tx := make([]datapath.Frame, 8)
	rx := make([]datapath.Frame, 8)
	allocs := testing.AllocsPerRun(200, func() {
		n := a.Alloc(tx)
		for i := range n {
			tx[i].Data = tx[i].Data[:copy(tx[i].Data, f)]
		}
		m, _ := a.Send(tx[:n])
		a.Free(tx[m:n])
		for got := 0; got < m; {
			b.Wait(100 * time.Millisecond)
			k, _ := b.Recv(rx)
			b.Release(rx[:k])
			got += k
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch", allocs)
	}
}

// TestSourcePorts: a flow (the UDP source port a QP's frames carry)
// leaves from one source port of its own, not 4791, so that ECMP keeps a
// QP on one path and spreads QPs; frames rewritten for a capture
// (Rewrite) carry the source port they leave with.
func TestSourcePorts(t *testing.T) {
	a, b := openIn(t, nil, "127.0.0.1"), openIn(t, nil, "127.0.0.2")
	src, dst := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	flows := []uint16{0xc011, 0xc012}
	var frames [][]byte
	for i := range 6 {
		f := frame(src, dst, 64, uint32(i))
		var p wire.Packet
		wire.ParseNoICRC(f, &p)
		p.UDP().SetSrcPort(flows[i%2])
		frames = append(frames, f)
	}
	rewritten := make([][]byte, len(frames))
	for i, f := range frames {
		g := append([]byte(nil), f...)
		a.Rewrite([]datapath.Frame{{Data: g}})
		rewritten[i] = g
	}
	porttest.SendAll(t, a, frames)
	got := porttest.ReceiveN(t, b, len(frames))
	if len(got) != len(frames) {
		t.Fatalf("%d of %d frames", len(got), len(frames))
	}
	ports := map[int]uint16{}
	for i, r := range got {
		var p, w wire.Packet
		if err := wire.ParseNoICRC(r.Data, &p); err != nil {
			t.Fatal(err)
		}
		wire.ParseNoICRC(rewritten[i], &w)
		sp := p.UDP().SrcPort()
		if sp == wire.RoCEv2Port {
			t.Errorf("frame %d left from port 4791", i)
		}
		if prev, ok := ports[i%2]; ok && prev != sp {
			t.Errorf("flow %d left from ports %d and %d", i%2, prev, sp)
		}
		ports[i%2] = sp
		if w.UDP().SrcPort() != sp {
			t.Errorf("frame %d: rewritten for the capture with source port %d, left with %d", i, w.UDP().SrcPort(), sp)
		}
		var o wire.Packet
		wire.ParseNoICRC(frames[i], &o)
		if w.ECN() != o.ECN() {
			t.Errorf("frame %d: rewritten with ECN %d, built with %d", i, w.ECN(), o.ECN())
		}
	}
	if ports[0] == ports[1] {
		t.Errorf("two flows left from one source port %d", ports[0])
	}
}

// TestTOSOnTheWire: each datagram leaves with its frame's TOS, the ECN
// field the NIC chose (Not-ECT, ECT(1), ECT(0)), as a receiver that reads
// the TOS of each (IP_RECVTOS) sees; the same source socket changes it
// from frame to frame.
func TestTOSOnTheWire(t *testing.T) {
	a := openIn(t, nil, "127.0.0.1")
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: wire.RoCEv2Port, Addr: [4]byte{127, 0, 0, 3}}); err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")
	want := []uint8{wire.ECNNotECT, wire.ECT1, wire.ECT0, wire.ECT0 | 0x20}
	frames := tosFrames(src, dst, want, 0xc011) // one flow: one source socket
	porttest.SendAll(t, a, frames)
	buf, oob := make([]byte, 9000), make([]byte, 64)
	for i, tos := range want {
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 || msgs[0].Header.Type != unix.IP_TOS || len(msgs[0].Data) < 1 {
			t.Fatalf("datagram %d: no TOS (%v, %d messages)", i, err, len(msgs))
		}
		if got := msgs[0].Data[0]; got != tos {
			t.Errorf("datagram %d left with TOS %#x, its frame said %#x", i, got, tos)
		}
	}
}

// TestTOSReceived: a received frame carries the TOS its datagram came
// with (IP_RECVTOS), so that the NIC sees the ECN field the network set:
// a CE mark asks it for a CNP.
func TestTOSReceived(t *testing.T) {
	a, b := openIn(t, nil, "127.0.0.1"), openIn(t, nil, "127.0.0.2")
	src, dst := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	want := []uint8{wire.ECNNotECT, wire.ECT0, wire.ECT1, wire.ECNCE, wire.ECT0 | 0x28}
	frames := tosFrames(src, dst, want, 0)
	porttest.SendAll(t, a, frames)
	got := porttest.ReceiveN(t, b, len(frames))
	if len(got) != len(want) {
		t.Fatalf("%d of %d frames", len(got), len(want))
	}
	for i, tos := range want {
		var p wire.Packet
		if err := wire.Parse(got[i].Data, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p.IPv4Header().TOS() != tos {
			t.Errorf("frame %d arrived with TOS %#x; it was sent with %#x", i, p.IPv4Header().TOS(), tos)
		}
	}
}

// tosFrames builds one 64-byte frame per TOS, IPv4 from src to dst, from
// UDP source port srcPort (0: the sample's).
func tosFrames(src, dst netip.Addr, tos []uint8, srcPort uint16) [][]byte {
	var frames [][]byte
	for i, v := range tos {
		f := frame(src, dst, 64, uint32(i))
		var p wire.Packet
		wire.ParseNoICRC(f, &p)
		ip := p.IPv4Header()
		ip.SetTOS(v)
		ip.SetChecksum(ip.ComputeChecksum())
		if srcPort != 0 {
			p.UDP().SetSrcPort(srcPort)
		}
		frames = append(frames, f)
	}
	return frames
}

// gsoFrames builds n frames of one flow from src to dst, each of size
// payload bytes but the last, of last bytes: one GSO message's worth, or
// several.
func gsoFrames(src, dst netip.Addr, n, payload, last int) [][]byte {
	var frames [][]byte
	for i := range n {
		size := payload
		if i == n-1 {
			size = last
		}
		b := frame(src, dst, size, uint32(i))
		var pkt wire.Packet
		wire.ParseNoICRC(b, &pkt)
		pkt.UDP().SetSrcPort(0xc001) // one flow
		pkt.SetICRC()
		frames = append(frames, b)
	}
	return frames
}

// TestGSO: runs of frames of one flow go out as UDP GSO messages and come
// back through UDP GRO, in order and whole; each received frame's headers
// carry the IPv4 ID its segment had, so its ICRC verifies. A port with
// NoOffload sends and takes one datagram at a time, and the two ports
// understand each other either way.
func TestGSO(t *testing.T) {
	src, dst := netip.MustParseAddr("127.0.0.6"), netip.MustParseAddr("127.0.0.7")
	for _, tc := range []struct {
		name            string
		offA, offB      bool // NoOffload of the sender and the receiver
		segmented, coal bool
	}{
		{"both", false, false, true, true},
		{"receiver without GRO", false, true, true, false},
		{"sender without GSO", true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := func(addr netip.Addr, off bool) *udpport.Port {
				p, err := udpport.Open(udpport.Config{Local: addr, NoOffload: off, Buffers: 256})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				return p
			}
			a, b := open(src, tc.offA), open(dst, tc.offB)
			// 40 frames: a message of 15 (the bytes' limit), one of 15, and
			// one of 10 ending in a shorter frame.
			frames := gsoFrames(src, dst, 40, 4096, 1000)
			porttest.SendAll(t, a, frames)
			got := porttest.ReceiveN(t, b, len(frames))
			if len(got) != len(frames) {
				t.Fatalf("%d of %d frames", len(got), len(frames))
			}
			for i := range frames {
				var sent, rcvd wire.Packet
				wire.ParseNoICRC(frames[i], &sent)
				parse := wire.Parse
				if tc.offB && !tc.offA {
					parse = wire.ParseNoICRC // segmented by the kernel: each arrives alone, its ID unknown
				}
				if err := parse(got[i].Data, &rcvd); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(sent.Frame[sent.BTHOff:sent.ICRCOff], rcvd.Frame[rcvd.BTHOff:rcvd.ICRCOff]) {
					t.Fatalf("frame %d: transport headers or payload differ (out of order?)", i)
				}
			}
			if s := a.Stats().TxSegmented.Load(); (s > 0) != tc.segmented {
				t.Errorf("frames sent in GSO messages: %d", s)
			}
			if s := b.Stats().RxCoalesced.Load(); (s > 0) != tc.coal {
				t.Errorf("frames received coalesced: %d", s)
			}
			if a.Outstanding() != 0 || b.Outstanding() != 0 {
				t.Errorf("buffers lent out: %d and %d", a.Outstanding(), b.Outstanding())
			}
		})
	}
}

// TestGROBuffers: coalesced datagrams wait in the port while the caller
// takes fewer frames than arrived, or while the pool has no buffer free:
// nothing is lost and the order holds.
func TestGROBuffers(t *testing.T) {
	src, dst := netip.MustParseAddr("127.0.0.8"), netip.MustParseAddr("127.0.0.9")
	a, err := udpport.Open(udpport.Config{Local: src})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := udpport.Open(udpport.Config{Local: dst, Buffers: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	frames := gsoFrames(src, dst, 30, 2000, 2000)
	porttest.SendAll(t, a, frames)
	time.Sleep(50 * time.Millisecond)
	var held []datapath.Frame
	rx := make([]datapath.Frame, 3)
	deadline := time.Now().Add(5 * time.Second)
	for next := 0; next < len(frames); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames", next, len(frames))
		}
		n, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:n] {
			var want, got wire.Packet
			wire.ParseNoICRC(frames[next], &want)
			if err := wire.Parse(f.Data, &got); err != nil || !bytes.Equal(want.Frame[want.BTHOff:want.ICRCOff], got.Frame[got.BTHOff:got.ICRCOff]) {
				t.Fatalf("frame %d: %v, or not the one sent next", next, err)
			}
			next++
		}
		held = append(held, rx[:n]...)
		if len(held) >= 6 || n == 0 { // hold buffers until the pool runs dry
			b.Release(held)
			held = held[:0]
		}
	}
	b.Release(held)
	if b.Stats().RxCoalesced.Load() == 0 {
		t.Error("nothing coalesced")
	}
	if b.Outstanding() != 0 {
		t.Errorf("%d buffers lent out", b.Outstanding())
	}
}

// TestNoMulticast: the udp port refuses a multicast group with
// EOPNOTSUPP (its socket, bound to the NIC's address, never sees a
// group's datagrams), so that attaching a QP fails instead of taking
// nothing.
func TestNoMulticast(t *testing.T) {
	p, err := udpport.Open(udpport.Config{Local: netip.MustParseAddr("127.0.0.7")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var j datapath.MulticastJoiner = p
	if err := j.JoinMulticast(netip.MustParseAddr("239.1.1.1")); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("JoinMulticast: %v, want EOPNOTSUPP", err)
	}
}
