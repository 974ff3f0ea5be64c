package datapath

// Multicast: UD QPs attached to a group (NIC.AttachMulticast) each take
// a copy of the datagrams sent to the group's address with the multicast
// QPN, as an RNIC replicates a multicast packet to every QP attached to
// its group (IBTA 10.5.3). The groups are a fixed-capacity table the
// engines read without a lock: attaching and detaching (the control
// path) build a new table and swap it in.

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
)

// MulticastQPN is the destination QP of a multicast datagram.
const MulticastQPN = 0xFFFFFF

// The multicast table's capacity: groups a NIC takes (the kernel's
// igmp_max_memberships default, the groups one socket may hold for the
// xsk port's interface), and QPs attached to each.
const (
	MaxMulticastGroups = 20
	MaxMulticastQPs    = 16
)

// ErrMulticastFull: the NIC takes no more groups, or the group no more
// QPs (MaxMulticastGroups, MaxMulticastQPs).
var ErrMulticastFull = errors.New("datapath: multicast table full")

// MulticastJoiner is a port that must be told of the multicast groups
// the NIC takes: it joins them on its interface (a real NIC's filter
// lets the group's frames in), or says it cannot take them.
type MulticastJoiner interface {
	JoinMulticast(group netip.Addr) error
	LeaveMulticast(group netip.Addr) error
}

// mcastGroups is the NIC's multicast table: a group's address and the
// QPs attached to it. A table, once published, is never changed.
type mcastGroups struct {
	mu     sync.Mutex // attaches and detaches, one at a time
	groups atomic.Pointer[map[netip.Addr][]uint32]
}

// qpsOf is the QPs attached to group (none: nil).
func (m *mcastGroups) qpsOf(group netip.Addr) []uint32 {
	t := m.groups.Load()
	if t == nil {
		return nil
	}
	return (*t)[group]
}

// AttachMulticast attaches UD QP qpn to the multicast group at address
// group (ibv_attach_mcast): the QP takes a copy of each datagram sent to
// the group. The first QP of a group joins it on every port that must
// join (MulticastJoiner). Attaching a QP twice does nothing.
func (n *NIC) AttachMulticast(group netip.Addr, qpn uint32) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("datapath: %s is not a multicast address", group)
	}
	if qpn >= uint32(len(n.qps)) {
		return fmt.Errorf("datapath: QP %d out of range", qpn)
	}
	m := &n.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	var old map[netip.Addr][]uint32
	if t := m.groups.Load(); t != nil {
		old = *t
	}
	qps, ok := old[group]
	if slices.Contains(qps, qpn) {
		return nil
	}
	switch {
	case !ok && len(old) >= MaxMulticastGroups, len(qps) >= MaxMulticastQPs:
		return ErrMulticastFull
	}
	if !ok {
		for i, p := range n.cfg.Ports {
			j, isJoiner := p.(MulticastJoiner)
			if !isJoiner {
				continue
			}
			if err := j.JoinMulticast(group); err != nil {
				for _, q := range n.cfg.Ports[:i] {
					if j, ok := q.(MulticastJoiner); ok {
						j.LeaveMulticast(group)
					}
				}
				return err
			}
		}
	}
	t := maps.Clone(old)
	if t == nil {
		t = map[netip.Addr][]uint32{}
	}
	t[group] = append(slices.Clone(qps), qpn)
	m.groups.Store(&t)
	return nil
}

// DetachMulticast detaches QP qpn from group (ibv_detach_mcast); the
// group's last QP leaves it on the ports. A QP not attached is an error,
// as ibv_detach_mcast's.
func (n *NIC) DetachMulticast(group netip.Addr, qpn uint32) error {
	group = group.Unmap()
	m := &n.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.groups.Load()
	if t == nil {
		return fmt.Errorf("datapath: QP %d is not attached to %s", qpn, group)
	}
	qps := (*t)[group]
	i := slices.Index(qps, qpn)
	if i < 0 {
		return fmt.Errorf("datapath: QP %d is not attached to %s", qpn, group)
	}
	nt := maps.Clone(*t)
	if len(qps) == 1 {
		delete(nt, group)
		for _, p := range n.cfg.Ports {
			if j, ok := p.(MulticastJoiner); ok {
				j.LeaveMulticast(group)
			}
		}
	} else {
		nt[group] = slices.Delete(slices.Clone(qps), i, i+1)
	}
	m.groups.Store(&nt)
	return nil
}

// receiveMulticast gives a multicast datagram to each QP of this engine
// attached to its destination's group, as receive gives a datagram to
// its one QP; a QP that must wait parks a copy of its own. The QPs of
// other engines get the frame handed over, once per engine (an engine
// that took it handed over gives it to its own QPs only).
func (e *engine) receiveMulticast(fr *Frame, p *wire.Packet) {
	var dst netip.Addr
	if p.IPv6 {
		dst = p.IPv6Header().Dst()
	} else {
		dst = p.IPv4Header().Dst()
	}
	qps := e.nic.mcast.qpsOf(dst.Unmap())
	if len(qps) == 0 || p.Info.Transport != wire.TransportUD {
		e.counters.RcvdUnknownQP.Add(1) // a group this NIC has not joined
		return
	}
	if !wire.PKeyMatch(p.BTH().PKey(), wire.DefaultPKey) {
		e.counters.RcvdBadPKey.Add(1)
		return
	}
	rxPort := e.rxPort
	e.rxPort = false // a QP that parks the datagram keeps a copy: the frame is every QP's
	for _, qpn := range qps {
		if e.nic.owner(qpn) != e {
			continue
		}
		e.counters.McastRecvs.Add(1)
		if e.qps[qpn].parkN > 0 {
			e.parkPacket(qpn, fr, p)
			continue
		}
		var q hostmem.QPCEntry
		if e.mustWait(qpn, p, &q) || e.dispatch(qpn, p, &q) {
			e.parkPacket(qpn, fr, p)
		}
	}
	e.rxPort = rxPort
	if e.inHandoff {
		return
	}
	for _, to := range e.nic.engines {
		if to == e {
			continue
		}
		for _, qpn := range qps {
			if e.nic.owner(qpn) == to {
				e.handOff(to, fr, true)
				break
			}
		}
	}
}
