package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// side is one device with its agent and what its connections use.
type side struct {
	dev *verbs.Device
	a   *Agent
	qc  QPConfig
	buf []byte
	mr  *verbs.MR
}

var (
	ipA, ipB   = netip.MustParseAddr("10.50.0.1"), netip.MustParseAddr("10.50.0.2")
	macA, macB = wire.MAC{2, 0, 0, 0, 0x50, 1}, wire.MAC{2, 0, 0, 0, 0x50, 2}
)

// pair opens two devices over an in-memory link, each with an agent
// whose response timeout is t (4.096 us x 2^t).
func pair(t *testing.T, link porttest.Config, rt uint8) (*side, *side) {
	return pairWith(t, link, rt, netip.Addr{}, netip.Addr{})
}

// pairWith is pair with an IPv6 address more on each device, if valid:
// v6A on a's, v6B on b's (NICConfig.Addrs, Config.Addrs).
func pairWith(t *testing.T, link porttest.Config, rt uint8, v6A, v6B netip.Addr) (*side, *side) {
	pa, pb := porttest.NewPair(link)
	macs := map[netip.Addr]wire.MAC{ipA: macA, ipB: macB, v6A: macA, v6B: macB}
	resolve := func(_ context.Context, ip netip.Addr) (wire.MAC, error) {
		if m, ok := macs[ip]; ok && ip.IsValid() {
			return m, nil
		}
		return wire.MAC{}, errors.New("no such host")
	}
	open := func(p *porttest.Port, ip, v6 netip.Addr) *side {
		var addrs []netip.Addr
		if v6.IsValid() {
			addrs = []netip.Addr{v6}
		}
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macs[ip], IP: ip, Addrs: addrs}, Port: p})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAgent(d, ip, Config{Resolve: resolve, ResponseTimeout: rt, MaxRetries: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			a.Close()
			d.Close()
		})
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64)
		s := &side{dev: d, a: a, buf: make([]byte, 4096)}
		s.mr, _ = pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		s.qc = QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
		return s
	}
	return open(pa, ipA, v6A), open(pb, ipB, v6B)
}

func waitWC(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for cq.Poll(wc) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatal("no completion:", err)
		}
	}
	return wc[0]
}

// connect dials b's listener from a and returns both ends.
func connect(t *testing.T, a, b *side, reqPriv, repPriv []byte) (*Conn, *Conn) {
	t.Helper()
	bqc := b.qc
	bqc.Private = repPriv
	l, err := b.a.Listen(":7174", bqc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	aqc := a.qc
	aqc.Private = reqPriv
	return dialAccept(t, a, l, aqc)
}

// send SENDs msg from a's end of a connection to b's, and
// checks both completions and the bytes b received.
func send(t *testing.T, a, b *side, from, to *Conn, msg string) {
	t.Helper()
	copy(a.buf, msg)
	to.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}}}})
	if _, err := from.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(len(msg)), LKey: a.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := waitWC(t, b.qc.RecvCQ); wc.Status != verbs.WCSuccess || string(b.buf[:len(msg)]) != msg {
		t.Fatalf("receive completion %+v, %q", wc, b.buf[:len(msg)])
	}
}

// forger is a plain UD QP on s's device, from which a test sends crafted
// MADs to a peer's QP1.
func forger(t *testing.T, s *side) *verbs.QP {
	t.Helper()
	qp, err := s.qc.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: s.qc.SendCQ, RecvCQ: s.qc.RecvCQ,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.ReadyUD(qp, 0x11111111); err != nil {
		t.Fatal(err)
	}
	return qp
}

// dialAccept dials l (on b's port 7174) from a and accepts there.
func dialAccept(t *testing.T, a *side, l *Listener, qc QPConfig) (*Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var server *Conn
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		server, serr = l.Accept(ctx)
	}()
	client, err := a.a.Dial(ctx, netip.AddrPortFrom(ipB, 7174).String(), qc)
	if err != nil {
		t.Fatal("Dial:", err)
	}
	wg.Wait()
	if serr != nil {
		t.Fatal("Accept:", serr)
	}
	return client, server
}

