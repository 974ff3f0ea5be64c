package tests

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestFreshBridgedVeth: a NIC on the xsk port of a veth that has just
// had an XDP program attached, behind a bridge (as the rxe VM's tap is
// bridged to a veth in make interop-loss), takes a peer's first packets.
// On a 6.x kernel where no XDP program has run for a while, bridged
// frames skip the veth's native XDP program for a few seconds after the
// attach and reach the kernel's UDP stack: without a socket on port 4791
// they are dropped with an ICMP error (librdmacm's first REQ gets it and
// rping gives up), and this RC QP, whose peer retries seven times 67 ms
// apart, would fail with retry exceeded. With the kernel UDP socket
// beside the XSK sockets (package kernelrx) every SEND completes, through
// whichever path the kernel took; the log says how many came through the
// socket (0 when the kernel ran the XDP program from the start, as after
// an earlier test's attach).
func TestFreshBridgedVeth(t *testing.T) {
	hostIP, guestIP := netip.MustParsePrefix("10.91.0.1/24"), netip.MustParsePrefix("10.91.0.2/24")
	spec := topo.Spec{Namespaces: []string{"host", "guest"}, Links: []topo.Link{
		{A: topo.End{NS: "host", Name: "srn0", Addrs: []netip.Prefix{hostIP}}, B: topo.End{NS: "host", Name: "srnb"}},
		{A: topo.End{NS: "guest", Name: "vg0", Addrs: []netip.Prefix{guestIP}}, B: topo.End{NS: "host", Name: "vgb"}},
	}}
	tp := topo.New(t, spec)
	host, guest := tp.NS("host"), tp.NS("guest")
	nl := host.Netlink()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := nl.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"srnb", "vgb"} {
		l, err := nl.LinkByName(port)
		if err == nil {
			err = nl.LinkSetMaster(l, br)
		}
		if err != nil {
			t.Fatalf("%s into the bridge: %v", port, err)
		}
	}
	if err := nl.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	mac := func(ns *topo.Namespace, name string) net.HardwareAddr {
		l, err := ns.Link(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().HardwareAddr
	}
	// Traffic before the NIC opens, as in make interop-loss (the guest's
	// ping): the bridge learns where srn0 is and forwards to it, not floods.
	for _, ns := range []*topo.Namespace{host, guest} {
		to := guestIP.Addr()
		if ns == guest {
			to = hostIP.Addr()
		}
		err := ns.Do(func() error {
			c, err := net.Dial("udp", netip.AddrPortFrom(to, 9).String())
			if err == nil {
				_, err = c.Write([]byte("hello"))
				c.Close()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the neighbours answer
	hostEnd := topo.End{NS: "host", Name: "srn0", MAC: mac(host, "srn0"), Addrs: []netip.Prefix{hostIP}}
	guestEnd := topo.End{NS: "guest", Name: "vg0", MAC: mac(guest, "vg0"), Addrs: []netip.Prefix{guestIP}}

	// The guest: a NIC on the kernel UDP port, whose frames cross the
	// bridge as any UDP traffic does.
	g := verbstest.NewEnd(t, openPort(t, guest, guestEnd, "udp"), wire.MAC(guestEnd.MAC), guestIP.Addr(), 1<<20)
	// The host: the first XDP program this veth has seen, and the kernel
	// UDP socket beside it.
	hostPort := openPort(t, host, hostEnd, "xsk")
	var h *verbstest.End
	host.Do(func() error { // the kernel UDP socket opens in the host's namespace
		h = verbstest.NewEndConfig(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC(hostEnd.MAC), IP: hostIP.Addr(), KernelRx: true}, Port: hostPort}, 1<<20)
		return nil
	})
	if !h.Dev.KernelRx() {
		t.Fatal("no kernel UDP socket beside the XSK socket")
	}
	verbstest.Connect(t, g, h, 3, 14)

	const sends, size = 50, 1024
	for i := range sends {
		if _, err := h.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: verbstest.SGL(h, i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	verbstest.Fill(g.Buf[:sends*size], 7)
	for i := range sends {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: verbstest.SGL(g, i*size, size)}
		if _, err := g.QP.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := verbstest.WaitWC(t, g.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND %d of %d: %v (the host's kernel_rx_frames: %d)", i+1, sends, wc.Status, h.Dev.NIC().Counters().KernelRxFrames.Load())
		}
		if wc := verbstest.WaitWC(t, h.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != size {
			t.Fatalf("receive %d: %+v", i+1, wc)
		}
	}
	for i := range sends * size {
		if h.Buf[i] != g.Buf[i] {
			t.Fatalf("byte %d differs", i)
		}
	}
	t.Logf("%d SENDs; the host took %d frames through the kernel's UDP stack", sends, h.Dev.NIC().Counters().KernelRxFrames.Load())
}
