package datapath

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// joinPort is a test port that records the groups it is asked to join.
type joinPort struct {
	*testPort
	joined []netip.Addr
	refuse bool
}

func (p *joinPort) JoinMulticast(g netip.Addr) error {
	if p.refuse {
		return errors.New("no multicast here")
	}
	p.joined = append(p.joined, g)
	return nil
}

func (p *joinPort) LeaveMulticast(g netip.Addr) error {
	p.joined = slices.DeleteFunc(p.joined, func(x netip.Addr) bool { return x == g })
	return nil
}

// The multicast table: a group's first QP joins it on the port, its last
// leaves it; a QP attached twice counts once; the table's capacities
// hold; a port that refuses the group refuses the attach; a detach of a
// QP not attached fails.
func TestMulticastTable(t *testing.T) {
	jp := &joinPort{testPort: &testPort{}}
	h := newHarnessOn(t, jp.testPort, func(c *NICConfig) { c.Ports = []Port{jp}; c.MaxQPs = 64 })
	n := h.nic
	g := netip.MustParseAddr("239.0.0.1")
	for _, qpn := range []uint32{3, 4, 3} {
		if err := n.AttachMulticast(g, qpn); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.mcast.qpsOf(g); !slices.Equal(got, []uint32{3, 4}) {
		t.Errorf("group holds %v, want [3 4]", got)
	}
	if !slices.Equal(jp.joined, []netip.Addr{g}) {
		t.Errorf("the port joined %v, want %v once", jp.joined, g)
	}
	if err := n.DetachMulticast(g, 3); err != nil {
		t.Fatal(err)
	}
	if len(jp.joined) != 1 {
		t.Error("the port left the group while a QP was still attached")
	}
	if err := n.DetachMulticast(g, 4); err != nil || len(jp.joined) != 0 || n.mcast.qpsOf(g) != nil {
		t.Errorf("the last detach: %v, joined %v, table %v", err, jp.joined, n.mcast.qpsOf(g))
	}
	if err := n.DetachMulticast(g, 4); err == nil {
		t.Error("a detach of a QP not attached passed")
	}
	for qpn := range uint32(MaxMulticastQPs) {
		if err := n.AttachMulticast(g, qpn); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.AttachMulticast(g, MaxMulticastQPs); !errors.Is(err, ErrMulticastFull) {
		t.Errorf("a group's QP beyond %d: %v, want ErrMulticastFull", MaxMulticastQPs, err)
	}
	for i := range MaxMulticastGroups - 1 {
		if err := n.AttachMulticast(netip.AddrFrom4([4]byte{239, 1, byte(i >> 8), byte(i)}), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.AttachMulticast(netip.MustParseAddr("239.2.0.0"), 1); !errors.Is(err, ErrMulticastFull) {
		t.Errorf("a group beyond %d: %v, want ErrMulticastFull", MaxMulticastGroups, err)
	}
	jp.refuse = true
	n.DetachMulticast(netip.AddrFrom4([4]byte{239, 1, 0, 0}), 1)
	if err := n.AttachMulticast(netip.MustParseAddr("239.3.0.0"), 1); err == nil {
		t.Error("a port that refuses the group: the attach passed")
	}
	if err := n.AttachMulticast(netip.MustParseAddr("10.0.0.1"), 1); err == nil {
		t.Error("a unicast address: the attach passed")
	}
}