// TestDialAccept: a connection set up through the CM carries a SEND
// both QPs agree on, and each side gets the other's private data; a
// Close (DREQ) ends the peer's connection too, its QP flushed.
func TestDialAccept(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	client, server := connect(t, a, b, []byte("hello from the client"), []byte("welcome"))
	if !bytes.HasPrefix(server.Private, []byte("hello from the client")) || len(server.Private) != MaxREQPrivate {
		t.Errorf("the server got private data %q", server.Private)
	}
	if !bytes.HasPrefix(client.Private, []byte("welcome")) {
		t.Errorf("the client got private data %q", client.Private)
	}
	if server.Peer != ipA || client.Peer != ipB {
		t.Errorf("peers %v and %v", server.Peer, client.Peer)
	}
	for _, c := range []*Conn{client, server} {
		if c.QP.State() != verbs.QPSRTS {
			t.Fatalf("QP %d is %v", c.QP.Num, c.QP.State())
		}
	}
	// A SEND over the connection.
	send(t, a, b, client, server, "payload")
	// The server's next receive is flushed when the client disconnects.
	server.QP.PostRecv([]verbs.RecvWR{{WRID: 3, SGL: []verbs.SGE{{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}}}})
	if err := client.Close(); err != nil {
		t.Fatal("Close:", err)
	}
	select {
	case <-server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the server's connection did not end on the DREQ")
	}
	if server.QP.State() != verbs.QPSErr {
		t.Errorf("after the disconnect: server QP %v", server.QP.State())
	}
	if wc := waitWC(t, b.qc.RecvCQ); wc.WRID != 3 || wc.Status != verbs.WCWRFlushErr {
		t.Errorf("the server's posted receive: %+v, want flushed", wc)
	}
	// Close destroyed the QP the agent made for the client; the server's
	// Close, after the peer's disconnect, destroys its own.
	if err := client.QP.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("the client's QP after Close: %v, want it destroyed", err)
	}
	if err := server.Close(); err != nil {
		t.Errorf("Close after the peer's disconnect: %v", err)
	}
	if err := server.QP.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("the server's QP after Close: %v, want it destroyed", err)
	}
}

// TestDialIPv6: devices with an IPv4 and an IPv6 address connect by the
// IPv6 ones, as rping -a fd00::1 does: the listener bound to its IPv6
// address, Dial to it; both ends see the other's IPv6 address, and a
// SEND goes through.
func TestDialIPv6(t *testing.T) {
	v6A, v6B := netip.MustParseAddr("fd00:50::1"), netip.MustParseAddr("fd00:50::2")
	a, b := pairWith(t, porttest.Config{Buffers: 1024}, 14, v6A, v6B)
	l, err := b.a.Listen(netip.AddrPortFrom(v6B, 7174).String(), b.qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accepted := acceptOne(t, ctx, l)
	client, err := a.a.Dial(ctx, netip.AddrPortFrom(v6B, 7174).String(), a.qc)
	if err != nil {
		t.Fatal("Dial:", err)
	}
	server := <-accepted
	if server == nil {
		t.FailNow()
	}
	if server.Peer != v6A || client.Peer != v6B {
		t.Fatalf("peers %v and %v, want %v and %v", server.Peer, client.Peer, v6A, v6B)
	}
	send(t, a, b, client, server, "over v6")
	if _, err := b.a.Listen("[fd00:50::9]:7175", b.qc); err == nil {
		t.Error("a listener took an address that is not the device's")
	}
}

// TestReject: a REQ to a port nobody listens on comes back as a REJ
// (invalid service ID), which Dial returns as a RejectError at once.
func TestReject(t *testing.T) {
	a, _ := pair(t, porttest.Config{Buffers: 1024}, 14)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := a.a.Dial(ctx, netip.AddrPortFrom(ipB, 9999).String(), a.qc)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejInvalidServiceID || !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial to a port without a listener: %v", err)
	}
	if el := time.Since(start); el > timeout(14) {
		t.Errorf("the REJ took %v, longer than a response timeout", el)
	}
}

