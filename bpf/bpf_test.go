package bpf_test

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/bpf"
	"github.com/softrnic/softrnic/internal/topo"
)

// attach attaches the program to veth0 of a namespace.
func attach(t *testing.T, ns *topo.Namespace) *bpf.Program {
	t.Helper()
	var p *bpf.Program
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("veth0")
		if err != nil {
			return err
		}
		p, err = bpf.Attach(ifi.Index, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func xdpAttached(t *testing.T, ns *topo.Namespace) bool {
	t.Helper()
	l, err := ns.Link("veth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
}

// send passes one UDP datagram from a to b's port and says whether it
// reached a socket in b.
func send(t *testing.T, a, b *topo.Namespace, port int) bool {
	t.Helper()
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.47.0.2"), uint16(port))
	var srv *net.UDPConn
	if err := b.Do(func() (err error) { srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst)); return }); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var cl *net.UDPConn
	if err := a.Do(func() (err error) { cl, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst)); return }); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Write([]byte("0123456789abcdef"))
	srv.SetReadDeadline(time.Now().Add(time.Second))
	_, err := srv.Read(make([]byte, 64))
	return err == nil
}

// TestAttach attaches the program in native mode on a veth, checks that with
// no AF_XDP socket registered every frame still reaches the kernel and is
// counted, that detaching leaves no program behind, and that a second
// attach works.
func TestAttach(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	a, b := tp.NS("a"), tp.NS("b")
	for round := range 2 {
		p := attach(t, b)
		if p.Mode() != bpf.ModeNative {
			t.Errorf("round %d: attached in %v mode on veth", round, p.Mode())
		}
		if !xdpAttached(t, b) {
			t.Fatalf("round %d: no XDP program on veth0 after Attach", round)
		}
		if !send(t, a, b, 4791) {
			t.Error("a UDP/4791 datagram with no XSK registered did not reach the kernel")
		}
		if !send(t, a, b, 5000) {
			t.Error("a UDP/5000 datagram did not reach the kernel")
		}
		s, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.Redirected < 1 || s.Passed < 1 {
			t.Errorf("counters %+v", s)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if xdpAttached(t, b) {
			t.Fatalf("round %d: XDP program still attached after Close", round)
		}
	}
}

// TestAttachBusy: a second program on the same interface is refused.
func TestAttachBusy(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	p := attach(t, tp.NS("b"))
	defer p.Close()
	err := tp.NS("b").Do(func() error {
		ifi, _ := net.InterfaceByName("veth0")
		q, err := bpf.Attach(ifi.Index, nil)
		if err == nil {
			q.Close()
		}
		return err
	})
	if !errors.Is(err, bpf.ErrBusy) {
		t.Fatalf("second Attach on one interface: %v, want ErrBusy", err)
	}
	t.Logf("second Attach: %v", err)
}
