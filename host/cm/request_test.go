package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/host/verbs"
)

// readyQP makes an RC QP of s's in INIT with a receive posted, as
// librdmacm's programs have it before rdma_connect or rdma_accept.
func readyQP(t *testing.T, s *side) *verbs.QP {
	t.Helper()
	qp, err := s.qc.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: s.qc.SendCQ, RecvCQ: s.qc.RecvCQ, Cap: s.qc.Cap})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{{Addr: s.mr.Addr, Length: 64, LKey: s.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestRequestAccept: a listener from ListenRequests hands the request
// out with the client's private data; Accept with the caller's QP (in
// INIT, a receive posted) connects it and the REP carries the server's
// private data; a SEND lands in the receive posted before the
// connection; the QPs stay the callers' after Close.
func TestRequestAccept(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	l, err := b.a.ListenRequests(":7200")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	aqp, bqp := readyQP(t, a), readyQP(t, b)
	type result struct {
		c   *Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := l.Request(ctx)
		if err != nil {
			done <- result{nil, err}
			return
		}
		if !bytes.HasPrefix(r.Private, []byte("from the client")) || r.Peer != ipA || r.Port != 7200 || r.PeerQPN != aqp.Num || r.UD {
			t.Errorf("request %+v", r)
		}
		c, err := r.Accept(ctx, QPConfig{Existing: bqp, Private: []byte("from the server")})
		done <- result{c, err}
	}()
	client, err := a.a.Dial(ctx, netip.AddrPortFrom(ipB, 7200).String(), QPConfig{Existing: aqp, Private: []byte("from the client")})
	if err != nil {
		t.Fatal("Dial:", err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal("Accept:", res.err)
	}
	if !bytes.HasPrefix(client.Private, []byte("from the server")) {
		t.Errorf("the client got private data %q", client.Private)
	}
	if client.QP != aqp || res.c.QP != bqp || aqp.State() != verbs.QPSRTS || bqp.State() != verbs.QPSRTS {
		t.Fatalf("QPs %v %v", aqp.State(), bqp.State())
	}
	copy(a.buf, "payload")
	if _, err := aqp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: 7, LKey: a.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, b.qc.RecvCQ); wc.Status != verbs.WCSuccess || wc.WRID != 7 || !bytes.Equal(b.buf[:7], []byte("payload")) {
		t.Fatalf("receive %+v, %q", wc, b.buf[:7])
	}
	if wc := waitWC(t, a.qc.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %+v", wc)
	}
	client.Close()
	select {
	case <-res.c.Done():
	case <-ctx.Done():
		t.Fatal("the server's connection did not end on the client's DREQ")
	}
	if err := aqp.Destroy(); err != nil { // still the caller's to destroy
		t.Fatal(err)
	}
}

// TestRequestReject: Reject answers with a REJ whose private data the
// dialer gets in its *RejectError (reason: consumer defined).
func TestRequestReject(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	l, err := b.a.ListenRequests(":7201")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if r, err := l.Request(ctx); err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	_, err = a.a.Dial(ctx, netip.AddrPortFrom(ipB, 7201).String(), QPConfig{Existing: readyQP(t, a)})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejConsumer || !bytes.HasPrefix(rej.Private, []byte("go away")) {
		t.Fatalf("Dial: %v (%+v)", err, rej)
	}
}

// TestSIDR: ResolveUD finds the QPN and Q_Key AcceptUD names, with the
// private data both ways; a rejection and a port no one listens on are
// *RejectErrors with the SIDR_REP's status.
func TestSIDR(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	l, err := b.a.ListenUD(":7202")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := b.a.ListenUD(":7202"); err == nil {
		t.Error("a second UD listener on one port")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		for i := 0; ; i++ {
			r, err := l.Request(ctx)
			if err != nil {
				return
			}
			if !r.UD || !bytes.HasPrefix(r.Private, []byte("who serves")) {
				t.Errorf("request %+v", r)
			}
			if i == 0 {
				r.AcceptUD(0x1234, 0x11111111, []byte("QP 0x1234"))
			} else {
				r.Reject([]byte("no"))
			}
		}
	}()
	addr := netip.AddrPortFrom(ipB, 7202).String()
	p, err := a.a.ResolveUD(ctx, addr, []byte("who serves"))
	if err != nil {
		t.Fatal(err)
	}
	if p.QPN != 0x1234 || p.QKey != 0x11111111 || p.Peer != ipB || !bytes.HasPrefix(p.Private, []byte("QP 0x1234")) {
		t.Fatalf("resolved %+v", p)
	}
	var rej *RejectError
	if _, err := a.a.ResolveUD(ctx, addr, []byte("who serves")); !errors.As(err, &rej) || rej.Reason != SIDRReject || !bytes.HasPrefix(rej.Private, []byte("no")) {
		t.Fatalf("second resolution: %v", err)
	}
	if _, err := a.a.ResolveUD(ctx, netip.AddrPortFrom(ipB, 7203).String(), nil); !errors.As(err, &rej) || rej.Reason != SIDRNoService {
		t.Fatalf("resolution of a port without a listener: %v", err)
	}
}

// TestServiceWait: a Dial with ServiceWait asks again while the peer
// has no listener on the port, and connects once one listens; without
// it, the REJ comes back at once.
func TestServiceWait(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := netip.AddrPortFrom(ipB, 7210).String()
	if _, err := a.a.Dial(ctx, addr, a.qc); !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial without ServiceWait to a port without a listener: %v", err)
	}
	accepted := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		l, err := b.a.Listen(":7210", b.qc)
		if err != nil {
			accepted <- err
			return
		}
		defer l.Close()
		c, err := l.Accept(ctx)
		if err == nil {
			<-c.Done()
			c.Close()
		}
		accepted <- err
	}()
	qc := a.qc
	qc.ServiceWait = 2 * time.Second
	c, err := a.a.Dial(ctx, addr, qc)
	if err != nil {
		t.Fatalf("Dial with ServiceWait to a port that listens 300 ms later: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

// TestRelisten: a REQ that comes between two listeners on one port (the
// first closed a moment ago) is not rejected; the client's next REQ
// finds the second listener.
func TestRelisten(t *testing.T) {
	a, b := pair(t, porttest.Config{Buffers: 1024}, 14)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l1, err := b.a.Listen(":7211", b.qc)
	if err != nil {
		t.Fatal(err)
	}
	l1.Close()
	accepted := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		l2, err := b.a.Listen(":7211", b.qc)
		if err != nil {
			accepted <- err
			return
		}
		defer l2.Close()
		c, err := l2.Accept(ctx)
		if err == nil {
			<-c.Done()
			c.Close()
		}
		accepted <- err
	}()
	c, err := a.a.Dial(ctx, netip.AddrPortFrom(ipB, 7211).String(), a.qc)
	if err != nil {
		t.Fatalf("Dial between two listeners: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}