// cmAttr returns the CM attribute of a frame to QP1, or 0.
func cmAttr(f []byte) AttrID {
	var p wire.Packet
	if wire.ParseNoICRC(f, &p) != nil || p.BTH().DestQP() != GSIQPN {
		return 0
	}
	mad := p.Payload()
	if len(mad) < HeaderSize {
		return 0
	}
	return AttrID(binary.BigEndian.Uint16(mad[16:]))
}

// TestLostHandshake: the first REQ, the first REP and the first RTU are
// lost on the link; the REQ and the REP are sent again when their
// response timeout runs out, the RTU when the REP comes again, and the
// connection is established.
func TestLostHandshake(t *testing.T) {
	var mu sync.Mutex
	dropped := map[AttrID]int{}
	drop := func(f []byte) bool {
		attr := cmAttr(f)
		if attr != AttrREQ && attr != AttrREP && attr != AttrRTU {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		dropped[attr]++
		return dropped[attr] == 1
	}
	a, b := pair(t, porttest.Config{Buffers: 1024, Drop: drop}, 14)
	client, server := connect(t, a, b, nil, nil)
	mu.Lock()
	for _, attr := range []AttrID{AttrREQ, AttrREP, AttrRTU} {
		if dropped[attr] < 2 {
			t.Errorf("%v sent %d times, want the lost one and another", attr, dropped[attr])
		}
	}
	mu.Unlock()
	_, _, resentA, _, _ := a.a.Counters.Snapshot()
	_, _, resentB, _, _ := b.a.Counters.Snapshot()
	if resentA < 2 || resentB < 1 {
		t.Errorf("resent: client %d (REQ, RTU), server %d (REP)", resentA, resentB)
	}
	if client.QP.State() != verbs.QPSRTS || server.QP.State() != verbs.QPSRTS {
		t.Errorf("QPs %v and %v", client.QP.State(), server.QP.State())
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	<-client.Done()
}

// TestRandomLoss: connections come up and go down over a link that loses
// a fifth of its frames.
func TestRandomLoss(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024, Loss: 0.2, Seed: 3}, 13)
	l, err := b.a.Listen(":7175", b.qc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan *Conn, 1)
		go func() {
			c, _ := l.Accept(ctx)
			done <- c
		}()
		c, err := a.a.Dial(ctx, netip.AddrPortFrom(ipB, 7175).String(), a.qc)
		if err != nil {
			cancel()
			t.Fatalf("connection %d: %v", i, err)
		}
		s := <-done
		cancel()
		if s == nil {
			t.Fatalf("connection %d: not accepted", i)
		}
		c.Close()
		<-s.Done()
	}
}

// TestStartingPSN: each side sends from the starting PSN the other's
// message carries (the REP's for the active side, the REQ's for the
// passive side), as Linux's CM sets its QPs; rxe NAKs anything else.
func TestStartingPSN(t *testing.T) {
	var mu sync.Mutex
	var reqPSN, repPSN uint32
	first := map[wire.MAC]uint32{} // destination NIC -> PSN of the first request to it (both QPs are QP 17)
	watch := func(f []byte) bool {
		var p wire.Packet
		if wire.ParseNoICRC(f, &p) != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if qp := p.BTH().DestQP(); qp == GSIQPN {
			if _, m, err := Decode(p.Payload()); err == nil {
				switch m := m.(type) {
				case *REQ:
					reqPSN = m.StartingPSN
				case *REP:
					repPSN = m.StartingPSN
				}
			}
		} else if dst := wire.MAC(f[0:6]); p.Opcode.Info().Flags&wire.OpPayload != 0 {
			if _, seen := first[dst]; !seen {
				first[dst] = uint32(p.BTH().PSN())
			}
		}
		return false
	}
	a, b := pair(t, porttest.Config{Buffers: 1024, Drop: watch}, 14)
	client, server := connect(t, a, b, nil, nil)
	for _, c := range []struct {
		from, to   *Conn
		sfrom, sto *side
	}{{client, server, a, b}, {server, client, b, a}} {
		c.to.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: c.sto.mr.Addr, Length: 64, LKey: c.sto.mr.LKey}}}})
		if _, err := c.from.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: c.sfrom.mr.Addr, Length: 8, LKey: c.sfrom.mr.LKey}}}}); err != nil {
			t.Fatal(err)
		}
		// The send's completion, and the receive's on the other side (each
		// side's sends and receives share its CQ).
		if wc := waitWC(t, c.sfrom.qc.SendCQ); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
			t.Fatalf("send %+v", wc)
		}
		if wc := waitWC(t, c.sto.qc.RecvCQ); wc.Status != verbs.WCSuccess || wc.WRID != 1 {
			t.Fatalf("receive %+v", wc)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := first[macB]; got != repPSN {
		t.Errorf("the client sent from PSN %#x, the REP said %#x (the REQ %#x)", got, repPSN, reqPSN)
	}
	if got := first[macA]; got != reqPSN {
		t.Errorf("the server sent from PSN %#x, the REQ said %#x (the REP %#x)", got, reqPSN, repPSN)
	}
}

