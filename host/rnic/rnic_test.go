package rnic_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/rnic"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOpenErrors: what Open refuses, with a message naming the fix.
func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  string
		cfg  rnic.Config
		want string
	}{
		{"no such netdev", "nosuchdev0", rnic.Config{Port: "udp"}, "nosuchdev0"},
		{"xsk on loopback", "lo", rnic.Config{Port: "xsk"}, `needs an Ethernet device; lo has no Ethernet address (use Port "udp")`},
		{"not its address", "lo", rnic.Config{Port: "udp", Addr: netip.MustParseAddr("10.1.2.3")}, "10.1.2.3 is not an address of lo"},
		{"unknown port", "lo", rnic.Config{Port: "rdma"}, `port "rdma": want xsk, udp`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rnic.Open(tc.dev, tc.cfg)
			if err == nil {
				d.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// roundTrip connects cli to srv through their connection managers, the
// server offering a region in its listener's private data, and checks a
// WRITE and a READ through it, and a READ with a wrong R_Key, whose
// completion's error matches its status.
func roundTrip(t *testing.T, srv, cli *rnic.Device) {
	t.Helper()
	mem, err := srv.CM.PD().RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	offer, _ := mem.Remote().MarshalBinary()
	at := netip.AddrPortFrom(srv.Addr, 7471).String()
	l, err := srv.CM.Listen(at, cm.QPConfig{Private: offer})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if c, err := l.Accept(ctx); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}()
	conn, err := cli.CM.Dial(ctx, at, cm.QPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var region verbs.RemoteRegion
	if err := region.UnmarshalBinary(conn.Private); err != nil || region != mem.Remote() {
		t.Fatalf("region %+v (%v), want the offer %+v", region, err, mem.Remote())
	}
	buf, _ := conn.PD.RegMR([]byte(strings.Repeat("w", 4096)), verbs.AccessLocalWrite)
	if _, err := conn.QP.Do(ctx, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGL: buf.SGL(), RemoteAddr: region.Addr, RKey: region.RKey}); err != nil {
		t.Fatal(err)
	}
	srv.Fence()
	if string(mem.Buf) != string(buf.Buf) {
		t.Fatal("the WRITE did not land")
	}
	clear(buf.Buf)
	if _, err := conn.QP.Do(ctx, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SGL: buf.SGL(), RemoteAddr: region.Addr, RKey: region.RKey}); err != nil {
		t.Fatal(err)
	}
	if string(buf.Buf) != strings.Repeat("w", 4096) {
		t.Fatal("the READ brought something else")
	}
	_, err = conn.QP.Do(ctx, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, SGL: buf.SGL(), RemoteAddr: region.Addr, RKey: region.RKey ^ 0xff})
	var wce *verbs.WCError
	if !errors.Is(err, verbs.WCRemAccessErr) || !errors.As(err, &wce) || wce.WC.WRID != 3 {
		t.Errorf("READ with a wrong R_Key: %v, want a remote access error of WR 3", err)
	}
}

// TestLoopback: two devices on the loopback device's UDP port (no root).
func TestLoopback(t *testing.T) {
	open := func(addr string) *rnic.Device {
		d, err := rnic.Open("lo", rnic.Config{Port: "udp", Addr: netip.MustParseAddr(addr)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if d.Port != "udp" || d.Addr.String() != addr || d.Queues != 1 {
			t.Errorf("device on lo: port %s, addr %v, %d queues", d.Port, d.Addr, d.Queues)
		}
		return d
	}
	roundTrip(t, open("127.0.0.1"), open("127.0.0.2"))
}

// TestVeth: two devices opened by name on a veth pair in two namespaces
// with the zero Config (the xsk port as root), at each netdev's first IPv4
// address, connected through the CM with the default resolution (the
// netdev's neighbour table).
func TestVeth(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	open := func(ns, addr string) *rnic.Device {
		var d *rnic.Device
		err := tp.NS(ns).Do(func() (err error) {
			d, err = rnic.Open("veth0", rnic.Config{})
			return
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if d.Addr.String() != addr || d.Port != "xsk" || d.Queues != 1 {
			t.Errorf("device in %s: address %v (want %s), port %q, %d queues", ns, d.Addr, addr, d.Port, d.Queues)
		}
		return d
	}
	srv, cli := open("a", "10.47.0.1"), open("b", "10.47.0.2")
	roundTrip(t, srv, cli)
	t.Logf("xsk port, XDP mode %s", srv.XDPMode)

	// The peer's end going down takes this end's link: link_downed
	// counts it, as rxe's does, once.
	peer := tp.NS("b")
	l, err := peer.Link("veth0")
	if err != nil {
		t.Fatal(err)
	}
	downs := &srv.Device.NIC().Counters().LinkDowned
	if err := peer.Netlink().LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); downs.Load() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("link_downed %d after the link went down, want 1", downs.Load())
		}
	}
	if err := peer.Netlink().LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !srv.Netdev.LinkUp(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the link did not come back")
		}
	}
	if downs.Load() != 1 {
		t.Errorf("link_downed %d, want 1", downs.Load())
	}
}
