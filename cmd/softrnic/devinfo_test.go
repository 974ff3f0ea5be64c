package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestDevinfo: softrnic devinfo -j on a veth (root): its GID table is
// the netdev's addresses as `ip addr` lists them (the link-local one, from
// the MAC, first; then IPv4, then the other IPv6 ones), the port is xsk
// with its XDP mode and one queue, the state ACTIVE, the active MTU the
// netdev's; and the text form says the same.
func TestDevinfo(t *testing.T) {
	tp := topo.New(t, topo.PairSpec(1500, 1))
	ns := tp.NS("a")
	var out, text bytes.Buffer
	err := ns.Do(func() error {
		if err := runDevinfo([]string{"-j", "veth0"}, &out); err != nil {
			return err
		}
		return runDevinfo([]string{"veth0"}, &text)
	})
	if err != nil {
		t.Fatal(err)
	}
	var info devInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	ipOut, err := ns.Command(context.Background(), "ip", "-j", "addr", "show", "dev", "veth0").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	var links []struct {
		Addrs []struct {
			Local string `json:"local"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(ipOut, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j addr: %v %s", err, ipOut)
	}
	var want, v4, v6 []string
	for _, a := range links[0].Addrs {
		ip := netip.MustParseAddr(a.Local)
		switch {
		case ip.IsLinkLocalUnicast():
			want = append(want, ip.String()) // the MAC's EUI-64: index 0
		case ip.Is4():
			v4 = append(v4, ip.String())
		default:
			v6 = append(v6, ip.String())
		}
	}
	want = append(append(want, v4...), v6...)
	var got []string
	for i, g := range info.GIDs {
		if g.Index != i || g.Type != "RoCE v2" {
			t.Errorf("GID %d: %+v", i, g)
		}
		got = append(got, g.Addr)
	}
	if !slices.Equal(got, want) {
		t.Errorf("GID table %v, ip addr lists %v", got, want)
	}
	if info.Port != "xsk" || info.XDPMode == "" || info.Queues != 1 || info.State != "PORT_ACTIVE (4)" || info.ActiveMTU != 1024 || info.Addr != "10.47.0.1" {
		t.Errorf("device: %+v", info)
	}
	for _, s := range []string{"hca_id:\tsoftrnic_veth0", "PORT_ACTIVE (4)", "active_mtu:\t\t1024 (3)", "GID[  1]:\t\t::ffff:10.47.0.1, RoCE v2", "xsk (AF_XDP sockets, XDP "} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("the text lacks %q:\n%s", s, text.String())
		}
	}
}

// TestDevinfoREADME: README's devinfo example is what devinfo prints on
// the loopback device, figures aside.
func TestDevinfoREADME(t *testing.T) {
	var out bytes.Buffer
	if err := runDevinfo([]string{"lo"}, &out); err != nil {
		t.Skipf("no device on lo here: %v", err)
	}
	testenv.CheckREADME(t, "../../README.md", "On the loopback device, with no root:", out.String())
}