// TestCraftedMADs: datagrams to QP1 that are not CM messages (short,
// another class, an unknown attribute, random bytes, a REP for no
// connection) are counted and dropped; a REQ for a transport other than
// RC gets a REJ (invalid transport type); the agent still connects
// afterwards.
func TestCraftedMADs(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	// A plain UD QP on a's device sends to b's QP1 with the GSI Q_Key.
	qp := forger(t, a)
	good, _ := Encode(&REP{LocalCommID: 1, RemoteCommID: 0x12345678, LocalQPN: 99}, 1) // no such connection
	req, _ := Encode(&REQ{LocalCommID: 5, LocalQPN: 17, ServiceID: ServiceID(PortSpaceTCP, 1)}, 2)
	req[HeaderSize+43] |= 3 << 1 // transport type 3
	other := append([]byte(nil), good...)
	other[1] = 0x01 // subnet management
	unknown := append([]byte(nil), good...)
	unknown[17] = byte(AttrLAP)
	random := make([]byte, MADSize)
	for i := range random {
		random[i] = byte(i*131 + 7)
	}
	crafted := [][]byte{good[:100], other, unknown, random, good, req}
	ah := &verbs.AH{DestMAC: macB, DestGID: ipB}
	for i, m := range crafted {
		copy(a.buf, m)
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(100 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(len(m)), LKey: a.mr.LKey}}, AH: ah, RemoteQPN: GSIQPN, RemoteQKey: GSIQKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("crafted MAD %d: %+v", i, wc)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		received, _, _, dropped, rejected := b.a.Counters.Snapshot()
		if received >= uint64(len(crafted)) && rejected == 1 {
			if dropped != uint64(len(crafted)-1) {
				t.Errorf("%d of %d crafted MADs counted as dropped", dropped, len(crafted)-1)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent received %d of %d crafted MADs", received, len(crafted))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The REJ reached a's QP1 (a's agent: no such connection, dropped).
	for {
		if r, _, _, _, _ := a.a.Counters.Snapshot(); r >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no REJ came back for the REQ of an unknown transport")
		}
		time.Sleep(10 * time.Millisecond)
	}
	client, server := connect(t, a, b, nil, nil)
	if client.QP.State() != verbs.QPSRTS || server.QP.State() != verbs.QPSRTS {
		t.Fatal("no connection after the crafted MADs")
	}
}

// TestNetLikeAPI: with addresses as net.Dial and net.Listen take them and
// a zero QPConfig, a connection comes with its QP, a PD (the agent's) and
// a CQ; memory registered in that PD is reached by a WRITE with
// immediate, the private data goes both ways, and Close ends the peer's
// side too.
func TestNetLikeAPI(t *testing.T) {
	a, b := pair(t, porttest.Config{}, 14)
	l, err := b.a.Listen(":7300", QPConfig{Private: []byte("from the server")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr() != netip.AddrPortFrom(ipB, 7300) {
		t.Errorf("listener address %v", l.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accepted := acceptOne(t, ctx, l)
	client, err := a.a.Dial(ctx, "10.50.0.2:7300", QPConfig{Private: []byte("from the client")})
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.FailNow()
	}
	if string(client.Private[:15]) != "from the server" || string(server.Private[:15]) != "from the client" {
		t.Errorf("private data: client got %q, server %q", client.Private, server.Private)
	}
	for _, c := range []*Conn{client, server} {
		if c.PD == nil || c.SendCQ == nil || c.SendCQ != c.RecvCQ || c.QP.State() != verbs.QPSRTS {
			t.Fatalf("connection %+v: want the agent's PD, one CQ, the QP in RTS", c)
		}
	}
	if client.PD != a.a.PD() || server.PD != b.a.PD() {
		t.Error("the connections are not in their agents' PDs")
	}
	dst := make([]byte, 64)
	dmr, err := server.PD.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := []byte("written through a connection the CM made")
	smr, err := client.PD.RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.QP.PostRecv([]verbs.RecvWR{{WRID: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 7,
		SGL: []verbs.SGE{{Addr: smr.Addr, Length: uint32(len(src)), LKey: smr.LKey}}, RemoteAddr: dmr.Addr, RKey: dmr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, client.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc.Status)
	}
	if wc := waitWC(t, server.RecvCQ); wc.Status != verbs.WCSuccess || wc.Imm != 7 || wc.ByteLen != uint32(len(src)) {
		t.Fatalf("receive %+v", wc)
	}
	b.dev.Fence()
	if !bytes.Equal(dst[:len(src)], src) {
		t.Errorf("the server's memory holds %q", dst[:len(src)])
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-server.Done():
	case <-time.After(5 * time.Second):
		t.Error("the server's side did not end on the client's Close")
	}
}

// TestAddresses: addresses the agent cannot use are refused, naming why.
func TestAddresses(t *testing.T) {
	a, _ := pair(t, porttest.Config{}, 14)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range []string{"10.50.0.2", "10.50.0.2:0", "10.50.0.2:70000", "[::1]:7300", "0.0.0.0:7300", "host.invalid:7300"} {
		if _, err := a.a.Dial(ctx, addr, QPConfig{}); err == nil {
			t.Errorf("Dial %q: no error", addr)
		}
	}
	for _, addr := range []string{"7300", ":0", "10.50.0.9:7300", "[::1]:7300"} {
		if _, err := a.a.Listen(addr, QPConfig{}); err == nil {
			t.Errorf("Listen %q: no error", addr)
		}
	}
	for _, addr := range []string{":7301", "0.0.0.0:7302", "10.50.0.1:7303"} {
		l, err := a.a.Listen(addr, QPConfig{})
		if err != nil {
			t.Errorf("Listen %q: %v", addr, err)
			continue
		}
		l.Close()
	}
}

// TestConnectionsReleased: connections come and go, and refused attempts
// fail, many more times than a device has QPs and CQs (256 each): what the
// agent made for each (its QP and CQ) is destroyed by Close or by the
// failure, so the next always finds room.
func TestConnectionsReleased(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 4096}, 14)
	l, err := b.a.Listen(":7400", QPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 300 {
		accepted := make(chan *Conn, 1)
		go func() {
			c, _ := l.Accept(ctx)
			accepted <- c
		}()
		c, err := a.a.Dial(ctx, "10.50.0.2:7400", QPConfig{})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		s := <-accepted
		if s == nil {
			t.Fatalf("connection %d: not accepted", i)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("connection %d: Close: %v", i, err)
		}
		<-s.Done()
		s.Close()
		if _, err := a.a.Dial(ctx, "10.50.0.2:7401", QPConfig{}); !errors.Is(err, ErrRejected) {
			t.Fatalf("attempt %d to a closed port: %v", i, err)
		}
	}
}

// TestREQFlood: a flood of forged REQs from a host that never answers,
// each asking for the longest CM response timeout, takes a bounded table
// of the listener for a bounded time: the handshakes beyond the bounds
// are dropped, oldest first (or, on a machine slow enough that the flood
// outlasts a handshake's REPs, end on their own with a REJ), their QPs
// released, and a real client is accepted.
func TestREQFlood(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 4096}, 14)
	l, err := b.a.Listen(":7174", b.qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	qp := forger(t, a)
	const flood = 300 // more than the device's QPs
	ah := &verbs.AH{DestMAC: macB, DestGID: ipB}
	for i := range flood {
		req := &REQ{LocalCommID: uint32(0x1000 + i), LocalQPN: uint32(0x100 + i), ServiceID: ServiceID(PortSpaceTCP, 7174),
			RemoteCMResponseTimeout: 31, MaxCMRetries: 15, TransportType: TransportRC, StartingPSN: 1, Private: make([]byte, REQPrivate)}
		if err := (IPHeader{SrcPort: uint16(40000 + i), Src: ipA, Dst: ipB}).Put(req.Private); err != nil {
			t.Fatal(err)
		}
		m, err := Encode(req, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		copy(a.buf, m)
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(len(m)), LKey: a.mr.LKey}}, AH: ah, RemoteQPN: GSIQPN, RemoteQKey: GSIQKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("forged REQ %d: %+v", i, wc)
		}
	}
	ended := func() uint64 { return b.a.Counters.HandshakesDropped.Load() + b.a.Counters.Reject.Load() }
	deadline := time.Now().Add(10 * time.Second)
	for ended() < flood-MaxPendingPerPeer && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ended(); got < flood-MaxPendingPerPeer {
		t.Fatalf("%d of %d forged handshakes ended (%d dropped, %d given up), want all but %d", got, flood,
			b.a.Counters.HandshakesDropped.Load(), b.a.Counters.Reject.Load(), MaxPendingPerPeer)
	}
	client, server := dialAccept(t, a, l, a.qc) // a real client, after the flood
	if client.QP.State() != verbs.QPSRTS || server.QP.State() != verbs.QPSRTS {
		t.Fatalf("QPs %v and %v", client.QP.State(), server.QP.State())
	}
	client.Close()
	server.Close()
}

// forge sends m from s's forger QP to the CM on ipB.
func forge(t *testing.T, s *side, qp *verbs.QP, m Message, tid uint64) {
	t.Helper()
	d, err := Encode(m, tid)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.buf, d)
	if _, err := qp.PostSend([]verbs.SendWR{{WRID: tid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: s.mr.Addr, Length: uint32(len(d)), LKey: s.mr.LKey}}, AH: &verbs.AH{DestMAC: macB, DestGID: ipB},
		RemoteQPN: GSIQPN, RemoteQKey: GSIQKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, s.qc.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("forged %T: %+v", m, wc)
	}
}

