package topo_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exchange sends one UDP datagram from namespace from to address to:port in
// namespace dst and returns what arrived and from where.
func exchange(t *testing.T, from, dst *topo.Namespace, to netip.Addr, msg string) (string, netip.Addr) {
	t.Helper()
	var server *net.UDPConn
	if err := dst.Do(func() (err error) {
		server, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, 0)))
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", dst.Name, err)
	}
	defer server.Close()
	var client *net.UDPConn
	if err := from.Do(func() (err error) {
		client, err = net.DialUDP("udp", nil, server.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatalf("dial from %s: %v", from.Name, err)
	}
	defer client.Close()
	if _, err := client.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, addr, err := server.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("%s -> %s (%v): %v", from.Name, dst.Name, to, err)
	}
	return string(buf[:n]), addr.Addr().Unmap()
}

// TestPair builds two namespaces joined by a veth pair, checks that each end
// has the MTU, queue count, MAC and addresses asked for, passes UDP datagrams
// both ways over IPv4 and IPv6, and checks that nothing is left afterwards.
func TestPair(t *testing.T) {
	spec := topo.PairSpec(9000, 2)
	tp, err := topo.Build(spec)
	if err != nil {
		if err == topo.ErrNotRoot {
			testenv.Unavailable(t, "%v", err)
		}
		t.Fatal(err)
	}
	a, b := tp.NS("a"), tp.NS("b")
	names := []string{a.FullName, b.FullName}
	for i, n := range []*topo.Namespace{a, b} {
		end := spec.Links[0].A
		if i == 1 {
			end = spec.Links[0].B
		}
		l, err := n.Link("veth0")
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		attrs := l.Attrs()
		if attrs.MTU != 9000 || attrs.NumRxQueues != 2 || attrs.NumTxQueues != 2 || attrs.HardwareAddr.String() != end.MAC.String() {
			t.Errorf("%s veth0: MTU %d, queues %d/%d, MAC %v", n.Name, attrs.MTU, attrs.NumRxQueues, attrs.NumTxQueues, attrs.HardwareAddr)
		}
		if l.Type() != "veth" {
			t.Errorf("%s veth0 is a %s", n.Name, l.Type())
		}
	}

	for _, c := range []struct {
		from, to *topo.Namespace
		addr     string
		src      string
	}{
		{a, b, "10.47.0.2", "10.47.0.1"},
		{b, a, "10.47.0.1", "10.47.0.2"},
		{a, b, "fd47::2", "fd47::1"},
		{b, a, "fd47::1", "fd47::2"},
	} {
		msg := "hello from " + c.from.Name
		got, src := exchange(t, c.from, c.to, netip.MustParseAddr(c.addr), msg)
		if got != msg || src.String() != c.src {
			t.Errorf("%s -> %s: got %q from %v, want %q from %s", c.from.Name, c.addr, got, src, msg, c.src)
		}
	}

	// The namespaces are named, so child processes can enter them.
	out, err := a.Command(context.Background(), "ip", "-o", "addr", "show", "dev", "veth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.47.0.1/24") {
		t.Errorf("ip addr in %s: %v\n%s", a.FullName, err, out)
	}

	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join("/var/run/netns", name)); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after Close (%v)", name, err)
		}
	}
	if err := tp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestChain builds three namespaces in a row, the middle one with two
// interfaces, and checks each link carries traffic on its own subnet.
func TestChain(t *testing.T) {
	p := netip.MustParsePrefix
	tp := topo.New(t, topo.Spec{
		Namespaces: []string{"left", "mid", "right"},
		Links: []topo.Link{
			{A: topo.End{NS: "left", Addrs: []netip.Prefix{p("10.48.1.1/24")}}, B: topo.End{NS: "mid", Name: "toleft", Addrs: []netip.Prefix{p("10.48.1.2/24")}}, MTU: 1500},
			{A: topo.End{NS: "mid", Name: "toright", Addrs: []netip.Prefix{p("10.48.2.1/24")}}, B: topo.End{NS: "right", Addrs: []netip.Prefix{p("10.48.2.2/24")}}, MTU: 4200, Queues: 4},
		},
	})
	if got, _ := exchange(t, tp.NS("left"), tp.NS("mid"), netip.MustParseAddr("10.48.1.2"), "l"); got != "l" {
		t.Errorf("left -> mid: %q", got)
	}
	if got, _ := exchange(t, tp.NS("right"), tp.NS("mid"), netip.MustParseAddr("10.48.2.1"), "r"); got != "r" {
		t.Errorf("right -> mid: %q", got)
	}
	l, err := tp.NS("right").Link("veth1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().MTU != 4200 || l.Attrs().NumRxQueues != 4 {
		t.Errorf("right veth1: MTU %d queues %d", l.Attrs().MTU, l.Attrs().NumRxQueues)
	}
}

func TestBadSpec(t *testing.T) {
	testenv.RequireRoot(t)
	for name, spec := range map[string]topo.Spec{
		"duplicate namespace": {Namespaces: []string{"a", "a"}},
		"unknown namespace":   {Namespaces: []string{"a"}, Links: []topo.Link{{A: topo.End{NS: "a"}, B: topo.End{NS: "z"}}}},
		"name too long":       {Namespaces: []string{"a", "b"}, Links: []topo.Link{{A: topo.End{NS: "a", Name: "a-very-long-interface-name"}, B: topo.End{NS: "b"}}}},
	} {
		tp, err := topo.Build(spec)
		if err == nil {
			tp.Close()
			t.Errorf("%s: Build succeeded", name)
		}
	}
}

// TestUnprivileged runs this package's tests again as user nobody: outside
// CI every namespace test skips, saying it needs root, and the package
// passes; under CI (CI=true) every one of them fails instead, so a CI run
// without privileges cannot pass without running them.
func TestUnprivileged(t *testing.T) {
	testenv.RequireRoot(t) // to drop to nobody
	setpriv := testenv.RequireTool(t, "setpriv", "apt-get install util-linux")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody can run: the test binary's own folder is root's alone.
	dir, err := os.MkdirTemp("", "topo-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "topo.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	namespaceTests := []string{"TestPair", "TestChain", "TestBadSpec", "TestUnprivileged"}
	for _, tc := range []struct {
		ci   string
		fail bool
	}{{"", false}, {"true", true}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.v", "-test.count=1")
			cmd.Dir = dir
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "CI=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, "CI="+tc.ci)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("%v\n%s", err, out)
			}
			if failed := err != nil; failed != tc.fail {
				t.Errorf("CI=%q as nobody: exit %v, want failure %v\n%s", tc.ci, err, tc.fail, out)
			}
			want := "--- SKIP: "
			if tc.fail {
				want = "--- FAIL: "
			}
			for _, name := range namespaceTests {
				if !strings.Contains(string(out), want+name+" ") {
					t.Errorf("CI=%q as nobody: no %q\n%s", tc.ci, want+name, out)
				}
			}
			if !strings.Contains(string(out), "needs root") {
				t.Errorf("CI=%q as nobody: no reason given\n%s", tc.ci, out)
			}
		})
	}
}
