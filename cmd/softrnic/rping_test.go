package main

import (
	"github.com/vishvananda/netlink"

	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/topo"
)

// TestRpingCommand runs `softrnic rping -s` and `-c` in two namespaces
// joined by a veth pair (root only): connected through the connection
// manager, five validated pings, both sides print them, the client's
// disconnect ends the server.
func TestRpingCommand(t *testing.T) {
	tp := topo.New(t, topo.PairSpec(1500, 1))
	var sout, cout bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		serr <- tp.NS("a").Do(func() error { return runRping([]string{"-s", "-v", "--dev", "veth0", "-S", "200"}, &sout) })
	}()
	time.Sleep(500 * time.Millisecond) // the server's agent up
	err := tp.NS("b").Do(func() error {
		return runRping([]string{"-c", "-v", "-V", "-C", "5", "-S", "200", "--dev", "veth0", "-a", "10.47.0.1"}, &cout)
	})
	if err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	select {
	case err := <-serr:
		if err != nil {
			t.Fatalf("server: %v\n%s", err, sout.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not end when the client disconnected")
	}
	if n := strings.Count(cout.String(), "ping data: rdma-ping-"); n != 5 {
		t.Errorf("the client printed %d pings:\n%s", n, cout.String())
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-"); n != 5 {
		t.Errorf("the server printed %d pings:\n%s", n, sout.String())
	}
}

func TestRpingUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dev", "lo"}, "one of -s"},
		{[]string{"-s", "-c", "--dev", "lo"}, "one of -s"},
		{[]string{"-s"}, "--dev"},
		{[]string{"-c", "--dev", "lo"}, "-c needs -a"},
		{[]string{"-s", "--dev", "lo", "-S", "10"}, "Invalid size 10"},
		{[]string{"-c", "--dev", "lo", "-a", "nowhere"}, "an IP address"},
		{[]string{"-s", "--dev", "lo", "-p", "0"}, "-p 0"},
	} {
		err := runRping(tc.args, &bytes.Buffer{})
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestMetricsListenFirst: --metrics on loopback in a namespace whose
// loopback device is down fails at once, saying why, before the NIC opens
// (it used to open the NIC and leave the server waiting).
func TestMetricsListenFirst(t *testing.T) {
	tp := topo.New(t, topo.PairSpec(1500, 1))
	ns := tp.NS("a")
	// As in a fresh namespace: lo down, and so without 127.0.0.1.
	lo, err := ns.Link("lo")
	if err == nil {
		err = ns.Netlink().LinkSetDown(lo)
	}
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := ns.Netlink().AddrList(lo, netlink.FAMILY_ALL)
	for _, a := range addrs {
		ns.Netlink().AddrDel(lo, &a)
	}
	done := make(chan error, 1)
	go func() {
		done <- ns.Do(func() error {
			return runRping([]string{"-s", "--dev", "veth0", "--metrics", "127.0.0.1:19555"}, &bytes.Buffer{})
		})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "--metrics 127.0.0.1:19555") || !strings.Contains(err.Error(), "ip link set lo up") {
			t.Errorf("err %v, want the listener's failure and the hint", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not fail: it waits for a client with no metrics listener")
	}
}