// TestTimedOutREQ: a peer whose REQ timed out before our REP came
// (rdma_cm reports UNREACHABLE) sends, when it destroys its ID, a REJ
// for a timeout that names only its own communication ID, as Linux's CM
// does; the handshake ends on it instead of sending the REP again until
// its retries run out.
func TestTimedOutREQ(t *testing.T) {
	a, b := pair(t, porttest.Config{}, 14)
	l, err := b.a.Listen(":7174", b.qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	qp := forger(t, a)
	req := &REQ{LocalCommID: 0x8d2dc053, LocalQPN: 0x99, ServiceID: ServiceID(PortSpaceTCP, 7174),
		RemoteCMResponseTimeout: MaxHonoredTimeout, MaxCMRetries: 15, TransportType: TransportRC, StartingPSN: 1, Private: make([]byte, REQPrivate)}
	if err := (IPHeader{SrcPort: 40000, Src: ipA, Dst: ipB}).Put(req.Private); err != nil {
		t.Fatal(err)
	}
	forge(t, a, qp, req, 7)
	for deadline := time.Now().Add(5 * time.Second); b.a.Counters.Sent.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no REP")
		}
	}
	forge(t, a, qp, &REJ{LocalCommID: req.LocalCommID, MessageRejected: MsgOther, Reason: RejTimeout}, 7)
	// The REP waits a quarter of a response timeout (about 270 ms) before
	// it first goes again: the REJ ends the handshake well before.
	start := time.Now()
	for b.a.Counters.Reject.Load() == 0 && time.Since(start) < 800*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	if n := b.a.Counters.Reject.Load(); n != 1 {
		t.Fatalf("%d REJs taken after %v, want the peer's (dropped: %d)", n, time.Since(start), b.a.Counters.Dropped.Load())
	}
	if n := b.a.Counters.Resent.Load(); n != 0 {
		t.Errorf("the REP went again %d times", n)
	}
	b.a.mu.Lock()
	pending := len(b.a.passive)
	b.a.mu.Unlock()
	for ; pending != 0 && time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
		b.a.mu.Lock()
		pending = len(b.a.passive)
		b.a.mu.Unlock()
	}
	if pending != 0 {
		t.Errorf("%d handshakes still pending", pending)
	}
}

