// Package topo builds throw-away network topologies for integration tests:
// network namespaces joined by veth pairs, each end with a chosen name, MTU,
// queue count, MAC address and IP addresses, torn down when the test ends.
//
// The usual topology is Pair's: two namespaces and one veth pair.
//
//	    netns <prefix>-a                            netns <prefix>-b
//	+--------------------------+                +--------------------------+
//	| lo                       |                | lo                       |
//	| veth0  02:53:52:00:00:01 |<==== veth ====>| veth0  02:53:52:00:00:02 |
//	|        10.47.0.1/24      |   MTU and      |        10.47.0.2/24      |
//	|        fd47::1/64        |   queues set   |        fd47::2/64        |
//	+--------------------------+   per link     +--------------------------+
//
// Any number of namespaces and links can be described with a Spec. The
// namespaces are named (under /var/run/netns), so `ip netns exec` and
// Namespace.Command reach them from scripts and child processes; Namespace.Do
// runs Go code inside one (sockets opened there stay there).
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Without it
// New skips the test with a message, or fails it under CI (CI set, e.g.
// CI=true), where every test must run (internal/testenv decides).
package topo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/testenv"
)

// Spec describes a topology.
type Spec struct {
	// Namespaces are the logical names of the namespaces to create.
	Namespaces []string
	// Links are the veth pairs between them.
	Links []Link
}

// Link is one veth pair.
type Link struct {
	A, B End
	// MTU of both ends; 0 means 1500.
	MTU int
	// Queues is the number of RX and TX queues of both ends; 0 means 1.
	Queues int
}

// End is one end of a veth pair.
type End struct {
	NS    string           // logical namespace name, one of Spec.Namespaces
	Name  string           // interface name (at most 15 bytes); "" means veth<link index>
	MAC   net.HardwareAddr // nil lets the kernel choose
	Addrs []netip.Prefix   // IPv4 and IPv6 addresses with their prefix lengths
}

// Topo is a built topology.
type Topo struct {
	prefix string
	ns     map[string]*Namespace
	order  []*Namespace
}

// Namespace is one network namespace of a topology.
type Namespace struct {
	Name     string // logical name from the Spec
	FullName string // name under /var/run/netns
	handle   netns.NsHandle
	nl       *netlink.Handle
}

var (
	seq       atomic.Uint32
	sweepOnce sync.Once
)

// sweep deletes the namespaces of test processes that died before their
// cleanup ran; their names carry the pid.
func sweep() {
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		var pid, n int
		if _, err := fmt.Sscanf(e.Name(), "srn%d-%d-", &pid, &n); err != nil || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			netns.DeleteNamed(e.Name())
		}
	}
}

// netnsDir is where named namespaces live.
const netnsDir = "/var/run/netns"

// ErrNotRoot is returned by Build when the process lacks the privileges to
// create namespaces.
var ErrNotRoot = errors.New("topo: creating network namespaces needs root")

// New builds the topology for a test and removes it when the test ends.
// Without root it skips the test, saying why, or fails it under CI.
func New(tb testing.TB, spec Spec) *Topo {
	tb.Helper()
	t, err := Build(spec)
	if errors.Is(err, ErrNotRoot) {
		testenv.Unavailable(tb, "%v (running as uid %d): run the tests as root to cross real namespaces", err, os.Geteuid())
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := t.Close(); err != nil {
			tb.Errorf("topo: %v", err)
		}
	})
	return t
}

// PairSpec is the topology Pair builds: namespaces "a" and "b" joined by
// veth0, with the addresses in the package diagram.
func PairSpec(mtu, queues int) Spec {
	return Spec{
		Namespaces: []string{"a", "b"},
		Links: []Link{{
			A: End{NS: "a", Name: "veth0", MAC: net.HardwareAddr{0x02, 0x53, 0x52, 0, 0, 1},
				Addrs: []netip.Prefix{netip.MustParsePrefix("10.47.0.1/24"), netip.MustParsePrefix("fd47::1/64")}},
			B: End{NS: "b", Name: "veth0", MAC: net.HardwareAddr{0x02, 0x53, 0x52, 0, 0, 2},
				Addrs: []netip.Prefix{netip.MustParsePrefix("10.47.0.2/24"), netip.MustParsePrefix("fd47::2/64")}},
			MTU:    mtu,
			Queues: queues,
		}},
	}
}

// Pair builds PairSpec(mtu, queues) for a test.
func Pair(tb testing.TB, mtu, queues int) *Topo { return New(tb, PairSpec(mtu, queues)) }

