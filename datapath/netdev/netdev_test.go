package netdev_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestPathMTU(t *testing.T) {
	tests := []struct{ netdev, ib, enum int }{
		{1500, 1024, 3}, {9000, 4096, 5}, {4176, 4096, 5}, {4175, 2048, 4},
		{2128, 2048, 4}, {2127, 1024, 3}, {1100, 512, 2}, {576, 256, 1}, {335, 0, 0}, {65536, 4096, 5},
	}
	for _, tt := range tests {
		got := netdev.PathMTU(tt.netdev)
		if got != tt.ib || netdev.MTUEnum(got) != tt.enum {
			t.Errorf("PathMTU(%d) = %d (enum %d), want %d (enum %d)", tt.netdev, got, netdev.MTUEnum(got), tt.ib, tt.enum)
		}
		if tt.enum > 0 && netdev.MTUFromEnum(tt.enum) != tt.ib {
			t.Errorf("MTUFromEnum(%d) = %d", tt.enum, netdev.MTUFromEnum(tt.enum))
		}
	}
}

func openIn(t *testing.T, ns *topo.Namespace) *netdev.Device {
	t.Helper()
	var d *netdev.Device
	if err := ns.Do(func() (err error) { d, err = netdev.Open("veth0"); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// TestDevice reads a veth end: MAC, MTU and the GID table in rxe's order
// (link-local GID from the MAC, IPv4-mapped, then IPv6).
func TestDevice(t *testing.T) {
	tp := topo.Pair(t, 9000, 1)
	d := openIn(t, tp.NS("a"))
	if d.MAC.String() != "02:53:52:00:00:01" || d.MTU != 9000 || d.PathMTU() != 4096 {
		t.Errorf("MAC %v MTU %d path MTU %d", d.MAC, d.MTU, d.PathMTU())
	}
	want := []string{"fe80::53:52ff:fe00:1", "::ffff:10.47.0.1", "fd47::1"}
	if len(d.GIDs) != len(want) {
		t.Fatalf("GIDs %v, want %v", d.GIDs, want)
	}
	for i, w := range want {
		if g, _ := d.GID(i); g.String() != w {
			t.Errorf("GID %d = %v, want %s", i, g, w)
		}
	}
	if g, _ := d.GID(1); !g.IsIPv4() || g.Addr() != netip.MustParseAddr("10.47.0.1") {
		t.Errorf("GID 1 %v is not IPv4 10.47.0.1", g)
	}
	if _, err := d.GID(3); !errors.Is(err, netdev.ErrNoGID) {
		t.Errorf("GID(3): %v", err)
	}
}

// TestResolve finds the next hop's MAC for a neighbour the kernel has not
// resolved yet, over IPv4 and IPv6, directly and through a gateway, and
// gives up on an address nobody answers for.
func TestResolve(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	a := tp.NS("a")
	d := openIn(t, a)
	// A route through b, which answers ARP for its own address only.
	_, dst, _ := net.ParseCIDR("10.99.0.0/24")
	if err := a.Netlink().RouteAdd(&netlink.Route{LinkIndex: d.Index, Dst: dst, Gw: net.ParseIP("10.47.0.2")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct{ dst, gw, src string }{
		{"10.47.0.2", "10.47.0.2", "10.47.0.1"},
		{"fd47::2", "fd47::2", "fd47::1"},
		{"10.99.0.5", "10.47.0.2", "10.47.0.1"},
	} {
		start := time.Now()
		hop, err := d.Resolve(ctx, netip.MustParseAddr(c.dst))
		t.Logf("%s resolved in %v", c.dst, time.Since(start))
		if err != nil {
			t.Errorf("%s: %v", c.dst, err)
			continue
		}
		if hop.MAC.String() != "02:53:52:00:00:02" || hop.Gateway.String() != c.gw || hop.Src.String() != c.src {
			t.Errorf("%s: %+v", c.dst, hop)
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := d.Resolve(short, netip.MustParseAddr("10.47.0.77")); !errors.Is(err, netdev.ErrUnreachable) {
		t.Errorf("nobody at 10.47.0.77: %v", err)
	}
	if _, err := d.Resolve(ctx, netip.MustParseAddr("192.0.2.1")); !errors.Is(err, netdev.ErrUnreachable) {
		t.Errorf("no route to 192.0.2.1: %v", err)
	}
}

// TestLoopbackNotEthernet: the loopback device is refused with
// ErrNotEthernet and a message that says so, not an empty hardware
// address.
func TestLoopbackNotEthernet(t *testing.T) {
	d, err := netdev.Open("lo")
	if err == nil {
		d.Close()
		t.Fatal("lo opened as a softrnic device")
	}
	if !errors.Is(err, netdev.ErrNotEthernet) || !strings.Contains(err.Error(), "no Ethernet address") || strings.Contains(err.Error(), "( )") {
		t.Errorf("lo: %v", err)
	}
}

// TestLoopbackUDP: OpenUDP takes the loopback device, for the kernel UDP
// port: no Ethernet address, no link-local GID, its first GID 127.0.0.1.
func TestLoopbackUDP(t *testing.T) {
	d, err := netdev.OpenUDP("lo")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.FirstIPv4()
	if d.Ethernet() || err != nil || a != netip.MustParseAddr("127.0.0.1") || d.GIDs[0].Addr() != a {
		t.Errorf("lo: Ethernet %v, first IPv4 %v (%v), GIDs %v", d.Ethernet(), a, err, d.GIDs)
	}
	if addrs := d.Addrs(); len(addrs) != len(d.GIDs) || addrs[0] != a {
		t.Errorf("lo: Addrs %v for GIDs %v", addrs, d.GIDs)
	}
}

// TestWatchLink: setting the peer's end of a veth pair down takes this
// end's carrier, and the watch reports down, then up again.
func TestWatchLink(t *testing.T) {
	tp := topo.Pair(t, 1500, 1)
	d := openIn(t, tp.NS("a"))
	if !d.LinkUp() {
		t.Fatal("veth0 is not up")
	}
	done := make(chan struct{})
	defer close(done)
	states := make(chan bool, 8)
	if err := tp.NS("a").Do(func() error { return d.WatchLink(done, func(up bool) { states <- up }) }); err != nil {
		t.Fatal(err)
	}
	peer := tp.NS("b")
	for _, up := range []bool{false, true} {
		l, err := peer.Link("veth0")
		if err != nil {
			t.Fatal(err)
		}
		set := peer.Netlink().LinkSetDown
		if up {
			set = peer.Netlink().LinkSetUp
		}
		if err := set(l); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-states:
			if got != up || d.LinkUp() != up {
				t.Fatalf("reported up=%v (LinkUp %v), want %v", got, d.LinkUp(), up)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no report of up=%v", up)
		}
	}
}