// TestRNRRepairOverCM: the CM tells each side's QP the RNR retry count
// it sent the peer (7), so a go-back-N gap whose packet is lost again
// when sent again, while requests beyond it keep coming, is asked for
// with an RNR NAK once the sender has gone quiet (the answer rxe heeds
// during a retry); the WRITEs complete and land.
func TestRNRRepairOverCM(t *testing.T) {
	var mu sync.Mutex
	var gap uint32
	var seen, rnr bool
	drops := 0
	// The first request to the server is lost, and so is every copy of it
	// (the go-back after the NAK, the timers') until the server has sent
	// an RNR NAK: how soon the sender goes quiet long enough for that
	// (reliability.GapQuiet) depends on the machine, so the drops last
	// until it has. Without the RNR repair the copies would be dropped
	// until the sender's retries ran out.
	drop := func(f []byte) bool {
		var p wire.Packet
		if wire.ParseNoICRC(f, &p) != nil || p.BTH().DestQP() == GSIQPN {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if wire.MAC(f[0:6]) != macB { // the server's answers
			if p.Opcode.Info().Flags&wire.OpAck != 0 && p.AETH().Syndrome().IsRNRNAK() {
				rnr = true
			}
			return false
		}
		if p.Opcode.Info().Flags&wire.OpPayload == 0 {
			return false
		}
		if !seen {
			gap, seen = uint32(p.BTH().PSN()), true
		}
		if uint32(p.BTH().PSN()) == gap && !rnr {
			drops++
			return true
		}
		return false
	}
	a, b := pair(t, porttest.Config{Buffers: 1024, Drop: drop}, 14)
	client, _ := connect(t, a, b, nil, nil)
	const n, size = 8, 256
	for i := range a.buf[:n*size] {
		a.buf[i] = byte(i%251 + 1)
	}
	for i := range n {
		if _, err := client.QP.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr + uint64(i*size), Length: size, LKey: a.mr.LKey}},
			RemoteAddr: b.mr.Addr + uint64(i*size), RKey: b.mr.RKey}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
		}
	}
	if !bytes.Equal(b.buf[:n*size], a.buf[:n*size]) {
		t.Error("the WRITEs did not land")
	}
	mu.Lock()
	defer mu.Unlock()
	if drops < 2 {
		t.Fatalf("%d copies of the gap's packet dropped, want the first and the go-back's at least", drops)
	}
	if r := b.dev.NIC().Counters().RNRRepairs.Load(); r == 0 || !rnr {
		t.Errorf("rnr_nak_repairs %d, an RNR NAK sent %v: the repeated NAK of a lasting gap was not an RNR NAK", r, rnr)
	}
}