// Build creates the topology. The caller must Close it.
func Build(spec Spec) (_ *Topo, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	sweepOnce.Do(sweep)
	t := &Topo{
		prefix: fmt.Sprintf("srn%d-%d", os.Getpid(), seq.Add(1)),
		ns:     map[string]*Namespace{},
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, name := range spec.Namespaces {
		if _, dup := t.ns[name]; dup {
			return nil, fmt.Errorf("topo: namespace %q named twice", name)
		}
		n, err := newNamespace(name, t.prefix+"-"+name)
		if err != nil {
			return nil, err
		}
		t.ns[name] = n
		t.order = append(t.order, n)
	}
	for i, l := range spec.Links {
		if err := t.addLink(i, l); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func newNamespace(name, full string) (*Namespace, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("topo: current namespace: %w", err)
	}
	defer origin.Close()
	h, err := netns.NewNamed(full) // moves this thread into the new namespace
	if err == nil {
		// Addresses usable at once: no duplicate address detection, which
		// would hold IPv6 link-local addresses (and neighbour discovery
		// from them) back for seconds.
		for _, conf := range []string{"all", "default"} {
			os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0)
			os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/dad_transmits", []byte("0"), 0)
		}
	}
	if serr := netns.Set(origin); serr != nil {
		// The thread is stuck in another namespace: let it die with the goroutine.
		runtime.LockOSThread()
		return nil, fmt.Errorf("topo: back to the original namespace: %w", serr)
	}
	if errors.Is(err, unix.EPERM) {
		return nil, ErrNotRoot
	}
	if err != nil {
		return nil, fmt.Errorf("topo: create namespace %s: %w", full, err)
	}
	n := &Namespace{Name: name, FullName: full, handle: h}
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		n.close()
		return nil, fmt.Errorf("topo: netlink in %s: %w", full, err)
	}
	lo, err := n.nl.LinkByName("lo")
	if err == nil {
		err = n.nl.LinkSetUp(lo)
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("topo: bring up lo in %s: %w", full, err)
	}
	return n, nil
}

func (t *Topo) addLink(i int, l Link) error {
	a, b := t.ns[l.A.NS], t.ns[l.B.NS]
	if a == nil || b == nil {
		return fmt.Errorf("topo: link %d joins unknown namespaces %q and %q", i, l.A.NS, l.B.NS)
	}
	nameA, nameB := l.A.Name, l.B.Name
	if nameA == "" {
		nameA = fmt.Sprintf("veth%d", i)
	}
	if nameB == "" {
		nameB = fmt.Sprintf("veth%d", i)
	}
	mtu, queues := l.MTU, l.Queues
	if mtu == 0 {
		mtu = 1500
	}
	if queues == 0 {
		queues = 1
	}
	// The peer is created straight in B's namespace, so both ends may have
	// the same name.
	attrs := netlink.NewLinkAttrs()
	attrs.Name = nameA
	attrs.MTU = mtu
	attrs.NumTxQueues, attrs.NumRxQueues = queues, queues
	attrs.HardwareAddr = l.A.MAC
	attrs.TxQLen = 1000
	veth := &netlink.Veth{
		LinkAttrs:        attrs,
		PeerName:         nameB,
		PeerHardwareAddr: l.B.MAC,
		PeerNamespace:    netlink.NsFd(int(b.handle)),
		PeerTxQLen:       1000,
		PeerNumTxQueues:  uint32(queues),
		PeerNumRxQueues:  uint32(queues),
		PeerMTU:          uint32(mtu),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("topo: add veth %s/%s - %s/%s: %w", a.FullName, nameA, b.FullName, nameB, err)
	}
	if err := a.setUp(nameA, l.A.Addrs); err != nil {
		return err
	}
	return b.setUp(nameB, l.B.Addrs)
}

// setUp adds addresses to an interface and brings it up. IPv6 addresses skip
// duplicate address detection so they are usable at once.
func (n *Namespace) setUp(name string, addrs []netip.Prefix) error {
	link, err := n.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("topo: %s in %s: %w", name, n.FullName, err)
	}
	for _, p := range addrs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := n.nl.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("topo: add %v to %s in %s: %w", p, name, n.FullName, err)
		}
	}
	if err := n.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("topo: bring up %s in %s: %w", name, n.FullName, err)
	}
	return nil
}

// NS returns the namespace with the given logical name, or nil.
func (t *Topo) NS(name string) *Namespace { return t.ns[name] }

// Close deletes every namespace, and with them their veth ends. It is safe
// to call more than once.
func (t *Topo) Close() error {
	var errs []error
	for _, n := range t.order {
		if err := n.close(); err != nil {
			errs = append(errs, err)
		}
	}
	t.order = nil
	return errors.Join(errs...)
}

func (n *Namespace) close() error {
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.handle.IsOpen() {
		n.handle.Close()
	}
	if n.FullName == "" {
		return nil
	}
	err := netns.DeleteNamed(n.FullName)
	n.FullName = ""
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens
// belong to the namespace and may be used from any goroutine afterwards;
// goroutines fn starts run outside it.
func (n *Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer origin.Close()
		if err := netns.Set(n.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("topo: enter %s: %w", n.FullName, err)
			return
		}
		err = fn()
		if serr := netns.Set(origin); serr != nil {
			// Leave the thread locked: it ends with this goroutine
			// instead of running other goroutines in the wrong namespace.
			errc <- errors.Join(err, serr)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Command returns a command that runs name with args inside the namespace.
func (n *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.FullName, name}, args...)...)
}

// Link returns an interface of the namespace.
func (n *Namespace) Link(name string) (netlink.Link, error) { return n.nl.LinkByName(name) }

// Netlink returns a netlink handle that acts inside the namespace.
func (n *Namespace) Netlink() *netlink.Handle { return n.nl }