// TestIdleProbeOverCM: the CM's QPs have the idle probe
// (verbs.QPAttr.IdleProbe): the client's first SEND is lost with nothing
// behind it, and the server, whose application waits with a receive
// posted, NAKs the PSN it expects once the client has been quiet
// (seq_nak_idle); the SEND sent again lands.
func TestIdleProbeOverCM(t *testing.T) {
	var mu sync.Mutex
	drops := 0
	drop := func(f []byte) bool {
		var p wire.Packet
		if wire.ParseNoICRC(f, &p) != nil || p.BTH().DestQP() == GSIQPN || wire.MAC(f[0:6]) != macB || p.Opcode != wire.RCSendOnly {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if drops == 0 {
			drops++
			return true
		}
		return false
	}
	a, b := pair(t, porttest.Config{Buffers: 1024, Drop: drop}, 14)
	client, server := connect(t, a, b, nil, nil)
	if _, err := server.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "first message")
	if _, err := client.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: 13, LKey: a.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("the SEND: %v", wc.Status)
	}
	if wc := waitWC(t, b.qc.RecvCQ); wc.Status != verbs.WCSuccess || wc.ByteLen != 13 || !bytes.Equal(b.buf[:13], a.buf[:13]) {
		t.Fatalf("the receive: %v, %d bytes", wc.Status, wc.ByteLen)
	}
	mu.Lock()
	defer mu.Unlock()
	if drops != 1 {
		t.Fatalf("%d copies of the SEND dropped, want 1", drops)
	}
	if n := b.dev.NIC().Counters().SeqNAKIdle.Load(); n == 0 {
		t.Error("seq_nak_idle 0: the server never probed for the lost SEND")
	}
}

// TestRepWait: the passive side waits a quarter of the response timeout
// after its first REP, half after the second, and the whole timeout from
// the third on.
func TestRepWait(t *testing.T) {
	full := timeout(18)
	for _, c := range []struct {
		try  int
		want time.Duration
	}{{0, full / 4}, {1, full / 2}, {2, full}, {3, full}, {15, full}} {
		if got := repWait(c.try, full); got != c.want {
			t.Errorf("after REP %d: %v, want %v", c.try+1, got, c.want)
		}
	}
}

// TestLostRTU: the client's RTU is lost; the server sends its REP again a
// quarter of the response timeout later, not a whole one, the client's
// CM answers it with its RTU again, and Accept returns.
func TestLostRTU(t *testing.T) {
	var mu sync.Mutex
	rtus := 0
	drop := func(f []byte) bool {
		if cmAttr(f) != AttrRTU {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		rtus++
		return rtus == 1
	}
	a, b := pair(t, porttest.Config{Buffers: 1024, Drop: drop}, 18) // a response timeout of about 1.07 s
	start := time.Now()
	connect(t, a, b, nil, nil)
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if rtus != 2 {
		t.Fatalf("%d RTUs, want the lost one and another", rtus)
	}
	if _, _, resent, _, _ := b.a.Counters.Snapshot(); resent != 1 {
		t.Errorf("the server sent its REP again %d times, want once", resent)
	}
	if full := timeout(18); took >= full {
		t.Errorf("the handshake took %v, a response timeout (%v) or more", took, full)
	}
}

// TestCloseWithSendersWaiting: a handshake waiting for a send slot (every
// one taken: a flood's REPs, their completions not yet served) ends when
// the agent closes, and Close returns.
func TestCloseWithSendersWaiting(t *testing.T) {
	a, _ := pair(t, porttest.Config{Buffers: 1024}, 14)
	ag := a.a
	ag.mu.Lock()
	taken := ag.freeSlots
	ag.freeSlots = nil
	ag.mu.Unlock()
	errs := make(chan error, 1)
	ag.wg.Add(1) // as a handshake's goroutine counts
	go func() {
		defer ag.wg.Done()
		errs <- ag.send(context.Background(), ipB, &DREQ{LocalCommID: 1, RemoteCommID: 2}, 1)
	}()
	time.Sleep(20 * time.Millisecond) // it waits for a slot
	closed := make(chan error, 1)
	go func() { closed <- ag.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for ever on a handshake waiting for a send slot")
	}
	if err := <-errs; err == nil {
		t.Error("the waiting send succeeded after Close")
	}
	ag.mu.Lock()
	ag.freeSlots = taken
	ag.mu.Unlock()
}

// acceptOne accepts one connection on l in a goroutine and hands it over
// on the channel (nil, the test failed, if Accept fails).
func acceptOne(t *testing.T, ctx context.Context, l *Listener) <-chan *Conn {
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Error("Accept:", err)
		}
		accepted <- c
	}()
	return accepted
}
